"""Controller mode (issue 36, first step): the spec's controller-mode topology and its validation
(pure logic, fast), and one real cluster: three standalone controllers and a group of three replicas
elect a new master when the master is killed, by faults on a role (`master-of:broker-a`,
`controller-leader`: tests/test_role_targets.py has their pure logic).

The fast tests' scenario: subnet 127.0.60.0/24, ports 26876..26932; the real cluster's: subnet
127.0.61.0/24, ports 27076..27120. No other test uses them."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster.plan.nodes import addresses, plan, render_config
from rmqchaos.spec import SpecError, dump_scenario, load_scenario, parse_scenario

REPO = Path(__file__).resolve().parent.parent

CTL = """name: ctl
cluster:
  subnet: 127.0.60.0/24
  namesrv: {port: 26876}
  controllers: {count: 3, port: 26878}
  broker_defaults:
    config: {allAckInSyncStateSet: true, brokerRole: ASYNC_MASTER}
  brokers:
    - {name: broker-a, port: 26911, replicas: 3}
    - {name: broker-b, port: 26931}
"""


def err(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_scenario(text, "t.yaml")
    return e.value.lines


@pytest.mark.fast
def test_a_controller_mode_group_is_three_replicas_each_its_own_node_address_store_and_controllers() -> None:
    s = parse_scenario(CTL, "t.yaml")
    assert s.cluster.node_names() == ["namesrv", "controller-0", "controller-1", "controller-2",
                                      "broker-a-0", "broker-a-1", "broker-a-2", "broker-b"]
    at = addresses(s)
    assert [at[f"controller-{k}"] for k in range(3)] == ["127.0.60.3", "127.0.60.4", "127.0.60.5"]
    assert [at[f"broker-a-{r}"] for r in range(3)] == ["127.0.60.11", "127.0.60.12", "127.0.60.13"]
    nodes = {p.name: p for p in plan(s)}
    ctl = "127.0.60.3:26878;127.0.60.4:26879;127.0.60.5:26880"
    for r in range(3):
        p = nodes[f"broker-a-{r}"]
        assert (p.role, p.broker_name, p.ports) == ("replica", "broker-a", [26911 + 4 * r, 26909 + 4 * r, 26912 + 4 * r])
        assert {k: p.conf[k] for k in ("brokerId", "brokerRole", "enableControllerMode", "controllerAddr",
                                       "brokerIP1", "brokerIP2", "allAckInSyncStateSet")} == {
            "brokerId": -1, "brokerRole": "SLAVE", "enableControllerMode": True, "controllerAddr": ctl,
            "brokerIP1": p.host, "brokerIP2": p.host, "allAckInSyncStateSet": True}
        assert f"storePathRootDir=/run/{p.name}/store\n" in render_config(p, f"/run/{p.name}/store")[1]
    name, text = render_config(nodes["controller-1"], "/run/controller-1/store")
    assert name == "controller.conf"
    assert ("controllerDLegerPeers=n0-127.0.60.3:26878;n1-127.0.60.4:26879;n2-127.0.60.5:26880\n"
            "controllerDLegerSelfId=n1\ncontrollerStorePath=/run/controller-1/store/controller\n") in text
    assert "listenPort=26879\nbindAddress=127.0.60.4\n" in text
    # the classic group beside it is the baseline, untouched: a master with its default role
    b = nodes["broker-b"]
    assert (b.role, b.conf["brokerId"], b.conf["brokerRole"]) == ("master", 0, "ASYNC_MASTER")
    assert "enableControllerMode" not in b.conf and "controllerAddr" not in b.conf


@pytest.mark.fast
def test_an_embedded_controller_lives_in_the_one_namesrv() -> None:
    s = parse_scenario(CTL.replace("{count: 3, port: 26878}", "{mode: embedded, count: 1, port: 26878}"), "t.yaml")
    nodes = {p.name: p for p in plan(s)}
    assert "controller-0" not in nodes
    ns = nodes["namesrv"]
    assert ns.ports == [26876, 26878]
    assert ns.conf["enableControllerInNamesrv"] is True
    assert ns.conf["controllerDLegerPeers"] == "n0-127.0.60.1:26878"
    assert nodes["broker-a-0"].conf["controllerAddr"] == "127.0.60.1:26878"


@pytest.mark.fast
@pytest.mark.parametrize("mode", ["{count: 3, port: 26878}", "{mode: embedded, count: 1, port: 26878}"])
def test_the_resolved_scenario_a_run_keeps_validates_again(mode: str) -> None:
    s = parse_scenario(CTL.replace("{count: 3, port: 26878}", mode), "t.yaml")
    assert parse_scenario(dump_scenario(s), "scenario.yaml") == s


@pytest.mark.fast
@pytest.mark.parametrize("text, line", [
    # a controller-mode group without controllers
    (CTL.replace("  controllers: {count: 3, port: 26878}\n", ""),
     "t.yaml:8: cluster.brokers[0].replicas: broker-a is a controller-mode group (replicas: 3) but the cluster has "
     "no controllers: add cluster.controllers (e.g. {mode: standalone, count: 3})"),
    # a controller-mode broker key on a classic group
    (CTL.replace("{name: broker-b, port: 26931}", "{name: broker-b, port: 26931, config: {allAckInSyncStateSet: true}}"),
     "t.yaml:10: cluster.brokers[1].config.allAckInSyncStateSet: allAckInSyncStateSet applies only to a "
     "controller-mode group: give broker-b `replicas:` (and cluster.controllers), or drop the key"),
    # a controller key in broker.conf
    (CTL.replace("{name: broker-b, port: 26931}", "{name: broker-b, port: 26931, config: {enableElectUncleanMaster: true}}"),
     "t.yaml:10: cluster.brokers[1].config.enableElectUncleanMaster: enableElectUncleanMaster is a controller key: "
     "set it in cluster.controllers.config"),
    # a classic key on a controller-mode group
    (CTL.replace("replicas: 3}", "replicas: 3, config: {brokerRole: SYNC_MASTER}}"),
     "t.yaml:9: cluster.brokers[0].config.brokerRole: a controller-mode replica starts as SLAVE and the elected "
     "master runs as SYNC_MASTER: drop brokerRole from this group"),
    (CTL.replace("replicas: 3}", "replicas: 3, slave: {}}"),
     "t.yaml:9: cluster.brokers[0].slave: a controller-mode group (replicas) has no fixed slave: drop slave, or drop "
     "replicas for master/slave"),
    # controllers: the platform's keys, unknown keys, embedded with three, nobody using them
    (CTL.replace("port: 26878}", "port: 26878, config: {controllerDLegerPeers: x}}"),
     "t.yaml:5: cluster.controllers.config.controllerDLegerPeers: controllerDLegerPeers is set by the platform; "
     "use cluster.controllers.count/port"),
    (CTL.replace("port: 26878}", "port: 26878, config: {enableElectUncleanMastr: true}}"),
     "t.yaml:5: cluster.controllers.config.enableElectUncleanMastr: unknown controller key "
     "'enableElectUncleanMastr'; did you mean enableElectUncleanMaster?"),
    (CTL.replace("{count: 3, port: 26878}", "{mode: embedded, count: 3, port: 26878}"),
     "t.yaml:5: cluster.controllers.count: embedded controllers run inside namesrv and this cluster has one "
     "namesrv, so one controller (got count 3): use mode: standalone for 3"),
    (CTL.replace("{count: 3, port: 26878}", "{mode: embedded, count: 1, port: 26878, jvm: {heap_mb: 512}}"),
     "t.yaml:5: cluster.controllers.jvm: an embedded controller runs in namesrv's JVM: set cluster.namesrv.jvm"),
    (CTL.replace(", replicas: 3}", "}").replace("allAckInSyncStateSet: true, ", ""),
     "t.yaml:5: cluster.controllers: no broker group uses the controllers: give a group `replicas:` (controller "
     "mode) or drop cluster.controllers"),
    (CTL.replace("port: 26878}", "port: 26875}"),
     "t.yaml:5: cluster.controllers.port: controller port 26876 collides with cluster.namesrv.port"),
])
def test_a_topology_of_the_wrong_mode_is_one_line_naming_file_line_and_key(text: str, line: str) -> None:
    assert err(text) == [line]


@pytest.mark.fast
def test_every_scenario_file_still_loads_and_plans_without_controllers() -> None:
    for f in sorted((REPO / "scenarios").glob("*.yaml")):
        if f.name in ("quick.yaml", "nightly.yaml"):  # matrices, not scenarios
            continue
        s = load_scenario(f)
        if any(b.replicas for b in s.cluster.brokers):  # the replicated-failover scenarios (issues 36, 48, 50, 51)
            assert f.name.startswith(("failover-", "power-loss-controller-", "power-loss-dledger-", "order-failover",
                                      "txn-failover", "timer-failover", "clock-controller-")), f
            continue
        assert s.cluster.controllers is None, f
        assert {p.role for p in plan(s)} <= {"namesrv", "master", "slave", "proxy"}, f


@pytest.mark.fast
def test_a_controller_mode_group_is_ready_only_with_an_elected_master_in_namesrv_and_every_replica_in_sync() -> None:
    from cluster.backend import ClusterBackend
    from rmqclient.admin import RemotingError
    from rmqclient.controllers import ReplicaGroup

    class Stub(ClusterBackend):  # the readiness condition alone: the controllers' answer and namesrv's
        state: object = None
        reg: dict = {}
        up = down = status = node = spawn_client = run_tool = lambda *a, **k: None  # type: ignore[assignment]

        def sync_state(self, timeout: float = 2.0):  # type: ignore[override]
            if isinstance(self.state, Exception):
                raise self.state
            return self.state

        def registered(self):  # type: ignore[override]
            return self.reg

    Stub.__abstractmethods__ = frozenset()
    c = Stub(None, parse_scenario(CTL, "t.yaml"))  # type: ignore[arg-type]
    a = ["127.0.60.11:26911", "127.0.60.12:26915", "127.0.60.13:26919"]
    c.state = RemotingError("cannot connect")
    assert c.replicated() == {"broker-a": "an answer from the controllers (cannot connect)"}
    c.state = {}
    assert c.replicated() == {"broker-a": "a master elected by the controllers"}
    c.state = {"broker-a": ReplicaGroup(a[1], 2, 1, a[1:2], [a[0], a[2]])}
    assert c.replicated() == {"broker-a": f"its master {a[1]} listed as id 0 in namesrv"}
    c.reg = {"broker-a": {0: a[1], 1: a[0], 3: a[2]}, "broker-b": {0: "127.0.60.21:26931"}}
    assert c.replicated() == {"broker-a": f"all 3 replicas in the SyncStateSet (in sync: {a[1]})"}
    c.state = {"broker-a": ReplicaGroup(a[1], 2, 1, sorted(a), [])}
    assert c.replicated() == {}
    assert [p.name for p in c.masters()] == ["broker-b", "broker-a-1"]  # the elected one, as namesrv lists it


# ---------------------------------------------------------------- a real controller-mode cluster


def _route_master(c, group: str) -> str | None:
    """The master namesrv routes `group` to for a topic (brokerAddrs["0"]: what a producer takes)."""
    from cluster.plan.nodes import READY_TOPIC
    from rmqclient.admin import RemotingError
    try:
        route = c.admin(timeout=2).topic_route(READY_TOPIC) or {}
    except RemotingError:
        return None
    for bd in route.get("brokerDatas") or []:
        if bd.get("brokerName") == group:
            return (bd.get("brokerAddrs") or {}).get("0")
    return None


@pytest.mark.long  # make test: tests/test_failover_run.py, the same role kills (master-of, controller-leader, restart of the killed node) in a whole run
def test_a_kill_of_the_master_of_a_group_and_of_the_controller_leader_hits_the_holders_of_the_time(
        tmp_path: Path) -> None:
    """3 standalone controllers + broker-a as 3 replicas, the faults run by the FaultScheduler:
    `kill master-of:broker-a` (+ restart_after) kills the elected master; the controllers elect
    another replica (a higher epoch, routed by namesrv); the restart brings back the node that was
    killed (a new pid, registered again, not master). Then `kill controller-leader` kills the Raft
    leader, and another controller leads. `down` ends every node. Subnet 127.0.61.0/24, ports
    27076..27120."""
    import json

    import yaml

    from chaos.scheduler import FaultScheduler
    from conftest import _start
    from pipeline.stages import down
    from rmqchaos.machine.procs import alive
    from rmqchaos.machine.wait import poll_until

    d = yaml.safe_load(CTL)
    d["cluster"].update({"subnet": "127.0.61.0/24", "namesrv": {"port": 27076}, "ready_timeout": "60s",
                         "stop_timeout": "3s",
                         "controllers": {"count": 3, "port": 27078,
                                         "jvm": {"heap_mb": 128, "options": ["-XX:TieredStopAtLevel=1"]}},
                         "brokers": [{"name": "broker-a", "port": 27111, "replicas": 3}],
                         "broker_defaults": {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256},
                                             "config": {"allAckInSyncStateSet": True}}})
    d["load"] = {"duration": "120s"}  # faults run on a load's clock; the test starts that clock itself
    d["faults"] = [{"id": "kill-master", "kind": "kill", "target": "master-of:broker-a", "at": "0s",
                    "restart_after": "3s"},
                   {"id": "kill-leader", "kind": "kill", "target": "controller-leader", "at": "0s"}]
    t0 = time.monotonic()
    run, c = _start(tmp_path, d)

    def faults(*fs) -> dict[str, dict]:  # run `fs` on a load clock that starts now; their events by id
        sched = FaultScheduler(run, c, list(fs))
        run.load_dir.mkdir(exist_ok=True)
        run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
        sched.start()
        sched.join(90)
        assert not sched.is_alive()
        sched.check()
        return {e["params"]["fault_id"]: e for e in run.timeline() if e["kind"] == "fault"}

    try:
        up_s = time.monotonic() - t0
        replicas = {p.addr: p.name for p in c.controller_groups()["broker-a"]}
        before = c.sync_state()["broker-a"]
        assert before.master_addr in replicas and set(before.in_sync) == set(replicas)  # the steady state
        assert _route_master(c, "broker-a") == before.master_addr
        master = replicas[before.master_addr]
        old_pid = c.node(master).pid
        t_kill = time.monotonic()
        ev = faults(run.scenario().faults[0])
        kill, restart = ev["kill-master"], ev["kill-master-restart"]
        # the kill hit the master of its time; the restart brought that node back, not the new master
        assert (kill["target"], kill["params"]["role"], kill["outcome"]) == (master, "master-of:broker-a", "ok")
        assert kill["params"]["evidence"]["pid"] == old_pid
        assert (restart["target"], restart["params"]["follows"], restart["outcome"]) == (master, "kill-master", "ok")
        assert restart["params"]["evidence"]["pid"] not in (None, old_pid)
        assert c.node(master).pid == restart["params"]["evidence"]["pid"]
        after = c.sync_state()["broker-a"]
        new = after.master_addr
        assert new in replicas and new != before.master_addr and after.master_epoch > before.master_epoch
        assert _route_master(c, "broker-a") == new  # namesrv routes the group to the elected replica
        reg = c.registered() or {}
        assert c.plans[master].listed_in(reg) and reg["broker-a"].get(0) == new  # rejoined, as a slave
        kill_s = time.monotonic() - t_kill

        leader = c.controller_leader()
        controllers = {p.addr: p.name for p in c.plans.values() if p.role == "controller"}
        assert leader in controllers
        ev = faults(run.scenario().faults[1])
        hit = ev["kill-leader"]
        assert (hit["target"], hit["params"]["role"], hit["outcome"]) == (controllers[leader], "controller-leader",
                                                                          "ok")
        assert c.node(controllers[leader]).pid is None
        def other() -> str | None:
            now = c.controller_leader()
            return now if now != leader else None
        moved = poll_until(other, 30, "another controller to lead")
        assert moved in controllers and moved != leader
        print(f"up {up_s:.1f}s; master {master} killed, new master {replicas[new]} (epoch {before.master_epoch} -> "
              f"{after.master_epoch}), {master} restarted and registered, {kill_s:.1f}s; controller leader "
              f"{controllers[leader]} killed, {controllers[moved]} leads")
    finally:
        procs = [(r.pid, r.starttime) for r in run.processes.starts()]
        down.run(run)
    assert len({r.node for r in run.processes.starts()} & {"controller-0", "controller-1", "controller-2"}) == 3
    assert not [p for p in procs if alive(*p)]  # controllers and replicas too
