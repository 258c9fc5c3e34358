"""The monitor's `groups` (issue 36 item 4, cluster/watch/groups.py): building a group's record from the
answers (fast), and a real controller-mode group whose master is killed while the monitor samples.

Subnet 127.0.62.0/24, ports 28876..28920: no other test uses them."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cluster.watch.groups import GroupPlan, ReplicaAnswer, group_plans, group_record, role_of
from rmqclient.controllers import ReplicaGroup

A = [("broker-a-0", "127.0.62.11:28911"), ("broker-a-1", "127.0.62.12:28915"), ("broker-a-2", "127.0.62.13:28919")]


@pytest.mark.fast
def test_a_controller_mode_record_names_the_elected_master_its_epoch_and_sync_state_set_by_node() -> None:
    g = GroupPlan("broker-a", "controller", A)
    st = {"broker-a": ReplicaGroup(A[1][1], 2, 3, sorted([A[1][1], A[2][1]]), [A[0][1]])}
    reg = {0: A[0][1], 2: A[1][1]}  # namesrv still routes to the old master: the two disagree
    rec = group_record(g, st, reg, {"broker-a-0": None, "broker-a-1": ReplicaAnswer("master", 400),
                                    "broker-a-2": ReplicaAnswer("slave", 380)})
    assert rec == {"mode": "controller", "master": "broker-a-1", "master_addr": A[1][1], "epoch": 3,
                   "sync_state_set": ["broker-a-1", "broker-a-2"], "routed_master": "broker-a-0",
                   # no heartbeats captured: no confirm offsets (tests/test_heartbeats.py has them)
                   "replicas": {"broker-a-0": {"up": False, "role": None, "max_offset": None, "confirm_offset": None,
                                               "confirm_ms": None},
                                "broker-a-1": {"up": True, "role": "master", "max_offset": 400, "confirm_offset": None,
                                               "confirm_ms": None},
                                "broker-a-2": {"up": True, "role": "slave", "max_offset": 380, "confirm_offset": None,
                                               "confirm_ms": None}}}
    # controllers and namesrv silent: nothing known of the group but what each node says
    rec = group_record(g, None, None, {n: ReplicaAnswer("slave", 7) for n, _ in A})
    assert {k: rec[k] for k in ("master", "master_addr", "epoch", "sync_state_set", "routed_master")} == dict.fromkeys(
        ("master", "master_addr", "epoch", "sync_state_set", "routed_master"))
    # the controllers answer but know no master of the group yet
    assert group_record(g, {"broker-a": ReplicaGroup(None, None, 0, [], [])}, {}, {})["master"] is None


@pytest.mark.fast
def test_a_sync_state_answer_reads_the_same_from_5_1_0_controllers_and_later_ones() -> None:
    """CONTROLLER_GET_SYNC_STATE_DATA's ReplicasInfo as each version's controllers serialize it
    (BrokerReplicasInfo.ReplicaIdentity: `address` in 5.1.0, `brokerAddress` and a masterBrokerId since 5.1.1)."""
    from rmqclient.controllers import replica_group
    v510 = {"masterAddress": A[1][1], "masterEpoch": 2, "syncStateSetEpoch": 3,
            "inSyncReplicas": [{"address": A[2][1], "brokerId": 3}, {"address": A[1][1], "brokerId": 2}],
            "notInSyncReplicas": [{"address": A[0][1], "brokerId": 1}]}
    v550 = {"masterAddress": A[1][1], "masterBrokerId": 2, "masterEpoch": 2, "syncStateSetEpoch": 3,
            "inSyncReplicas": [{"brokerAddress": A[2][1], "brokerId": 3, "alive": True},
                               {"brokerAddress": A[1][1], "brokerId": 2, "alive": True}],
            "notInSyncReplicas": [{"brokerAddress": A[0][1], "brokerId": 1, "alive": False}]}
    want = ReplicaGroup(A[1][1], None, 2, sorted([A[1][1], A[2][1]]), [A[0][1]])
    assert replica_group(v510) == want
    assert replica_group(v550) == ReplicaGroup(A[1][1], 2, 2, want.in_sync, want.not_in_sync)


@pytest.mark.fast
def test_a_classic_or_dledger_record_takes_the_master_from_namesrv_and_has_no_epoch() -> None:
    for mode in ("classic", "dledger"):
        g = GroupPlan("broker-b", mode, [("broker-b", "127.0.62.21:28931"), ("broker-b-s", "127.0.62.22:28941")])
        rec = group_record(g, None, {0: "127.0.62.21:28931", 1: "127.0.62.22:28941"},
                           {"broker-b": ReplicaAnswer("master", 10), "broker-b-s": ReplicaAnswer("slave", 10)})
        assert (rec["mode"], rec["master"], rec["master_addr"], rec["routed_master"], rec["epoch"],
                rec["sync_state_set"]) == (mode, "broker-b", "127.0.62.21:28931", "broker-b", None, None)
        assert group_record(g, None, {1: "127.0.62.22:28941"}, {})["master"] is None  # no id 0: no master
    assert [role_of(r) for r in ("SYNC_MASTER", "ASYNC_MASTER", "SLAVE", None)] == ["master", "master", "slave", None]


@pytest.mark.fast
def test_a_groups_mode_comes_from_the_keys_its_nodes_run_with() -> None:
    from cluster.plan.nodes import plan
    from rmqchaos.spec import parse_scenario

    s = parse_scenario(CTL, "t.yaml")
    gs = group_plans(plan(s))
    assert {g: (gp.mode, [n for n, _ in gp.nodes]) for g, gp in gs.items()} == {
        "broker-a": ("controller", ["broker-a-0", "broker-a-1", "broker-a-2"]),
        "broker-b": ("classic", ["broker-b", "broker-b-s"])}
    assert gs["broker-a"].nodes == A


# ---------------------------------------------------------------- a real controller-mode group

CTL = """name: mongroups
cluster:
  subnet: 127.0.62.0/24
  namesrv: {port: 28876}
  controllers: {count: 3, port: 28878, jvm: {heap_mb: 128, options: [-XX:TieredStopAtLevel=1]}}
  broker_defaults:
    jvm: {heap_mb: 256, max_direct_memory_mb: 256}
    config: {allAckInSyncStateSet: true}
  brokers:
    - {name: broker-a, port: 28911, replicas: 3}
    - {name: broker-b, port: 28931, slave: {port: 28941}}
  ready_timeout: 60s
  stop_timeout: 3s
"""


def _samples(run_path: Path) -> list[dict[str, Any]]:
    f = run_path / "monitor" / "cluster.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []


@pytest.mark.long  # make test: tests/test_failover_run.py, the monitor's groups record through a controller-mode kill in a whole run
def test_the_monitor_follows_a_controller_mode_failover_in_its_groups(tmp_path: Path) -> None:
    """3 standalone controllers + broker-a as 3 replicas: the monitor's sample names the elected
    master, its epoch, a SyncStateSet of 3, one replica reporting master and two slave, their offsets
    past the messages sent;
    after kill -9 of the master a later sample names another master at a higher epoch and the dead
    node down, samples still a second apart; then a SIGSTOPped slave down too, a sample costing
    no more than one timeout."""
    import yaml

    from cluster.plan.nodes import READY_TOPIC
    from conftest import _start
    from pipeline.stages import down
    from rmqclient.producer import Producer
    from rmqchaos.machine.procs import alive
    from rmqchaos.machine.wait import poll_until

    d = yaml.safe_load(CTL)
    d["cluster"]["brokers"] = d["cluster"]["brokers"][:1]
    t0 = time.monotonic()
    run, c = _start(tmp_path, d)
    try:
        up_s = time.monotonic() - t0

        prod = Producer(c.namesrv_addr, timeout=10)  # a few messages: offsets past 0 on every replica
        try:
            sent = [prod.send(READY_TOPIC, b"x" * 100) for _ in range(5)]
        finally:
            prod.close()
        assert all(r.ok for r in sent), sent
        sent_ms = int(time.time() * 1000)

        def steady() -> dict[str, Any] | None:
            for m in reversed(_samples(run.path)[-3:]):
                g = (m.get("groups") or {}).get("broker-a") or {}
                reps = g.get("replicas") or {}
                if m["ts_ms"] > sent_ms and g.get("master") and len(g.get("sync_state_set") or []) == 3 and \
                        sorted(r["role"] or "" for r in reps.values()) == ["master", "slave", "slave"] and \
                        all(r["up"] and (r["max_offset"] or 0) > 0 for r in reps.values()):
                    return g
            return None

        g = poll_until(steady, 20, "a sample naming broker-a's master, its SyncStateSet of 3 and the replicas' roles")
        assert g is not None
        print("steady:", json.dumps(g))
        old, epoch = g["master"], g["epoch"]
        assert g["mode"] == "controller" and g["routed_master"] == old and isinstance(epoch, int) and epoch >= 1
        assert g["master_addr"] == c.plans[old].addr and sorted(g["sync_state_set"]) == sorted(g["replicas"])
        assert g["replicas"][old]["role"] == "master"
        kill_ms = int(time.time() * 1000)
        c.node(old).kill()  # SIGKILL

        def switched() -> dict[str, Any] | None:
            for m in _samples(run.path):
                g = (m.get("groups") or {}).get("broker-a") or {}
                if m["ts_ms"] > kill_ms and g.get("master") not in (None, old) and (g.get("epoch") or 0) > epoch \
                        and g["replicas"][old]["up"] is False:
                    return m
            return None

        m = poll_until(switched, 30, "a sample naming broker-a's new master at a higher epoch")
        assert m is not None
        after = m["groups"]["broker-a"]
        print(f"up {up_s:.1f}s; killed {old} (epoch {epoch}); sample at +{m['ts_ms'] - kill_ms} ms:", json.dumps(after))
        assert after["replicas"][after["master"]]["up"] and old not in (after["sync_state_set"] or [old])
        # the dead node refuses at once: the samples since the kill stay about a second apart
        ts = [s["ts_ms"] for s in _samples(run.path) if s["ts_ms"] >= kill_ms - 1000]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        # a stopped node (SIGSTOP: it accepts connections and never answers) is down in its group and
        # in `brokers`, and costs a sample one timeout (the `brokers` asks' 2 s), not one per ask
        slave = next(n for n, r in after["replicas"].items() if r["role"] == "slave")
        c.node(slave).pause()
        try:
            stop_ms = int(time.time() * 1000)

            def stopped() -> dict[str, Any] | None:
                return next((m for m in _samples(run.path) if m["ts_ms"] > stop_ms + 100
                             and m["groups"]["broker-a"]["replicas"][slave]["up"] is False), None)

            m = poll_until(stopped, 15, f"a sample with the stopped {slave} down")
            assert m is not None and m["brokers"][slave]["up"] is False
            poll_until(lambda: sum(s["ts_ms"] > m["ts_ms"] for s in _samples(run.path)) >= 2, 10, "two more samples")
        finally:
            c.node(slave).resume()
        ts = [s["ts_ms"] for s in _samples(run.path) if s["ts_ms"] >= stop_ms]
        stopped_gaps = [b - a for a, b in zip(ts, ts[1:])]
        print(f"sample gaps after the kill (ms): {gaps}; while {slave} was stopped: {stopped_gaps}")
        assert gaps and max(gaps) < 1600, gaps
        assert len(stopped_gaps) >= 2 and max(stopped_gaps) < 2800, stopped_gaps
    finally:
        procs = [(r.pid, r.starttime) for r in run.processes.starts()]
        down.run(run)
    assert not [p for p in procs if alive(*p)]
