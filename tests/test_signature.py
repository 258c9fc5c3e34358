"""Every scenario states what it exists to show (its signature), and a run that misses it says so:
the verdict's first clause, the combined report (misses first), the nightly's verdict and the run
history. Also the load's achieved against asked (analysis/reconcile/pace.py). Pure logic on planted summaries;
the real runs that reach their signatures are the real tier's (test_rocketmq_faults.py and others)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.reconcile.pace import generator_bound, pace
from analysis.report.report import render, verdict
from analysis.judge.figures import value
from analysis.judge.signature import evaluate, missed
from conftest import REPO, cli, write_scenario
from pipeline.runs import load_scenario
from rmqchaos.spec.expect import Signature
from test_verdict import flood, shared_host, summary, whole

pytestmark = pytest.mark.fast

SCENARIOS = REPO / "scenarios"


def sig(shows: str = "something", conditions: list[str] | None = None, **more: Any) -> Signature:
    return Signature(shows=shows, conditions=conditions or [], **more)


def judged(s: dict[str, Any], signature: Signature) -> dict[str, Any]:
    s["signature"] = evaluate(signature, s)
    return s


def test_every_scenario_file_with_a_load_states_what_it_exists_to_show() -> None:
    files = sorted(f for f in [*SCENARIOS.glob("*.yaml"), *(SCENARIOS / "upstream").glob("*.yaml"),
                               *(SCENARIOS / "explore").glob("*.yaml")]
                   if f.name not in ("nightly.yaml", "quick.yaml", "corpus.yaml"))
    missing = [f.name for f in files if (s := load_scenario(f)).load is not None and s.signature is None and s.expect is None]
    assert not missing, f"scenarios without a signature: {missing}"
    # an overlay's signature merges into its base's: one that states only failovers must not inherit the
    # base's conditions (failover-partition-master once required failover-kill-master's lost == 0; it
    # requires the opposite)
    assert load_scenario(SCENARIOS / "failover-partition-master.yaml").signature.conditions == ["lost > 0"]
    # the matrices' scenarios, each with its own (an overlay that changes what is shown restates it)
    for m in ("quick.yaml", "nightly.yaml"):
        for f in yaml.safe_load((SCENARIOS / m).read_text())["scenarios"]:
            assert load_scenario(SCENARIOS / f).signature is not None, f


@pytest.mark.parametrize("signature, expect", [
    ({"shows": "xyz", "conditions": ["bogus > 0"]}, "signature.conditions[0]: unknown figure 'bogus'"),
    ({"shows": "xyz", "conditions": ["route_absent_samples.broker-z >= 1"]},
     "signature.conditions[0]: no node 'broker-z' in this cluster; nodes: namesrv, broker-a, broker-b"),
    ({"shows": "xyz", "failovers": [{"fault": "nope", "elected_within": "30s"}]},
     "signature.failovers[0].fault: no fault with id 'nope' in this scenario"),
    ({"shows": "xyz"}, "signature needs at least one of conditions, failovers"),
    ({"conditions": ["lost == 0"]}, "signature.shows: Field required"),
])
def test_a_bad_signature_is_one_line_at_load(tmp_path: Path, signature: dict, expect: str) -> None:
    f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"}, "signature": signature})
    r = cli("validate", str(f))
    assert r.returncode == 1 and expect in r.stderr and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_control_with_a_finding_is_not_reproduced_and_says_which_figure() -> None:
    control = sig("no finding at all", ["lost == 0", "duplicated == 0", "busy == 0"])
    quiet = judged(shared_host("control", busy={}), control)
    assert quiet["signature"]["reached"] is True
    assert verdict(quiet).startswith("control: reproduced; with ASYNC_MASTER")
    busy = judged(shared_host("control", busy={"[REJECTREQUEST]": 2}), control)
    assert busy["signature"]["reached"] is False
    assert verdict(busy).startswith("control: NOT reproduced: busy == 0 (busy = 2); with ASYNC_MASTER")


def test_errors_not_busy_leave_out_the_busy_refusals() -> None:
    from analysis.judge.figures import value
    s = {"counts": {"attempts": 6115}, "errors": {"by_outcome": {"error": 19, "timeout": 128}},
         "answers": [{"answer": "[TIMEOUT_CLEAN_QUEUE]", "attempts": 19}, {"answer": "timeout", "attempts": 128}]}
    assert (value(s, "outcome.error"), value(s, "busy"), value(s, "errors_not_busy")) == (19, 19, 0)
    s["errors"]["by_outcome"]["error"] = 21  # two more that failed otherwise (e.g. connection refused)
    assert value(s, "errors_not_busy") == 2


def test_a_flood_that_fell_short_of_the_frame_is_not_reproduced_naming_its_table_against_the_frame() -> None:
    flood_sig = sig("namesrv drops broker-a", ["frames_refused >= 1", "route_absent_samples.broker-a >= 1"])
    reached = judged(flood(), flood_sig)
    assert reached["signature"]["reached"] is True and verdict(reached).startswith("retry-flood: reproduced; with")
    assert value(reached, "route_absent_samples.broker-a") == 20 and value(reached, "frames_refused") == 2
    short = flood(out=None)
    for m in short["monitor"]:
        m["frame_errors"]["count"] = 0
    # the flood's own evidence, as the fault writes it: the incident's day, a fixed count stopped by its timeout
    from chaos.kinds.topic_flood import FloodParams, flood_intent
    short["events"][0]["params"] = {"fault_kind": "topic_flood", "fault_id": "flood-a", "evidence": {
        "table_bytes": 177_128, "frame_max_bytes": 262_144,
        "intent": flood_intent("broker-a", FloodParams(), 262_144, 177_128, 825, 59.6, "the fault's timeout (60 s)")}}
    v = verdict(judged(short, flood_sig))
    assert v.startswith("retry-flood: NOT reproduced: frames_refused >= 1 (frames_refused = 0); "
                        "route_absent_samples.broker-a >= 1 (route_absent_samples.broker-a = 0); flood-a did what it "
                        "was asked (topic_flood of broker-a: reached 68 % of namesrv's 262,144 B frame (177,128 B "
                        "table, 825 topics created in 59.6 s; stopped by the fault's timeout (60 s))); with"), v


def test_a_load_that_reached_60_percent_of_its_rate_says_so() -> None:
    load = {"rate": 1000, "users": 10, "duration": 40, "policy": {"kind": "no_retry"}}
    lags = {"total": {"n": 24_000, "p50": 400, "p99": 900, "max": 1_200}, "by_second": {}}
    p = pace(load, lags)
    assert p is not None and p["reached"] == 0.6 and p["short"] is True and p["generator_bound"] is False
    # the broker held it back (no second of growing lag with fast answers): a finding, stated, not a miss
    s = judged(shared_host("shared-host", load=load, load_pace=p), sig("busy answers", ["busy > 0"]))
    v = verdict(s)
    assert v.startswith("shared-host: reproduced; with") and v.count("the load reached 60 % of its 1,000 msg/s; its "
                                                                     "sends left a median 400 ms (p99 900 ms) after "
                                                                     "their intended times") == 1, v
    # held back by the generator: the broker never saw the load the scenario names, so the run missed
    behind = {t: {"n": 600, "p50": 1000 * (t - 99), "p99": None, "wait_ms": 1_800} for t in range(100, 108)}
    g = pace(load, {**lags, "by_second": behind})
    assert g is not None and g["generator_bound"] is True
    v = verdict(judged(shared_host("shared-host", load=load, load_pace=g), sig("busy answers", ["busy > 0"])))
    assert v.startswith("shared-host: NOT reproduced: the generator kept the load's schedule (the load reached 60 % "
                        "of its 1,000 msg/s; its sends left a median 400 ms (p99 900 ms) after their intended times; "
                        "the generator, not the broker, set the pace (its 10 users waited on the broker 18 % of the time "
                        "while the load fell behind)); with"), v
    assert v.count("the load reached 60 %") == 1  # said once: the miss names it, the findings do not repeat it
    # a load on its schedule is not named at all; one without a signature still says it fell short
    ok = pace(load, {"total": {"n": 39_990, "p50": 3, "p99": 40, "max": 90}, "by_second": {}})
    assert ok is not None and ok["short"] is False
    assert "the load reached" not in verdict(judged(shared_host(load_pace=ok), sig("busy", ["busy > 0"])))
    assert "the load reached 60 %" in verdict(shared_host(load_pace=p))


def test_a_load_behind_schedule_whose_users_sat_idle_was_held_back_by_the_generator() -> None:
    # 20 users; the median lag grows second after second. Little's law: their round trips add up to
    # the share of the users' time spent waiting on the broker.
    def seconds(wait_ms: int) -> dict[int, dict[str, Any]]:
        return {t: {"n": 500, "p50": 1000 * (t - 99), "p99": None, "wait_ms": wait_ms} for t in range(100, 108)}
    assert generator_bound(seconds(2_400), 20) == (True, 0.12)  # idle 88 % of the time: the generator
    assert generator_bound(seconds(19_000), 20) == (False, 0.95)  # waiting on answers: the broker
    flat = {t: {"n": 1000, "p50": 2, "p99": None, "wait_ms": 500} for t in range(100, 108)}
    assert generator_bound(flat, 20) == (False, None)  # never behind: nothing to blame
    load = {"rate": 1000, "users": 20, "duration": 8}
    p = pace(load, {"total": {"n": 8_000, "p50": 5_100, "p99": 8_100, "max": 8_200}, "by_second": seconds(2_400)})
    assert p is not None and p["generator_bound"] is True
    assert p["words"] == ("the load reached 100 % of its 1,000 msg/s; its sends left a median 5.1 s (p99 8.1 s) after "
                          "their intended times; the generator, not the broker, set the pace (its 20 users waited on "
                          "the broker 12 % of the time while the load fell behind)")


def test_a_failed_fault_intent_a_run_that_did_not_finish_and_a_failover_bound() -> None:
    s = summary("failover-kill-master", "false", 0, None, failover={"failovers": [
        {"fault_id": "kill-master", "election_s": 0.55, "observed_s": 70, "old_master": "broker-a-0",
         "new_master": "broker-a-1", "epoch": 2, "group": "broker-a", "fault_kind": "kill"}]})
    fo = sig("a new master within 30 s", ["lost == 0"], failovers=[{"fault": "kill-master", "elected_within": 30,
                                                                    "reproduced_when": "elected"}])
    assert evaluate(fo, s)["reached"] is True
    slow = dict(s, failover={"failovers": [{**s["failover"]["failovers"][0], "election_s": 41.0}]})
    assert evaluate(fo, slow)["words"].startswith("NOT reproduced: a new master within 30 s of fault kill-master "
                                                  "(broker-a-1 master 41 s after fault kill-master on broker-a-0")
    cut = dict(s, complete=False, incomplete_reasons=["the drain timed out"])
    r = evaluate(fo, cut)
    assert r["reached"] is None and r["words"] == "NOT verified: unknown: the run finished (the drain timed out)"
    # a condition that fails in a run that did not finish: still NOT verified, the failed condition named
    r = evaluate(fo, dict(cut, counts={**cut["counts"], "lost": 3}))
    assert r["reached"] is None and r["words"] == ("NOT verified: lost == 0 (lost = 3); unknown: the run finished "
                                                   "(the drain timed out)"), r["words"]
    assert evaluate(None, s) is None
    # a repeated fault's occurrences (kill-master#1, #2) are each held to the bound
    one = s["failover"]["failovers"][0]
    rep = dict(s, failover={"failovers": [{**one, "fault_id": "kill-master#1"}, {**one, "fault_id": "kill-master#2",
                                                                                   "election_s": 41.0}]})
    r = evaluate(fo, rep)
    assert r["reached"] is False and "fault kill-master#2 on broker-a-0" in r["words"], r["words"]
    rep["failover"]["failovers"][1]["election_s"] = 9.0
    assert evaluate(fo, rep)["reached"] is True


def test_a_controller_mode_verdict_names_what_decides_replication_not_a_broker_role() -> None:
    s = summary("failover-kill-master", "false", 0, None)
    s["cluster"]["brokers"] = {f"broker-a-{i}": {"brokerRole": "SYNC_MASTER", "enableControllerMode": "true",
                                                 "allAckInSyncStateSet": "true", "flushDiskType": "ASYNC_FLUSH"}
                               for i in range(3)}
    v = verdict(s)
    assert v.startswith("failover-kill-master: with controller mode (allAckInSyncStateSet=true, inSyncReplicas=1), "
                        "ASYNC_FLUSH"), v
    assert "SYNC_MASTER" not in v
    for c in s["cluster"]["brokers"].values():  # minInSyncReplicas: named when a run sets it
        c["minInSyncReplicas"] = "2"
    assert verdict(s).startswith("failover-kill-master: with controller mode (allAckInSyncStateSet=true, "
                                 "inSyncReplicas=1, minInSyncReplicas=2), ASYNC_FLUSH")


def test_the_combined_report_lists_misses_first() -> None:
    control = sig("no finding at all", ["busy == 0"])
    good = whole(judged(shared_host("a-good", busy={}), control))
    bad = whole(judged(shared_host("z-bad", busy={"[REJECTREQUEST]": 5}), control))
    html = render([good, bad])
    table = html[html.index("id=signatures"):html.index("id=verdict")]
    assert table.index("z-bad") < table.index("a-good") and "NOT reproduced" in table
    verdicts = html[html.index("id=verdict"):]
    assert verdicts.index("z-bad: NOT reproduced") < verdicts.index("a-good: reproduced")


def _analyzed_run(tmp_path: Path, name: str, reached: bool | None) -> str:
    """A run directory the matrix verdict can read: a scenario, its stages ok, an analysis summary."""
    from pipeline.runs import create_run
    f = write_scenario(tmp_path / f"{name}.yaml", {"extends": str(SCENARIOS / "control.yaml"), "name": name})
    r = create_run(f, out=tmp_path / name)
    s = summary(name, "false", 0, None)
    s["signature"] = {"source": "signature", "shows": "no finding at all", "reached": reached,
                      "evidence": [], "misses": [], "words": "reproduced" if reached else "NOT reproduced: busy == 0 (busy = 3)"}
    r.summary_file.parent.mkdir(parents=True, exist_ok=True)
    r.summary_file.write_text(json.dumps(s))
    return str(r.path)


def test_the_nightly_fails_a_run_that_missed_its_signature_unless_asked_to_flag_it(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.workflows import matrix
    from rmqchaos.errors import UserError
    monkeypatch.setattr(matrix.trends, "judge", lambda runs, db: {"note": "", "runs": []})
    ok, miss = _analyzed_run(tmp_path, "good", True), _analyzed_run(tmp_path, "bad", False)
    assert matrix.failures(ok) == [] and matrix.failures(miss) == [
        "signature (no finding at all) NOT reproduced: busy == 0 (busy = 3)"]
    with pytest.raises(UserError) as e:
        matrix.verdict([ok, miss])
    assert "1 of 2 runs failed: bad: signature (no finding at all) NOT reproduced: busy == 0 (busy = 3)" in e.value.message
    res = matrix.verdict([ok, miss], signature_misses="flag")
    assert res["failed"] == {} and res["signatures"] == ["bad: NOT reproduced: busy == 0 (busy = 3)", "good: reproduced"]
    with pytest.raises(UserError):
        matrix.verdict([ok], signature_misses="maybe")


def test_the_history_keeps_whether_a_run_reached_its_signature_and_its_load_pace() -> None:
    from analysis.history.history import row
    s = judged(shared_host(busy={"[REJECTREQUEST]": 5}), sig("no finding", ["busy == 0"]))
    s.update(run_id="r1", load_pace={"reached": 0.6, "lag_ms": {"p50": 400}})
    r = row(s)
    assert r["signature_reached"] is False and r["signature_words"] == "NOT reproduced: busy == 0 (busy = 5)"
    assert r["load_reached"] == 0.6 and r["load_lag_p50_ms"] == 400


def _fixed_version_run(partition_short: bool, premise_held: bool = True, applied: bool = True) -> dict[str, Any]:
    """A corpus run of issue 7017 on 5.5.0 (measured), where it did not reproduce: lost_send_ok = 0."""
    from analysis.judge.expect import evaluate as expect_evaluate
    from rmqchaos.spec.expect import Expect
    exp = Expect(issue="https://github.com/apache/rocketmq/issues/7017", shows_on=["5.1.1"], gone_in=["5.5.0"],
                 conditions=["lost_send_ok > 0"], premise=["outcome.timeout > 0"])
    intent = {"short": partition_short, "reached": 0.0 if partition_short else 1.0,
              "words": "partition isolate-master: held 0 of 4 rules" if partition_short else "held 4 of 4 rules"}
    s = summary("issue-7017", "false", 0, None, counts={"acked_weak_lost": 0},
                errors={"by_outcome": {"timeout": 30 if premise_held else 0}})
    s["events"] = [{"kind": "fault", "outcome": "ok", "target": "broker-a-0",
                    "params": {"fault_id": "isolate-master", "fault_kind": "partition", "evidence": {"intent": intent}}}
                   ] if applied else []
    s["expect"] = expect_evaluate(exp, s, [], "5.5.0")
    s["signature"] = evaluate(None, s, [("isolate-master", "partition")])
    return s


def test_a_fixed_version_run_counts_only_when_its_fault_took_hold_and_the_setup_held() -> None:
    ok = _fixed_version_run(partition_short=False)
    assert ok["expect"]["as_expected"] is True and ok["signature"]["reached"] is True, ok["signature"]["words"]
    # the partition never took hold: "not reproduced, as expected" would say nothing about the fix
    short = _fixed_version_run(partition_short=True)
    assert short["expect"]["as_expected"] is True
    assert short["signature"]["reached"] is None
    assert short["signature"]["words"].startswith("NOT verified: isolate-master did what it was asked "
                                                  "(partition isolate-master: held 0 of 4 rules)"), short["signature"]["words"]
    assert missed(short)
    # the bug's setup did not happen (no send timed out against the isolated master)
    bare = _fixed_version_run(partition_short=False, premise_held=False)
    assert bare["signature"]["reached"] is None
    assert "the bug's setup: outcome.timeout > 0 (outcome.timeout = 0)" in bare["signature"]["words"]
    # the fault was never applied at all
    none = _fixed_version_run(partition_short=False, applied=False)
    assert none["signature"]["reached"] is None
    assert "fault isolate-master was applied (no occurrence of it ended ok in the timeline)" in none["signature"]["words"]


def test_a_signature_run_whose_fault_was_never_applied_is_not_reproduced() -> None:
    s = summary("oom-tsp-on", "true", 5, {"lost_from_store": 5})
    s["events"] = []
    r = evaluate(sig("loss", ["store_check.lost_from_store > 0"]), s, [("oom", "oom_kill")])
    assert r is not None and r["reached"] is False
    assert r["words"] == ("NOT reproduced: fault oom was applied (no occurrence of it ended ok in the timeline)")


def test_a_failover_check_can_bound_the_first_ack_after_the_fault() -> None:
    from rmqchaos.spec.expect import FailoverCheck
    fo = FailoverCheck(fault="kill-master", elected_within=25, first_ack_between=[30, 45])

    def run(ack: float | None) -> dict[str, Any]:
        f = {"fault_id": "kill-master", "group": "broker-a", "old_master": "broker-a", "election_s": None,
             "observed_s": 70, "first_ack_any_s": ack, "first_ack_any_node": "broker-a" if ack else None,
             "reasons": {"election": "no node other than broker-a was master", "first_ack_any": "no send was acknowledged"}}
        return {"complete": True, "failover": {"failovers": [f]}}
    assert fo.words() == "no new master within 25 s of fault kill-master, and the group's first ack 30-45 s after it"
    from analysis.judge.expect import failover_evidence
    assert failover_evidence(fo, run(35.1))["holds"] is True
    early = failover_evidence(fo, run(3.0))  # writes came back long before the restart: something took over
    assert early["holds"] is False and "first ack 3 s after it (broker-a)" in early["seen"]
    assert failover_evidence(fo, run(None))["holds"] is False
    assert failover_evidence(fo, {"complete": True})["holds"] is None  # no fault, no failover record
