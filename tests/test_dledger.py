"""DLedger commit-log groups (issue 36): the spec's `replication: dledger` topology and its validation
(pure logic, fast), and one real group of three replicas whose leader is killed.

Subnet 127.0.63.0/24, ports 29076 and 29109..29120: no other test uses them."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster.plan.nodes import addresses, plan, render_config
from rmqchaos.spec import SpecError, dump_scenario, parse_scenario

DL = """name: dl
cluster:
  subnet: 127.0.63.0/24
  namesrv: {port: 29076}
  broker_defaults:
    config: {brokerRole: ASYNC_MASTER, flushDiskType: ASYNC_FLUSH}
  brokers:
    - {name: broker-a, port: 29111, replicas: 3, replication: dledger}
    - {name: broker-b, port: 29131}
"""


def err(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_scenario(text, "t.yaml")
    return e.value.lines


@pytest.mark.fast
def test_a_dledger_group_is_three_replicas_each_its_own_node_address_store_and_peer_port() -> None:
    s = parse_scenario(DL, "t.yaml")
    assert s.cluster.controllers is None  # a DLedger group elects among its own replicas
    assert s.cluster.node_names() == ["namesrv", "broker-a-0", "broker-a-1", "broker-a-2", "broker-b"]
    at = addresses(s)
    assert [at[f"broker-a-{r}"] for r in range(3)] == ["127.0.63.11", "127.0.63.12", "127.0.63.13"]
    nodes = {p.name: p for p in plan(s)}
    peers = "n0-127.0.63.11:29110;n1-127.0.63.12:29114;n2-127.0.63.13:29118"
    for r in range(3):
        p = nodes[f"broker-a-{r}"]
        main = 29111 + 4 * r
        assert (p.role, p.replication, p.broker_name, p.broker_id) == ("replica", "dledger", "broker-a", -1)
        assert p.ports == [main, main - 2, main + 1, main - 1]  # fast, HA, and DLedger's peer port
        assert {k: p.conf[k] for k in ("enableDLegerCommitLog", "dLegerGroup", "dLegerPeers", "dLegerSelfId",
                                       "brokerIP1", "bindAddress", "flushDiskType")} == {
            "enableDLegerCommitLog": True, "dLegerGroup": "broker-a", "dLegerPeers": peers,
            "dLegerSelfId": f"n{r}", "brokerIP1": p.host, "bindAddress": p.host, "flushDiskType": "ASYNC_FLUSH"}
        # no controller-mode key, and no brokerRole: DLedger gives the role (a SLAVE with id -1 would
        # not even start), so the defaults' ASYNC_MASTER does not apply
        assert not {"brokerRole", "enableControllerMode", "controllerAddr"} & set(p.conf)
        assert f"storePathRootDir=/run/{p.name}/store\n" in render_config(p, f"/run/{p.name}/store")[1]
    b = nodes["broker-b"]  # the classic group beside it: untouched
    assert (b.role, b.replication, b.conf["brokerRole"], b.ports) == ("master", None, "ASYNC_MASTER", [29131, 29129, 29132])
    assert "enableDLegerCommitLog" not in b.conf


@pytest.mark.fast
def test_replicas_alone_still_mean_controller_mode_and_the_resolved_scenario_says_so() -> None:
    s = parse_scenario(DL.replace(", replication: dledger", "") + "  controllers: {count: 3, port: 29078}\n", "t.yaml")
    a = s.cluster.broker("broker-a")
    assert (a.replication, a.controller_mode, a.dledger) == ("controller", True, False)
    assert s.cluster.broker("broker-b").replication is None
    d = parse_scenario(DL, "t.yaml")
    assert parse_scenario(dump_scenario(d), "scenario.yaml") == d


@pytest.mark.fast
@pytest.mark.parametrize("text, line", [
    (DL.replace("replicas: 3, replication", "replicas: 2, replication"),
     "t.yaml:8: cluster.brokers[0].replicas: a DLedger group needs at least 3 replicas (got 2): Raft commits on a "
     "majority, and only 3 or more keep one with a replica down"),
    (DL.replace("replication: dledger}", "replication: dledger, config: {allAckInSyncStateSet: true}}"),
     "t.yaml:8: cluster.brokers[0].config.allAckInSyncStateSet: allAckInSyncStateSet is a controller-mode key and "
     "broker-a replicates by DLedger (replication: dledger): drop it"),
    (DL.replace("replication: dledger}", "replication: dledger, config: {enableControllerMode: true}}"),
     "t.yaml:8: cluster.brokers[0].config.enableControllerMode: enableControllerMode is set by the platform; "
     "use brokers[].replicas"),
    (DL.replace("replication: dledger}", "replication: dledger, config: {dLegerPeers: x}}"),
     "t.yaml:8: cluster.brokers[0].config.dLegerPeers: dLegerPeers is set by the platform; use brokers[].replicas/port"),
    (DL.replace("replication: dledger}", "replication: dledger, config: {brokerRole: SYNC_MASTER}}"),
     "t.yaml:8: cluster.brokers[0].config.brokerRole: a DLedger replica's role is DLedger's (its leader runs as "
     "SYNC_MASTER, the others as SLAVE): drop brokerRole"),
    (DL.replace("replication: dledger}", "replication: dledger, config: {preferredLeaderId: n3}}"),
     "t.yaml:8: cluster.brokers[0].config.preferredLeaderId: preferredLeaderId names a replica: n0..n2 (replica r "
     "is n<r>), got 'n3'"),
    (DL.replace("replication: dledger}", "replication: dledger, slave: {}}"),
     "t.yaml:8: cluster.brokers[0].slave: a DLedger group (replication: dledger) has no fixed slave: drop slave"),
    (DL.replace("{name: broker-b, port: 29131}", "{name: broker-b, port: 29131, replication: dledger}"),
     "t.yaml:9: cluster.brokers[1].replication: replication applies to a replicated group: give broker-b "
     "`replicas:` (3 or more for dledger), or drop replication"),
    (DL.replace("{name: broker-b, port: 29131}", "{name: broker-b, port: 29131, config: {preferredLeaderId: n0}}"),
     "t.yaml:9: cluster.brokers[1].config.preferredLeaderId: preferredLeaderId applies only to a DLedger group "
     "(replicas with replication: dledger)"),
    (DL.replace("replication: dledger}", "replication: dlegder}"),
     "t.yaml:8: cluster.brokers[0].replication: Input should be 'controller' or 'dledger' (got 'dlegder')"),
    # replica 0's DLedger port (29110) is namesrv's
    (DL.replace("{port: 29076}", "{port: 29110}"),
     "t.yaml:8: cluster.brokers[0].port: port 29110 (from port 29111, which also uses port-2, port-1 (DLedger) and "
     "port+1) collides with cluster.namesrv.port"),
    (DL.replace("subnet:", "backend: docker\n  subnet:"),
     "t.yaml:9: cluster.brokers[0].replication: a DLedger group runs on the local backend only (so far)"),
    # controllers only DLedger groups would have: nobody uses them
    (DL + "  controllers: {count: 3, port: 29078}\n",
     "t.yaml:10: cluster.controllers: no broker group uses the controllers: give a group `replicas:` (controller "
     "mode) or drop cluster.controllers"),
])
def test_a_dledger_group_of_the_wrong_shape_is_one_line_naming_file_line_and_key(text: str, line: str) -> None:
    assert err(text) == [line]


@pytest.mark.fast
def test_a_controller_mode_group_still_needs_controllers_beside_a_dledger_group() -> None:
    text = DL.replace("{name: broker-b, port: 29131}", "{name: broker-b, port: 29131, replicas: 3}")
    assert err(text) == ["t.yaml:9: cluster.brokers[1].replicas: broker-b is a controller-mode group (replicas: 3) "
                         "but the cluster has no controllers: add cluster.controllers (e.g. {mode: standalone, count: 3})"]


@pytest.mark.fast
def test_a_dledger_group_is_ready_with_a_replica_as_id_0_and_every_replica_registered_and_its_master_follows_id_0() -> None:
    from cluster.backend import ClusterBackend

    class Stub(ClusterBackend):  # the readiness condition alone: namesrv's registrations
        reg: dict | None = {}
        up = down = status = node = spawn_client = run_tool = lambda *a, **k: None  # type: ignore[assignment]

        def registered(self):  # type: ignore[override]
            return self.reg

    Stub.__abstractmethods__ = frozenset()
    c = Stub(None, parse_scenario(DL, "t.yaml"))  # type: ignore[arg-type]
    a = ["127.0.63.11:29111", "127.0.63.12:29115", "127.0.63.13:29119"]
    assert list(c.replica_groups("dledger")) == ["broker-a"] and c.controller_groups() == {}
    c.reg = None
    assert c.replicated() == {"broker-a": "an answer from namesrv"}
    c.reg = {"broker-a": {-1: a[0], 2: a[1]}}  # started, no leader yet
    assert c.replicated() == {"broker-a": "a leader elected by DLedger, listed as id 0 in namesrv"}
    c.reg = {"broker-a": {0: a[1], 1: a[0]}}
    assert c.replicated() == {"broker-a": "every replica registered in namesrv (not yet: broker-a-2)"}
    c.reg = {"broker-a": {0: a[1], 1: a[0], 3: a[2]}, "broker-b": {0: "127.0.63.21:29131"}}
    assert c.replicated() == {}
    assert [p.name for p in c.masters()] == ["broker-b", "broker-a-1"]  # the leader, as namesrv lists it
    c.reg = {"broker-a": {0: a[2], 1: a[0]}, "broker-b": {0: "127.0.63.21:29131"}}  # after a failover
    assert [p.name for p in c.masters()] == ["broker-b", "broker-a-2"]


# ---------------------------------------------------------------- a real DLedger group


@pytest.mark.long  # make test: tests/test_failover_run.py, a DLedger group's leader killed and another elected in a whole run
def test_killing_the_leader_of_a_dledger_group_lists_a_new_leader_as_id_0(tmp_path: Path) -> None:
    """broker-a as 3 DLedger replicas: after kill -9 of the leader, the other two elect a new one,
    which namesrv lists as brokerId 0 (what a producer's route takes); `down` ends every node."""
    import yaml

    from conftest import _start
    from pipeline.stages import down
    from rmqchaos.machine.procs import alive

    d = yaml.safe_load(DL)
    d["cluster"]["brokers"] = [d["cluster"]["brokers"][0]]
    d["cluster"]["namesrv"]["jvm"] = {"heap_mb": 128, "options": ["-XX:TieredStopAtLevel=1"]}
    d["cluster"]["broker_defaults"] = {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256,
                                               "options": ["-XX:TieredStopAtLevel=1"]}}
    d["cluster"].update({"ready_timeout": "60s", "stop_timeout": "3s"})
    t0 = time.monotonic()
    run, c = _start(tmp_path, d)
    try:
        up_s = time.monotonic() - t0
        replicas = {p.addr: p.name for p in c.replica_groups("dledger")["broker-a"]}
        reg = c.registered() or {}
        old = reg["broker-a"][0]
        assert old in replicas and set(reg["broker-a"].values()) == set(replicas)  # the steady state
        assert c.masters()[0].addr == old
        t_kill = time.monotonic()
        c.node(replicas[old]).kill()  # SIGKILL, as `rmqchaos cluster kill <node>`
        new = None
        while time.monotonic() - t_kill < 30:
            new = ((c.registered() or {}).get("broker-a") or {}).get(0)
            if new and new != old:
                break
            time.sleep(0.2)
        switch_s = time.monotonic() - t_kill
        assert new and new != old, f"no new leader of broker-a as id 0 in namesrv {switch_s:.1f}s after the kill"
        assert new in replicas and c.masters()[0].addr == new
        print(f"up {up_s:.1f}s; leader {old} killed; new leader {new} listed as id 0 in namesrv "
              f"{switch_s:.1f}s after the kill")
    finally:
        procs = [(r.pid, r.starttime) for r in run.processes.starts()]
        down.run(run)
    assert {r.node for r in run.processes.starts()} >= {"namesrv", "broker-a-0", "broker-a-1", "broker-a-2"}
    assert not [p for p in procs if alive(*p)]
