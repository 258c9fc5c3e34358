"""Exploration (issue 49): the seeded schedule generator, shrinking on planted outcomes, bisection on
a fake runner, and the anomaly checks on summaries. Pure logic; the real two-run exploration is in
test_explore_real.py (long)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.judge.anomalies import CHECKS, anomalies
from chaos.explore import schedule, words
from chaos.registry import registry
from pipeline.workflows.bisect import Unavailable, bisect, versions_in
from pipeline.workflows.explore import scenario_doc
from pipeline.runs import load_scenario
from pipeline.workflows.shrink import candidates, minimize
from rmqchaos.errors import UserError

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
BASES = ["control.yaml", "failover-kill-master.yaml", "partition-sync-slave.yaml", "failover-dledger-kill-leader.yaml"]


@pytest.mark.fast
@pytest.mark.parametrize("base", BASES)
def test_the_same_seed_gives_the_same_schedule_and_every_schedule_validates(tmp_path: Path, base: str) -> None:
    s = load_scenario(SCENARIOS / base)
    kinds = registry()
    seen = set()
    for seed in range(40):
        faults = schedule(s, kinds, seed)
        assert faults == schedule(s, kinds, seed)  # deterministic
        assert 1 <= len(faults) <= 3
        seen |= {f["kind"] for f in faults}
        f = tmp_path / f"x{seed}.yaml"
        f.write_text(yaml.safe_dump(scenario_doc(SCENARIOS / base, seed, faults)))
        got = load_scenario(f)  # raises on a schedule the spec refuses
        assert got.explore is not None and got.explore.seed == seed and got.signature is None
        dur = float(s.load.duration)  # type: ignore[union-attr]
        assert all(10.0 <= float(x.at) < dur for x in got.faults)
    assert {"kill", "pause", "partition"} <= seen  # the registry's kinds are drawn
    assert {"consumer_kill", "producer_crash", "topic_queues"} <= seen  # the clients' and the topic's too
    if dur >= 90:
        assert "power_loss" in seen  # the layer's too, where a loss and its recovery fit in the load
    assert schedule(s, kinds, 1) != schedule(s, kinds, 2)


class _Stub:
    """A fault kind whose every draw holds `hold` s on node n1 (network: changes the network)."""
    hold, network, node = 20.0, False, "n1"

    @classmethod
    def explore(cls, rng: Any, topo: Any) -> Any:
        from chaos.draw import Draw
        return Draw({"target": cls.node}, cls.hold, frozenset({cls.node}), network=cls.network)


@pytest.mark.fast
def test_overlapping_faults_never_share_a_node_or_the_network() -> None:
    from chaos.draw import Topology
    from chaos.explore import WARMUP_S
    s = load_scenario(SCENARIOS / "failover-kill-master.yaml")  # a 90 s load
    topo = Topology.of(s)
    assert topo.groups == {"broker-a": ("broker-a-0", "broker-a-1", "broker-a-2")} and topo.replicated == ("broker-a",)

    class OtherNode(_Stub):
        node = "n2"

    class Net(_Stub):
        network, node = True, "n3"

    class OtherNet(Net):
        node = "n4"
    for kinds, apart in (({"a": _Stub}, True), ({"a": Net, "b": OtherNet}, True), ({"a": _Stub, "b": OtherNode}, False)):
        overlapped = False
        for seed in range(60):
            fs = schedule(s, kinds, seed, max_faults=4)  # type: ignore[arg-type]
            ats = sorted(float(f["at"][:-1]) for f in fs)
            assert ats[0] >= WARMUP_S and ats[-1] + _Stub.hold <= 90 - 5  # after the warm-up, ended before the load
            pairs = [(f, g) for i, f in enumerate(fs) for g in fs[i + 1:]]
            close = [(f, g) for f, g in pairs if abs(float(f["at"][:-1]) - float(g["at"][:-1])) < _Stub.hold]
            if apart:  # one node, or the network, is never held by two at once
                assert not close, (kinds, fs)
            overlapped |= bool(close)
        assert apart or overlapped  # faults on different nodes may overlap, and do


@pytest.mark.fast
def test_only_the_kinds_asked_for_are_drawn_and_the_docker_backend_draws_no_layer_fault() -> None:
    s = load_scenario(SCENARIOS / "control.yaml")
    for seed in range(30):
        assert {f["kind"] for f in schedule(s, registry(), seed, only=["partition"])} == {"partition"}
    docker = s.model_copy(update={"cluster": s.cluster.model_copy(update={"backend": "docker"})})
    kinds = {f["kind"] for seed in range(80) for f in schedule(docker, registry(), seed)}
    assert kinds and not kinds & {"power_loss", "disk_error", "disk_slow"}


@pytest.mark.fast
def test_words_say_a_schedule_in_one_line() -> None:
    assert words([{"kind": "kill", "target": "master-of:broker-a", "at": "20s", "restart_after": "12s"},
                  {"kind": "partition", "at": "40s", "groups": [["namesrv"], ["broker-a"]], "duration": "10s"}]) == \
        "kill master-of:broker-a at 20s (restart after 12s); partition namesrv | broker-a at 40s (duration 10s)"


@pytest.mark.fast
def test_the_clients_and_the_topic_are_drawn_where_they_can_act() -> None:
    s = load_scenario(SCENARIOS / "failover-kill-master.yaml")
    ids = [i.id for i in s.consumers.instances]
    broker_nodes = {"broker-a-0", "broker-a-1", "broker-a-2", "master-of:broker-a"}
    beside = 0  # schedules with the topic's change and a broker kill, apart
    for seed in range(60):
        fs = schedule(s, registry(), seed, only=["consumer_kill", "topic_queues", "kill"])
        beside += {"topic_queues", "kill"} <= {f["kind"] for f in fs}
        for f in fs:
            if f["kind"] == "consumer_kill":
                assert f["consumer"] in ids and f["back_after"]  # always started again
            if f["kind"] == "topic_queues":
                assert f["queues"] != s.load.queues and f["back_after"]  # type: ignore[union-attr]
                t0, t1 = float(f["at"][:-1]), float(f["at"][:-1]) + float(f["back_after"][:-1]) + 10
                # it asks every master: no broker fault acts while it does
                kills = [(float(g["at"][:-1]), float(g["at"][:-1]) + float(g["restart_after"][:-1]) + 15)
                         for g in fs if g["kind"] == "kill" and g["target"] in broker_nodes]
                assert not [k for k in kills if k[0] < t1 and t0 < k[1]], fs
    assert beside >= 3
    for update in ({"workers": 2}, {"client": "grpc"}):  # the platform's producer in one process only
        other = s.model_copy(update={"load": s.load.model_copy(update=update)})  # type: ignore[union-attr]
        assert not [f for seed in range(40) for f in schedule(other, registry(), seed) if f["kind"] == "producer_crash"]
    assert words([{"kind": "consumer_kill", "consumer": "c0", "at": "20s", "back_after": "9s"},
                  {"kind": "topic_queues", "queues": 2, "at": "40s", "back_after": "12s"}]) == \
        "consumer_kill c0 at 20s (back after 9s); topic_queues to 2 queue(s) at 40s (back after 12s)"


@pytest.mark.fast
def test_a_consumer_with_a_clock_of_its_own_has_its_clock_drawn(tmp_path: Path) -> None:
    base = SCENARIOS / "clock-consumer-ahead.yaml"
    s = load_scenario(base)
    faked = {i.id for i in s.consumers.instances if i.faketime}
    drawn = []
    for seed in range(40):
        faults = schedule(s, registry(), seed, only=["consumer_clock", "consumer_kill"])
        (tmp_path / "x.yaml").write_text(yaml.safe_dump(scenario_doc(base, seed, faults)))
        load_scenario(tmp_path / "x.yaml")  # the spec takes it
        drawn += [f for f in faults if f["kind"] == "consumer_clock"]
    assert faked and drawn and {f["consumer"] for f in drawn} <= faked


# ---------------------------------------------------------------- shrinking

FAULTS = [{"id": f"f{i}", "kind": "pause", "target": f"n{i}", "at": f"{10 + 10 * i}s", "duration": "16s"}
          for i in range(5)]


def planted(need: set[str]) -> Any:
    """A fake runner: the anomaly shows iff every fault named in `need` is in the schedule."""
    calls: list[list[str]] = []

    def shows(fs: list[dict[str, Any]]) -> bool:
        calls.append([f["id"] for f in fs])
        return need <= {f["id"] for f in fs}
    return shows, calls


@pytest.mark.fast
def test_shrinking_finds_exactly_the_two_faults_that_make_the_anomaly() -> None:
    shows, calls = planted({"f1", "f3"})
    res = minimize(FAULTS, shows, budget=60)
    assert [f["id"] for f in res.faults] == ["f1", "f3"] and res.reproduced
    # and shortened and moved earlier where that still showed it (the fake does not care)
    assert all(f["duration"] == "2s" and f["at"] == "10s" for f in res.faults)
    assert calls[0] == ["f0", "f1", "f2", "f3", "f4"]  # the original first
    assert len(calls) <= 17  # big steps first (to the floor at once), and no schedule tried twice


@pytest.mark.fast
def test_shrinking_stops_at_its_budget_and_says_so() -> None:
    shows, calls = planted({"f1", "f3"})
    res = minimize(FAULTS, shows, budget=3)
    assert len(calls) == 3 and res.budget_left == 0 and "budget spent" in res.words()
    assert {"f1", "f3"} <= {f["id"] for f in res.faults}


@pytest.mark.fast
def test_an_intermittent_anomaly_is_repeated_and_its_frequency_reported() -> None:
    import random
    rng = random.Random(3)

    def shows(fs: list[dict[str, Any]]) -> bool:  # shows half the time, when f2 is there
        return "f2" in {f["id"] for f in fs} and rng.random() < 0.5
    res = minimize(FAULTS, shows, budget=200, repeats=6)
    assert [f["id"] for f in res.faults] == ["f2"]
    assert 0 < res.showed < res.runs and f"in {res.showed} of {res.runs} run(s)" in res.words()


@pytest.mark.fast
def test_an_original_that_does_not_show_again_is_not_shrunk() -> None:
    res = minimize(FAULTS, lambda fs: False, budget=10, repeats=3)
    assert not res.reproduced and res.runs == 3 and res.faults == FAULTS and "nothing to shrink" in res.words()


@pytest.mark.fast
def test_candidates_refused_as_invalid_cost_no_run() -> None:
    shows, calls = planted({"f0"})
    res = minimize(FAULTS[:2], shows, budget=20, valid=lambda fs: any(f["id"] == "f1" for f in fs))
    assert [f["id"] for f in res.faults] == ["f0", "f1"]  # dropping f1 is refused; f0 can't go (the anomaly)
    assert all("f1" in c for c in calls)
    assert [s for s, _ in candidates(FAULTS[:1])] == ["shorten f0 duration 16s -> 2s", "shorten f0 duration 16s -> 8s"]


# ---------------------------------------------------------------- bisection

VERSIONS = ["5.1.0", "5.1.1", "5.2.0", "5.3.0", "5.3.1", "5.3.2", "5.3.3", "5.4.0", "5.5.0"]


@pytest.mark.fast
def test_bisect_finds_the_first_bad_version_in_few_runs() -> None:
    calls: list[str] = []

    def shows(v: str) -> bool:
        calls.append(v)
        return VERSIONS.index(v) >= VERSIONS.index("5.4.0")
    b = bisect(VERSIONS, shows)
    assert (b.last_good, b.first_bad, b.regression) == ("5.3.3", "5.4.0", True)
    assert len(calls) <= 5 and "a regression: last good 5.3.3 (did not show in 1 run(s)), first bad 5.4.0" in b.words()
    fix = bisect(VERSIONS, lambda v: VERSIONS.index(v) < VERSIONS.index("5.3.0"))  # #8239's shape: fixed in 5.3.0
    assert (fix.before, fix.after, fix.regression, fix.first_bad) == ("5.2.0", "5.3.0", False, "5.2.0")


@pytest.mark.fast
def test_bisect_with_repeats_finds_an_intermittent_boundary() -> None:
    import random
    rng = random.Random(7)

    def shows(v: str) -> bool:  # from 5.3.0 on it shows in a third of the runs
        return VERSIONS.index(v) >= VERSIONS.index("5.3.0") and rng.random() < 1 / 3
    b = bisect(VERSIONS, shows, repeats=12)
    assert (b.last_good, b.first_bad) == ("5.2.0", "5.3.0")
    assert len(b.tried["5.2.0"].runs) == 12  # good only after every repeat


@pytest.mark.fast
def test_bisect_skips_a_version_that_cannot_run_and_says_when_both_ends_agree() -> None:
    def shows(v: str) -> bool:
        if v == "5.3.1":
            raise Unavailable("rocketmq-proxy 5.3.1 is not on Maven Central")
        return v >= "5.3.2"
    b = bisect(VERSIONS, shows)
    assert (b.last_good, b.first_bad) == ("5.3.0", "5.3.2")
    assert b.skipped == ["5.3.1: skipped (rocketmq-proxy 5.3.1 is not on Maven Central)"]
    assert bisect(VERSIONS, lambda v: True).problem == \
        "both ends show it (5.1.0 and 5.5.0): no boundary in between to find"


@pytest.mark.fast
def test_the_version_range_says_which_releases_run_mixed_in_one_line_each() -> None:
    run, mixed, skipped = versions_in("5.4.0..5.5.1")
    assert run == ["5.4.0", "5.5.0", "5.5.1"] and skipped == []
    assert mixed == ["5.5.1: runs mixed (rocketmq-namesrv, rocketmq-proxy and rocketmq-client 5.5.1 are not on Maven "
                     "Central: an older or the pinned release's stand in)"]
    assert versions_in("5.1.3,5.1.1")[1] == ["5.1.3: runs mixed (rocketmq-namesrv 5.1.3 is not on Maven Central: an "
                                             "older or the pinned release's stand in)"]
    assert versions_in("5.5.0,5.3.3")[0] == ["5.3.3", "5.5.0"]
    # 5.3.4 on Maven Central is its broker, store, namesrv and controller only: no rocketmq-common of its own
    run, mixed, skipped = versions_in("5.3.3..5.4.0")
    assert run == ["5.3.3", "5.4.0"] and mixed == [] and skipped == [
        "5.3.4: skipped (rocketmq-common, rocketmq-remoting, rocketmq-srvutil and rocketmq-filter 5.3.4 are not on "
        "Maven Central, and a release runs only on its own core modules)"]
    with pytest.raises(UserError, match=r"fewer than two versions to run \(5.3.4: skipped"):
        versions_in("5.3.4,5.4.0")
    # 4.x ranges, and across the majors: 4.9.6 has no broker or store of its own on Maven Central
    run, mixed, skipped = versions_in("4.9.5..5.1.0")
    assert run == ["4.9.5", "4.9.7", "5.0.0", "5.1.0"] and skipped[0].startswith("4.9.6: skipped (rocketmq-store, ")
    assert mixed == ["4.9.5: runs mixed (rocketmq-example 4.9.5 is not on Maven Central: another 4.x release's stand in)",
                     "4.9.7: runs mixed (rocketmq-example 4.9.7 is not on Maven Central: another 4.x release's stand in)"]
    assert versions_in("4.6.0..4.7.0")[0] == ["4.6.0", "4.6.1", "4.7.0"]
    for bad, line in (("5.5.0..5.1.0", "must go from an older version"),
                      ("4.9.8..5.5.0", "4.9.8 is not a release this platform runs"),
                      ("4.5.0..4.9.7", "4.5.0 is not a release this platform runs"),
                      ("5.5.0", "fewer than two versions")):
        with pytest.raises(UserError, match=line):
            versions_in(bad)


@pytest.mark.fast
def test_a_release_lacking_a_client_program_or_namesrv_takes_it_from_an_older_or_the_pinned_one() -> None:
    from rmqchaos.machine import paths
    from rmqchaos.rocketmq import dist as rocketmq_dist
    assert rocketmq_dist.donor("5.5.1", "rocketmq-namesrv") == "5.5.0"
    assert rocketmq_dist.donor("5.3.4", "rocketmq-proxy") == "5.3.3"
    assert rocketmq_dist.donor("5.3.4", "rocketmq-client") == paths.pinned_rocketmq_version()
    # when the nearest is not served that day either, the next: older ones nearest first, then newer ones
    assert rocketmq_dist.donors("5.3.1", "rocketmq-namesrv") == ["5.3.0", "5.2.0", "5.1.1", "5.1.0", "5.3.2", "5.3.3",
                                                                 "5.4.0", "5.5.0"]
    assert "rocketmq-broker" not in {*rocketmq_dist.CLIENT_SIDE, *rocketmq_dist.SERVER_SIDE}  # the version itself
    # a 4.x release takes a missing piece from another 4.x release only (a 5.x piece brings 5.x's common
    # modules): rocketmq-example 4.9.7 is not on Maven Central
    assert rocketmq_dist.donors("4.9.7", "rocketmq-example") == ["4.7.0", "4.6.1", "4.6.0"]  # the nearest that has it
    assert rocketmq_dist.donors("4.6.0", "rocketmq-client")[:2] == ["4.6.1", "4.7.0"]  # none older: the nearest newer
    assert all(rocketmq_dist.major(v) == 5 for v in rocketmq_dist.donors("5.3.4", "rocketmq-namesrv"))
    assert all(rocketmq_dist.major(v) == 4 for v in rocketmq_dist.donors("4.9.7", "rocketmq-client"))


# ---------------------------------------------------------------- the checks

@pytest.mark.fast
def test_anomalies_are_conditions_on_the_runs_figures() -> None:
    s = {"counts": {"lost": 3, "unexpected": 0, "corrupted_deliveries": 0}, "duplicates_by_cause": {"producer_resend": 40},
         "failover": {"two_master_windows": [{"group": "broker-a", "t": 12, "nodes": ["broker-a-0", "broker-a-1"]}],
                      "stale_reads": 0}, "reused_queue_offsets": {"positions": 2}, "events": []}
    assert [a["check"] for a in anomalies(s)] == ["lost", "two_masters", "reused_queue_offsets"]
    assert anomalies(s)[0] == {"check": "lost", "condition": "lost > 0", "seen": "lost = 3"}
    s["duplicates_by_cause"]["unexplained"] = 1  # a resend explains duplicates; nothing explains these
    assert "unexplained_duplicates" in [a["check"] for a in anomalies(s)]
    assert set(CHECKS) >= {"lost", "two_masters", "stale_reads", "reused_queue_offsets", "unexplained_duplicates"}
    # the later checkers: none on a run without their load; each on a run whose load shows it
    assert not {"order_gaps", "rolled_back_delivered", "timers_early", "pop_redelivered_after_change"} & {
        a["check"] for a in anomalies(s)}
    s.update(order={"keys": 4, "keys_in_order": 3, "messages_by_anomaly": {"gap": 1, "reordered": 0}},
             transactions={"classes": {"rolled_back_delivered": 2, "committed_lost": 0}},
             timers={"early": {"keys": 5}, "lost": 0, "late_over": {"keys": 9}, "no_fault": {"lost": 0}, "late_ms": {}},
             pop={"classes": {"consumed_but_lost": 0}, "causes": {"redelivered_after_ack": {"after_change": 7}}})
    got = {a["check"]: a["seen"] for a in anomalies(s)}
    assert got["order_gaps"] == "order_gaps = 1" and "order_reordered" not in got
    assert got["rolled_back_delivered"] == "transactions.rolled_back_delivered = 2" and "committed_lost" not in got
    assert got["timers_early"] == "timers_early = 5" and "pop_consumed_but_lost" not in got
    assert got["pop_redelivered_after_change"] == "pop.redelivered_after_ack.after_change = 7"
    assert "dledger_terms_reused" not in got  # no DLedger replica's logs read
    s.update(dledger_elections={"broker-a-0": [1], "broker-a-1": [1]},
             cluster={"brokers": {"broker-a-0": {"brokerName": "broker-a"}, "broker-a-1": {"brokerName": "broker-a"}}})
    assert {a["check"]: a["seen"] for a in anomalies(s)}["dledger_terms_reused"] == "dledger_terms_reused = 1"


# ---------------------------------------------------------------- in the nightly

@pytest.mark.fast
def test_a_drawn_runs_anomaly_and_failure_are_named_in_the_nightly_never_failing_it(tmp_path: Path, monkeypatch: Any,
                                                                                     capsys: Any) -> None:
    import json
    from pipeline.workflows import matrix
    from pipeline.history.explored import section
    from pipeline.runs import create_run
    monkeypatch.setenv("RMQCHAOS_HISTORY", str(tmp_path / "history.duckdb"))
    base = SCENARIOS / "explore" / "small.yaml"
    faults = [{"id": "pause-1", "kind": "pause", "target": "broker-a", "at": "12s", "duration": "4s"}]
    f = tmp_path / "explore-77.yaml"
    f.write_text(yaml.safe_dump(scenario_doc(base, 77, faults)))
    run = create_run(f, tmp_path / "run-77")
    run.set_stage("load", {"status": "failed", "start_ms": 1, "end_ms": 2, "error": "fault pause-1 failed"})
    (run.path / "analysis").mkdir(exist_ok=True)
    run.summary_file.write_text(json.dumps({"run_id": run.run_id, "scenario": "explore-77", "complete": True,
                                            "counts": {"lost": 5}, "events": [], "duplicates_by_cause": {}}))
    res = matrix.verdict([str(run.path)])  # no UserError: a drawn run never fails the matrix
    assert res["failed"] == {} and res["explored"][0]["anomalies"][0]["seen"] == "lost = 5"
    out = capsys.readouterr().out
    assert "verdict: seed 77: ANOMALY lost = 5 | pause broker-a at 12s (duration 4s)" in out
    html = section([str(run.path)])
    assert "Explored schedules: the anomalies they found" in html and "ANOMALY: lost = 5" in html and ">77<" in html
    assert "NEW" not in html  # not in the run history: nothing to tell new from known


@pytest.mark.fast
def test_an_anomaly_no_earlier_exploration_of_its_base_showed_is_marked_new(tmp_path: Path, monkeypatch: Any) -> None:
    import json
    from analysis.history import history
    from pipeline.history.explored import section
    from pipeline.runs import create_run
    monkeypatch.setenv("RMQCHAOS_HISTORY", str(tmp_path / "history.duckdb"))
    base = SCENARIOS / "explore" / "small.yaml"

    def drawn(seed: int, start_ms: int, counts: dict[str, int]) -> str:
        faults = [{"id": "pause-1", "kind": "pause", "target": "broker-a", "at": "12s", "duration": "4s"}]
        f = tmp_path / f"explore-{seed}.yaml"
        f.write_text(yaml.safe_dump(scenario_doc(base, seed, faults)))
        run = create_run(f, tmp_path / f"run-{seed}")
        (run.path / "analysis").mkdir(exist_ok=True)
        s = {"run_id": run.run_id, "scenario": f"explore-{seed}", "complete": True, "counts": counts,
             "events": [{"kind": "load", "target": "T", "start_ms": start_ms, "outcome": "done"}],
             "duplicates_by_cause": {}, "reused_queue_offsets": {"positions": 0}}
        run.summary_file.write_text(json.dumps(s))
        history.record(s, run.path)
        return str(run.path)
    drawn(1, 1_000, {"lost": 2})  # an earlier night found loss on this base
    tonight = [drawn(2, 9_000, {"lost": 5}), drawn(3, 9_500, {"lost": 0, "unexpected": 3})]
    html = section(tonight)
    assert "ANOMALY: lost = 5" in html and "ANOMALY: NEW unexpected = 3" in html
    assert html.index("NEW unexpected") < html.index("lost = 5")  # the new one first
    assert "1 of them (marked NEW) never shown before" in html


@pytest.mark.fast
def test_bisect_takes_a_miss_for_another_reason_than_the_signature_as_could_not_tell() -> None:
    from pipeline.workflows.bisect import judged
    sig = load_scenario(SCENARIOS / "upstream" / "all-ack-cut-off-master.yaml").signature
    miss = {"what": "lost_send_ok > 0", "holds": False, "seen": "lost_send_ok = 0"}
    short = {"what": "fault isolate-master did what it was asked", "holds": False, "seen": "2 of 6 rules held"}
    assert judged({"signature": {"reached": True}}, sig) is True
    assert judged({"signature": {"reached": False, "misses": [miss]}}, sig) is False  # a good version
    assert judged({"signature": {"reached": False, "misses": [miss, short]}}, sig) is None  # the platform fell short
    assert judged({"signature": {"reached": None}}, sig) is None and judged({}, sig) is None
