"""A replicated cluster through its failovers, end to end (the CI form of the nightly's failover
scenarios): three standalone controllers and broker-a as a controller-mode group of three
(allAckInSyncStateSet), under load; its master is killed -9 and restarted. The long form adds
broker-b as a DLedger group of three whose leader is killed next, then the controller leader (ten
JVMs on two cores: ~210 s against ~120 s). The run is analyzed: each failover's detection, election
and first acknowledged send on the new master, nothing lost, and the monitor's per-group record of
the switch.

Subnet 127.0.68.0/24, ports 21476..21550: no other test uses them."""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from tests.conftest import write_scenario

SCENARIO = {
    "name": "failover-ci",
    "cluster": {
        "subnet": "127.0.68.0/24",
        "namesrv": {"port": 21476},
        "controllers": {"count": 3, "port": 21478, "jvm": {"heap_mb": 128, "options": ["-XX:TieredStopAtLevel=1"]}},
        "broker_defaults": {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256}, "config": {"flushDiskType": "ASYNC_FLUSH"}},
        "brokers": [{"name": "broker-a", "port": 21511, "replicas": 3, "config": {"allAckInSyncStateSet": True}},
                    {"name": "broker-b", "port": 21541, "replicas": 3, "replication": "dledger"}],
        "ready_timeout": "120s", "stop_timeout": "3s"},
    # producers and the consumer ask namesrv for routes every 5 s (30 s by default): a switch shows
    # within the short load
    "load": {"topic": "RMQCHAOS_FAILOVER_CI", "users": 10, "rate": 200, "duration": "35s", "message_size": 256,
             "timeout": "3s", "route_refresh": "5s", "policy": {"kind": "no_retry"}},
    "consumers": {"route_refresh": "5s", "settle": "10s"},
    "faults": [
        {"id": "kill-a", "kind": "kill", "target": "master-of:broker-a", "at": "6s", "restart_after": "6s"},
        {"id": "kill-b", "kind": "kill", "target": "master-of:broker-b", "at": "14s", "restart_after": "6s"},
        {"id": "kill-leader", "kind": "kill", "target": "controller-leader", "at": "22s", "restart_after": "4s"},
    ],
}


def ci_form() -> dict:
    """broker-a's group and its master's kill only, the load shortened to match."""
    d = copy.deepcopy(SCENARIO)
    d["cluster"]["brokers"] = d["cluster"]["brokers"][:1]
    d["load"]["duration"] = "22s"
    d["faults"] = d["faults"][:1]
    return d


@pytest.mark.parametrize("form", ["ci", pytest.param("full", marks=pytest.mark.long)])
def test_a_replicated_cluster_fails_over_under_load_and_the_analysis_times_each_switch(
        kept_spark, tmp_path: Path, form: str) -> None:
    from pipeline.stages import analyze, down, drain, load, up
    from pipeline.runs import create_run
    scenario = SCENARIO if form == "full" else ci_form()
    kills = [f["id"] for f in scenario["faults"]]
    groups = {"kill-a": "broker-a", "kill-b": "broker-b"}
    t0 = time.monotonic()
    run = create_run(write_scenario(tmp_path / "failover-ci.yaml", scenario), tmp_path / "run", mode="owned")
    try:
        up.run(run)
        t_up = time.monotonic() - t0
        load.run(run)
        drain.run(run)
    finally:
        down.run(run)
    analyze.run(run)
    s = json.loads((run.path / "analysis" / "summary.json").read_text())
    samples = [json.loads(x) for x in (run.path / "monitor" / "cluster.jsonl").read_text().splitlines()]
    samples = [x for x in samples if x.get("groups")]
    faults = {e["params"]["fault_id"]: e for e in s["events"] if e["kind"] == "fault"}
    assert {k: e["outcome"] for k, e in faults.items()} == dict.fromkeys(kills + [f"{k}-restart" for k in kills], "ok")
    # each did what it was asked (chaos/intent.py): every killed pid gone, every node back under a new
    # pid and, a broker, listed by namesrv
    for fid, e in faults.items():
        it = e["params"]["evidence"]["intent"]
        assert it["short"] is False and it["reached"] == 1.0, (fid, it)

    def master_before(group: str, ms: int) -> str | None:
        # a sample is stamped when it starts and may take 2 s: the last one begun 2.5 s before the fault saw no kill
        return [x for x in samples if x["ts_ms"] < ms - 2500][-1]["groups"][group]["master"]
    for fid, group in ((k, g) for k, g in groups.items() if k in kills):
        ev = faults[fid]
        # the role resolved to the master of that moment; its restart brought back that node
        assert ev["params"]["role"] == f"master-of:{group}" and ev["target"] == master_before(group, ev["start_ms"])
        assert faults[f"{fid}-restart"]["target"] == ev["target"]
    if "kill-leader" in kills:
        assert faults["kill-leader"]["target"].startswith("controller-")
    # the monitor saw broker-a's switch: a higher epoch, another master, the killed node back as a slave
    first, last = samples[0]["groups"]["broker-a"], samples[-1]["groups"]["broker-a"]
    assert last["epoch"] > first["epoch"] and last["master"] != faults["kill-a"]["target"]
    assert last["replicas"][faults["kill-a"]["target"]]["up"] is True
    assert last["replicas"][faults["kill-a"]["target"]]["role"] == "slave"
    # each replica's confirm offset as it sent it to the controllers (cluster/watch/heartbeats.py): there
    # while it runs (a heartbeat a second; a sample takes the last of the past 3 s), gone while it
    # is dead, and at the end, the load over, the master's has reached its max offset
    killed, kill_ms = faults["kill-a"]["target"], faults["kill-a"]["start_ms"]
    running = [x["groups"]["broker-a"]["replicas"] for x in samples if x["ts_ms"] < kill_ms][2:]
    assert len(running) >= 3 and all(sum(r[n]["confirm_offset"] is not None for r in running) > len(running) / 2
                                     for n in first["replicas"]), running
    restart_ms = faults["kill-a-restart"]["start_ms"]
    assert any(x["groups"]["broker-a"]["replicas"][killed]["confirm_offset"] is None
               for x in samples if kill_ms + 3500 <= x["ts_ms"] < restart_ms), "the dead node kept a confirm offset"
    assert any(g["replicas"][g["master"]]["confirm_offset"] == g["replicas"][g["master"]]["max_offset"] > 0
               for g in (x["groups"]["broker-a"] for x in samples[-3:])), samples[-3:]
    # the analysis: per failover the detection, election and first ack on the new master, in order
    fo = {f["fault_id"]: f for f in s["failover"]["failovers"]}
    assert set(fo) == set(groups) & set(kills), fo
    for fid in fo:
        f = fo[fid]
        assert f["old_master"] == faults[fid]["target"] and f["new_master"] not in (None, f["old_master"]), f
        assert 0 <= f["detection_s"] <= f["election_s"] <= f["first_ack_new_master_s"] < 20, f
    # every delivery names the node its pull was served by (the Java consumer's RPC hook), a node of
    # its group; never the killed master once it is dead, nor after its restart (a slave refuses
    # pulls: slaveReadEnable false). The consumer read from the old master before the kill: the
    # serving gate held the faults until every master had served the group, within its bound of the
    # consumer's start (on 5.5.0 its first pulls could be refused "subscription not latest" for 30 s
    # until the consumer's heartbeat after a refused pull: docs/client.md)
    from rmqchaos.run.serving import SERVE_BOUND_S
    sv = s["serving"]
    gate = sv["gate"]
    print("serving:", gate["first_served_s"], "code 25 by broker:", sv["not_latest_by_broker"],
          "heartbeats:", {g: x["heartbeats"] for g, x in sv["groups"].items()})
    assert gate["outcome"] == "passed" and gate["missing"] == [], gate
    firsts = [x for m in gate["first_served_s"].values() for x in m.values()]
    assert firsts and all(x is not None and x <= SERVE_BOUND_S for x in firsts), gate
    assert sv["restarts"] and all(v["within_bound"] is not False for r in sv["restarts"] for v in r["groups"].values())
    recv = [json.loads(x) for f in sorted((run.path / "ledgers").glob("receive-*.jsonl"))
            for x in f.read_text().splitlines() if x.strip()]
    from cluster import get_backend
    node = {p.addr: n for n, p in get_backend(run).plans.items()}
    served = [(r["receive_ms"], node.get(r["served_by"], r["served_by"])) for r in recv if r["broker"] == "broker-a"]
    print("deliveries of broker-a by the node that served them:",
          {n: sum(1 for _, x in served if x == n) for n in {x for _, x in served}})
    assert served and {n for _, n in served} <= set(first["replicas"]), served[:5]
    assert killed not in {n for t, n in served if t > kill_ms + 3000}
    assert {n for t, n in served if t < kill_ms} == {killed}
    again = s["failover"]["duplicates_after_switch"]
    assert again is not None and again["server_unknown"] == 0, again
    assert s["failover"]["two_master_windows"] == []
    assert s["complete"] is True and s["counts"]["acked"] > 0
    assert s["counts"]["lost"] == 0, s["counts"]  # allAckInSyncStateSet; DLedger's majority
    print(f"up {t_up:.0f} s; " + "; ".join(
        f"{k}: {f['old_master']} -> {f['new_master']}, detected {f['detection_s']} s, elected {f['election_s']} s, "
        f"first ack {f['first_ack_new_master_s']} s" for k, f in fo.items()))
