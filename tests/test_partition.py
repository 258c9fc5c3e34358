"""The partition fault on loopback: its rules as the scenario names them (fast), then on a real
cluster a probe connection for every pair of nodes inside and across the cut, during and after;
the CI form of scenarios/partition-namesrv.yaml (broker-a leaves namesrv's route while it keeps
taking sends); and a run SIGKILLed during a partition, whose rules `down --all` removes."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, RMQCHAOS, cli, run_here, write_scenario
from helpers import assert_nothing_left, connects
from rmqchaos.machine.procs import alive

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="iptables rules need root")
SCENARIOS = REPO / "scenarios"


def ours_in_iptables() -> list[str]:
    return [ln for ln in subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout.splitlines()
            if "RMQC" in ln or "rmqchaos:" in ln]


# ---------------------------------------------------------------- pure logic

@pytest.mark.fast
def test_partition_rules_name_each_listener_between_the_groups_addresses() -> None:
    from chaos.kinds.partition import drops
    from rmqchaos.spec import Scenario
    s = Scenario.model_validate({"name": "p", "load": {"duration": "10s"}})
    both = drops(s, [["broker-a"], ["namesrv"]], one_way=False)
    # broker-a's packets to namesrv's port and from its own ports (replies), and the mirror image
    assert set(both) == {("127.0.10.11", "127.0.10.1", 9876, None), ("127.0.10.1", "127.0.10.11", None, 9876),
                         *{("127.0.10.1", "127.0.10.11", p, None) for p in (10911, 10909, 10912)},
                         *{("127.0.10.11", "127.0.10.1", None, p) for p in (10911, 10909, 10912)}}
    one = drops(s, [["producers"], ["broker-a", "broker-b"]], one_way=True)
    assert {(src, dst) for src, dst, *_ in one} == {("127.0.10.201", "127.0.10.11"), ("127.0.10.201", "127.0.10.21")}
    assert all(d[2] is not None for d in one)  # clients listen on nothing: only the brokers' ports


@pytest.mark.fast
@pytest.mark.parametrize("extra, expect", [
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"], ["broker-z"]]}]},
     "faults[0].groups[1][0]: no node or client 'broker-z'; members: namesrv, broker-a, broker-b, producers"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"], ["broker-a"]]}]},
     "'broker-a' is in groups 0 and 1"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["producers"], ["consumers"]]}]},
     "these groups share no link"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"]]}]}, "faults[0].groups"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["10.0.0.1"], ["namesrv"]]}]},
     "faults[0].groups[0][0]: String should match pattern"),  # a name, never an address
    ({"cluster": {"subnet": "10.0.0.0/24"}}, "cluster.subnet: must be a /24 inside 127.0.0.0/8"),
    ({"cluster": {"subnet": "127.0.0.0/24"}}, "cluster.subnet: must be a /24 inside 127.0.0.0/8"),
])
def test_a_partition_names_members_never_addresses_and_bad_ones_are_one_line(tmp_path: Path, extra: dict,
                                                                              expect: str) -> None:
    f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"}, **extra})
    r = cli("run", str(f), "--out", str(tmp_path / "never"))
    assert r.returncode == 1 and expect in r.stderr and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


# ---------------------------------------------------------------- on a real cluster

UP_TIMEOUT_S = 5.0  # a link that is not cut answers a probe within this, however loaded the host


def test_a_partition_blocks_exactly_the_named_links_during_and_none_after(fresh_cluster) -> None:
    from chaos.registry import registry
    from chaos.protocol import FaultContext
    from rmqchaos.spec import Fault
    c = fresh_cluster
    fault = Fault.model_validate({"id": "cut", "kind": "partition", "at": 0, "groups": [["broker-a"], ["namesrv"]]})
    kind = registry()["partition"]
    part = kind(FaultContext(c.run, c), fault, kind.Params.model_validate(fault.params))
    nodes = {n: p for n, p in c.plans.items()}
    cut = {frozenset(("broker-a", "namesrv"))}

    def probe() -> dict[tuple[str, str], bool]:
        return {(a, b): connects(nodes[a].host, nodes[b].host, nodes[b].ports[0])
                for a, b in itertools.permutations(nodes, 2)}

    # the monitor's probes of the links this fault names (cluster/watch/monitor.py `links`), both ways
    from cluster.net.roundtrip import fault_links, probe as rtt
    watched = fault_links(c.scenario.model_copy(update={"faults": [fault]}))
    assert sorted(ln.key for ln in watched) == ["broker-a -> namesrv", "namesrv -> broker-a"]
    # up before the cut: each answers (a just-started namesrv took 286 ms to answer its first probe
    # on a quiet day, past the monitor's 0.5 s on a loaded one; this asserts the link, not its speed)
    assert all(rtt(ln, timeout=UP_TIMEOUT_S) is not None for ln in watched)
    assert all(probe().values())
    part.start()
    try:
        assert len([r for r in ours_in_iptables() if r.startswith("-A RMQC-")]) == 8
        during = probe()
        assert {k for k, ok in during.items() if not ok} == {k for k in during if frozenset(k) in cut}, during
        # the producers' address reaches both sides still: only the named pair is cut
        assert connects("127.0.10.201", nodes["broker-a"].host, nodes["broker-a"].ports[0])
        t0 = time.monotonic()
        assert {ln.key: rtt(ln) for ln in watched} == {"broker-a -> namesrv": None, "namesrv -> broker-a": None}
        assert time.monotonic() - t0 < 2.5  # a cut link costs a probe its timeout, no more
    finally:
        ev = part.stop()
    assert all(rtt(ln, timeout=UP_TIMEOUT_S) is not None for ln in watched)
    assert all(probe().values())
    assert ev["rules"] == ev["removed"] == 8 and 0 < ev["held_s"] < 30, ev
    # what it achieved against what it was asked: its rules listed from start to end, both links silent
    it = ev["intent"]
    assert it["short"] is False and it["words"].startswith("network partition (broker-a | namesrv): 8 of 8 rules "
                                                           "held; 2 of 2 links went silent"), it
    # the broker's registration connection to namesrv crossed the cut when it started
    assert any(x.startswith(f"{nodes['broker-a'].host}:") and x.endswith(f"->{nodes['namesrv'].addr}")
               for x in ev["links_at_start"]), ev
    assert [r for r in ours_in_iptables() if r.startswith("-A RMQC-")] == []
    # a cut whose rules something else removed before its stop fails: it did not hold as asked
    from chaos.protocol import FaultError
    from cluster.net.netrules import RunRules
    again = kind(FaultContext(c.run, c), fault, kind.Params.model_validate(fault.params))
    again.start()
    assert RunRules(c.run.run_id).remove() == 8
    with pytest.raises(FaultError, match="8 of its 8 rules were gone before it ended"):
        again.stop()


@pytest.mark.long  # make test: a partition of a broker from namesrv on containers (test_docker, both ways cut) and a broker out of the route (the retry flood); the nightly: partition-namesrv.yaml
def test_broker_cut_from_namesrv_leaves_the_route_while_it_keeps_taking_sends(tmp_path: Path) -> None:
    """The CI form of scenarios/partition-namesrv.yaml: namesrv keeps a broker that stopped
    registering for 120 s by default (RouteInfoManager); a broker with enableSlaveActingMaster
    reports its own timeout (brokerNotActiveTimeoutMillis, 10 s), so the route changes within a
    CI-sized run. Producers with a cached route keep sending to broker-a meanwhile."""
    d = {
        "extends": str(SCENARIOS / "partition-namesrv.yaml"), "name": "partition-namesrv-ci",
        "cluster": {"namesrv": {"port": 22876}, "stop_timeout": "3s",
                    "broker_defaults": {"config": {"enableSlaveActingMaster": True}},
                    "brokers": [{"name": "broker-a", "port": 22911}, {"name": "broker-b", "port": 22921}]},
        "load": {"duration": "40s", "rate": 150},
        # the consumers learn that broker-a is back in the route at their next route refresh: 5 s
        # here, not the client's 30 s, so the drain does not wait for it
        "consumers": {"settle": "3s", "route_refresh": "5s"},
        "faults": [{"id": "cut-a-ns", "kind": "partition", "at": "5s", "duration": "25s",
                    "groups": [["broker-a"], ["namesrv"]]}]}
    s = _run_ci(tmp_path, d)
    cut = next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == "cut-a-ns")
    assert cut["outcome"] == "ok" and cut["params"]["evidence"]["rules"] == 8
    a = [(m["ts_ms"], m["brokers"]["broker-a"]) for m in s["monitor"] if "brokers" in m]
    out = [t for t, b in a if b["registered"] is False and b["up"]]
    assert out and cut["start_ms"] < out[0] < cut["end_ms"], "namesrv never dropped broker-a during the cut"
    assert any(b["registered"] and t > cut["end_ms"] for t, b in a), "broker-a did not register again"
    # sends went on to broker-a while it was cut from namesrv (the producers' cached route), and nothing was lost
    during = {r["t"] for r in s["series"] if cut["start_ms"] // 1000 < r["t"] < out[0] // 1000}
    assert any((r["acked_by_broker"] or {}).get("broker-a") for r in s["series"] if r["t"] in during)
    assert s["complete"] is True and s["counts"]["lost"] == 0



def _run_ci(tmp_path: Path, d: dict) -> dict:
    f = write_scenario(tmp_path / "part.yaml", d)
    run, s = run_here(f, tmp_path / "run")
    assert [x for x in ours_in_iptables() if x.startswith("-A RMQC-")] == []
    s["_report"] = (run / "report.txt").read_text()  # what `rmqchaos run` prints
    return s


def _fault(s: dict, fault_id: str) -> dict:
    return next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == fault_id)


# long (117 s in CI): make test keeps a real cluster's partition rules link by link
# (test_a_partition_blocks_exactly_the_named_links_during_and_none_after), a partition scenario end to
# end (the clients cut below) and a replicated group's master failing (tests/test_failover_run.py);
# the nightly: partition-sync-slave.yaml
@pytest.mark.long
def test_sync_master_cut_from_its_slave_answers_flush_slave_timeout_and_the_slave_catches_up(tmp_path: Path) -> None:
    """The CI form of scenarios/partition-sync-slave.yaml (subnet 127.0.43.0/24): broker-a, a SYNC_MASTER
    with inSyncReplicas 2, cut both ways from broker-a-s for 15 s of a 30 s load. 5.5.0 answers each send
    stored on broker-a meanwhile with FLUSH_SLAVE_TIMEOUT after slaveTimeout, never SLAVE_NOT_AVAILABLE
    (GroupTransferService; isSlaveOK has no caller); the slave copies what it missed after the heal."""
    s = _run_ci(tmp_path, {
        "extends": str(SCENARIOS / "partition-sync-slave.yaml"), "name": "partition-sync-slave-ci",
        # both sides give up the HA connection after 5 s without a read (haHousekeepingInterval, 20 s by
        # default), so the slave reconnects after the heal inside a CI-sized run
        "cluster": {"subnet": "127.0.43.0/24", "namesrv": {"port": 13476}, "stop_timeout": "3s",
                    "broker_defaults": {"config": {"haHousekeepingInterval": 5000}},
                    "brokers": [{"name": "broker-a", "port": 13511, "slave": {},
                                 "config": {"brokerRole": "SYNC_MASTER", "inSyncReplicas": 2}},
                                {"name": "broker-b", "port": 13521}]},
        "load": {"duration": "30s", "rate": 100, "users": 10},
        "consumers": {"settle": "3s"},
        "faults": [{"id": "cut-a-slave", "kind": "partition", "at": "5s", "duration": "15s",
                    "groups": [["broker-a"], ["broker-a-s"]]}]})
    cut = _fault(s, "cut-a-slave")
    ev = cut["params"]["evidence"]
    assert cut["outcome"] == "ok" and ev["rules"] == ev["removed"] == 12, ev  # broker-a's 3 ports, the slave's 3, both ways
    # the HA connection (the slave connects to the master's HA port, its listen port + 1) crossed the cut
    ha = [x for x in ev["links_at_start"] if x.startswith("127.0.43.12:") and x.endswith("->127.0.43.11:13512")]
    assert ha and set(ha) <= set(ev["links_broken"]), ev  # and RocketMQ closed it during the cut
    by_status = s["errors"]["by_status"]
    assert by_status.get("FLUSH_SLAVE_TIMEOUT", 0) > 0 and "SLAVE_NOT_AVAILABLE" not in by_status, by_status
    weak = next(a for a in s["answers"] if a["answer"] == "FLUSH_SLAVE_TIMEOUT")
    assert weak["stored"] == weak["attempts"]  # every one delivered under its own msgId: on the master all the same
    c = s["counts"]
    assert s["complete"] is True and c["lost"] == 0 and c["acked_weak"] > 0 and c["acked_weak_lost"] == 0, c
    # the slave stood still during the cut and held all the master had stored at the heal afterwards
    from analysis.evidence.findings import replica_catchup
    rc = replica_catchup(s)
    assert [r["slave"] for r in rc] == ["broker-a-s"] and rc[0]["max_behind_bytes"] > 0, rc
    assert rc[0]["caught_up_ms"] is not None and rc[0]["caught_up_ms"] >= cut["end_ms"], rc
    verdict = s["_report"].splitlines()[0]
    assert "FLUSH_SLAVE_TIMEOUT" in verdict and "broker-a-s fell" in verdict and "after the heal" in verdict, verdict



def test_clients_cut_from_a_broker_consumers_get_its_messages_after_the_heal_producers_resend(tmp_path: Path) -> None:
    """The CI forms of scenarios/partition-consumers.yaml and partition-producers.yaml in one run
    (subnet 127.0.44.0/24), one after the other. Both consumers cut from broker-a, both ways, for 15 s:
    the producers keep storing on broker-a; no consumer gets any of it while the cut holds, and all of
    it after the heal; broker-b's messages keep arriving meanwhile. Then broker-a's answers to the
    producers dropped (one way) for 8 s under the retry policy: each attempt that timed out there
    was stored all the same and its key sent again to broker-b, a duplicate the analysis attributes
    to the producer's resend."""
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.schema import ledger_files
    s = _run_ci(tmp_path, {
        "extends": str(SCENARIOS / "partition-consumers.yaml"), "name": "partition-clients-ci",
        "cluster": {"subnet": "127.0.44.0/24", "namesrv": {"port": 13576}, "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 13611}, {"name": "broker-b", "port": 13621}]},
        "load": {"duration": "34s", "rate": 100, "timeout": "1s",
                 "policy": {"kind": "retry", "attempts": 3, "another_broker": True}},
        "faults": [{"id": "cut-consumers-a", "kind": "partition", "at": "5s", "duration": "15s",
                    "groups": [["consumers"], ["broker-a"]]},
                   {"id": "mute-a", "kind": "partition", "at": "23s", "duration": "8s", "one_way": True,
                    "groups": [["broker-a"], ["producers"]]}]})
    cut = _fault(s, "cut-consumers-a")
    ev = cut["params"]["evidence"]
    assert cut["outcome"] == "ok" and ev["rules"] == ev["removed"] == 12, ev  # 2 consumers x broker-a's 3 ports x 2
    assert any(x.startswith("127.0.44.21") and "->127.0.44.11:" in x for x in ev["links_at_start"]), ev
    recv = [r for f in ledger_files(tmp_path / "run", "receive") for r in read_ledger(f).records]
    # while every rule was in: from when the last went in (held_s counts from there to their removal,
    # just before end_ms) to the fault's planned end (their removal starts after it)
    inside = (cut["end_ms"] - ev["held_s"] * 1000, cut["start_ms"] + 15_000)
    held = [r for r in recv if r["broker"] == "broker-a" and inside[0] <= r["store_ms"] <= inside[1]]
    assert held, "no message was stored on broker-a during the cut"
    # none of them reached a consumer before the heal (those pulled before the cut may still be handed
    # to the listener inside it: the receive time is the listener's); all of them after it
    assert all(r["receive_ms"] >= inside[1] for r in held)
    assert any(r["broker"] == "broker-b" and inside[0] <= r["receive_ms"] <= inside[1] for r in recv)
    # the drain reached lag 0 (complete), nothing lost, every extra delivery explained (a re-pull, a rebalance)
    c = s["counts"]
    assert s["complete"] is True and c["lost"] == 0 and s["duplicates_by_cause"]["unexplained"] == 0, (c, s["duplicates_by_cause"])
    # the wait shows in the report's delivery latency: a message stored in the cut's first second waited for its end
    assert s["latency_ms"]["end_to_end"]["max"] >= inside[1] - inside[0] - 1000
    # the mute: requests reached broker-a, its answers did not; only broker-a's attempts timed out
    mute = _fault(s, "mute-a")
    assert mute["outcome"] == "ok" and mute["params"]["evidence"]["one_way"] is True
    # both did what they were asked: every rule held, every link that answered before went silent (one
    # way too: a handshake needs the answer the mute drops)
    for e in (cut, mute):
        it = e["params"]["evidence"]["intent"]
        assert it["short"] is False and it["reached"] == 1.0 and len(it["measures"]) == 2, it
    sends = [r for f in ledger_files(tmp_path / "run", "send") for r in read_ledger(f).records if r["rec"] == "outcome"]
    timed_out = [r for r in sends if r["outcome"] == "timeout"]
    assert timed_out and {r["broker"] for r in timed_out} == {"broker-a"}
    # none began before the mute (an attempt sent up to one timeout before the rules went in could lose
    # its answer to them). After the heal the connection stays stalled until the kernel's next
    # retransmission of the first dropped answer: the RTO doubles, so that comes up to about the mute's
    # length after it; attempts queued behind it time out too (CI saw failures go on past the heal)
    muted = mute["end_ms"] - mute["start_ms"]
    assert all(mute["start_ms"] - 1000 <= r["start_ms"] <= mute["end_ms"] + muted + 1000 for r in timed_out)
    t = next(a for a in s["answers"] if a["answer"] == "timeout")
    # a stored timed-out first attempt made its key a duplicate, and the analysis says why
    assert t["dup_keys_first_stored"] > 0 and s["duplicates_by_cause"]["producer_resend"] >= t["dup_keys_first_stored"]
    assert "producer resend" in s["_report"]


def test_a_run_sigkilled_during_a_partition_leaves_no_rule_after_down(tmp_path: Path) -> None:
    """A partition and a link fault hold when the CLI is SIGKILLed: `down --all` removes both tables'
    rules and ends the run's toxiproxy-server with its other processes."""
    f = write_scenario(tmp_path / "p.yaml", {
        "name": "part-kill", "cluster": {"namesrv": {"port": 22976}, "stop_timeout": "3s",
                                         "brokers": [{"name": "broker-a", "port": 22991}]},
        "load": {"topic": "T_PART_KILL", "rate": 50, "duration": "60s"},
        "faults": [{"id": "cut", "kind": "partition", "at": "1s", "groups": [["broker-a"], ["namesrv", "producers"]]},
                   {"id": "slow", "kind": "link", "at": "1s", "from": "producers", "to": "namesrv", "latency": "20ms"}]})
    out = tmp_path / "run"
    p = subprocess.Popen([*RMQCHAOS, "run", str(f), "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        def held(target: str) -> bool:
            return any(x.startswith("-A RMQC-") and f"-j {target}" in x for x in ours_in_iptables())
        while not (held("DROP") and held("DNAT")):
            assert p.poll() is None, p.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the partition and the link never both started"
            time.sleep(0.2)
        toxi = [r for r in map(json.loads, (out / "processes.jsonl").read_text().splitlines())
                if r.get("node") == "toxiproxy" and r.get("starttime")]
        assert toxi and all(alive(r["pid"], r.get("starttime")) for r in toxi), toxi
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # this run's chain and its jump only: another test beside this one may hold a chain of its own
    from cluster.net.netrules import chain_name
    from rmqchaos.run.rundir import RunDir
    run_id = RunDir(out).run_id
    mine = [chain_name(run_id), f"rmqchaos:{run_id}"]

    def this_runs() -> list[str]:
        return [x for x in ours_in_iptables() if any(m in x for m in mine)]
    assert [x for x in this_runs() if x.startswith("-A RMQC-")]  # the rules outlived the CLI
    r = cli("cluster", "down", "--all")
    assert r.returncode == 0, r.stderr
    assert f"removed iptables chain {chain_name(run_id)}" in r.stdout + r.stderr
    assert this_runs() == []  # filter and nat
    assert_nothing_left(out)
    assert not any(alive(r["pid"], r.get("starttime")) for r in toxi)
    assert yaml.safe_load((out / "scenario.yaml").read_text())["faults"][0]["kind"] == "partition"
