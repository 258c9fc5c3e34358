"""Pure logic of the pre-release test against a baseline (pipeline/workflows/compare.py), no JVM: the runs it
prepares and their order, and the relative gates on planted summaries."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeline.workflows import compare
from pipeline.stages import slot
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir

pytestmark = pytest.mark.fast
CANDIDATE = {"rocketmq_version": "5.5.0", "broker_config": {"flushDiskType": "SYNC_FLUSH"}, "rate": 50,
             "duration": 5, "fault_set": "none"}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RMQCHAOS_RUNS", str(tmp_path / "runs"))


def _plant(run_dir: str, lost: int = 0, p99: float | None = 100, busy: int = 0, complete: bool = True,
           stages: str = "ok") -> None:
    run = RunDir.open(run_dir)
    for name in ("up", "check", "load", "drain", "down", "analyze"):
        run.set_stage(name, {"status": stages if name == "load" else "ok", "start_ms": 1, "end_ms": 2,
                             "error": "fault x failed" if stages != "ok" and name == "load" else None})
    run.analysis_dir.mkdir(exist_ok=True)
    run.summary_file.write_text(json.dumps({
        "complete": complete, "incomplete_reasons": [] if complete else ["consumer c0 did not stop cleanly"],
        "counts": {"lost": lost, "duplicated": 0, "attempts": 1000, "acked": 1000, "ok": 1000 - lost},
        "errors": {"by_code": {"0": 1000 - busy, "2": busy}}, "latency_ms": {"send": {"p99": p99} if p99 else {}}}))


def test_the_candidate_and_the_baseline_alternate_in_order_and_take_the_slot_in_turn() -> None:
    runs = compare.prepare({**CANDIDATE, "rounds": 2})
    assert [compare.label(r) for r in runs] == ["candidate round 1", "baseline round 1", "candidate round 2",
                                                "baseline round 2"]
    c, b = RunDir.open(runs[0]).scenario(), RunDir.open(runs[1]).scenario()
    assert c.cluster.broker_defaults.config["flushDiskType"] == "SYNC_FLUSH" and c.name == "prerelease"
    assert b.cluster.broker_defaults.config["flushDiskType"] == "ASYNC_FLUSH" and b.name == "prerelease-baseline"
    assert (b.load.rate, b.load.duration, b.faults) == (50, 5, [])  # the same load and faults as the candidate
    assert [RunDir.open(r).state()["after"] for r in runs] == [None, *runs[:-1]]
    first, second = RunDir.open(runs[0]), RunDir.open(runs[1])
    assert not slot.acquire(second)  # its turn comes after the candidate's run, free slot or not
    assert slot.acquire(first)
    first.set_stage("up", {"status": "running", "pid": os.getpid(), "starttime": None})
    assert not slot.acquire(second)
    first.set_stage("down", {"status": "ok"})
    slot.release(first)
    assert slot.acquire(second) and not slot.acquire(RunDir.open(runs[3]))
    assert [compare.label(r) for r in compare.prepare({**CANDIDATE, "baseline": False})] == ["candidate round 1"]
    with pytest.raises(UserError, match="rounds 0 is not a whole number from 1 to 5"):
        compare.prepare({**CANDIDATE, "rounds": 0})


def test_a_candidate_equal_to_its_baseline_passes_the_relative_gates() -> None:
    runs = compare.prepare({**CANDIDATE, "rounds": 2})
    for r, p99 in zip(runs, (120, 100, 110, 140)):  # the baseline's spread: 100..140 ms
        _plant(r, p99=p99, busy=3)
    v = compare.judge(runs, {"max_lost": 0, "max_p99_send_ms": 1000, "max_p99_increase_pct": 50})
    assert v["passed"] and v["problems"] == []
    rel = {g["gate"]: g for g in v["gates"] if g["gate"].endswith("_vs_baseline")}
    assert rel["p99_vs_baseline"]["limit"] == 210 and rel["p99_vs_baseline"]["measured"] == 120  # 140 × 1.5
    assert rel["busy_vs_baseline"]["limit"] == 0.004 and rel["lost_vs_baseline"]["limit"] == 0
    html = Path(v["report"]).read_text()
    assert html.count("candidate ") >= 2 and "baseline 2" in html and "passed" in html
    assert json.loads(Path(v["report"][:-5] + ".json").read_text())["passed"]


def test_a_worse_candidate_fails_naming_each_relative_gate_with_its_limit_and_measured_value() -> None:
    runs = compare.prepare(CANDIDATE)
    _plant(runs[0], lost=7, p99=400, busy=30)
    _plant(runs[1], lost=2, p99=100, busy=3)
    with pytest.raises(UserError) as e:
        compare.judge(runs, {"max_lost": None, "max_p99_send_ms": None, "max_p99_increase_pct": 50})
    msg = e.value.line()
    assert msg.startswith("pre-release gate crossed: ")
    assert "gate lost_vs_baseline (acknowledged keys never delivered, the candidate's worst round vs the " \
           "baseline's worst): limit 2 keys, measured 7 keys" in msg
    assert "gate p99_vs_baseline" in msg and "limit 150 ms, measured 400 ms" in msg
    assert "gate busy_vs_baseline" in msg and "limit 0.004, measured 0.03" in msg
    # the absolute gates still apply to the candidate, with or without the relative ones
    with pytest.raises(UserError) as e:
        compare.judge(runs, {"max_lost": 5, "relative_gates": False})
    assert e.value.line() == ("pre-release gate crossed: candidate round 1: gate max_lost (acknowledged keys never "
                              f"delivered): limit 5 keys, measured 7 keys: see {Path(e.value.line().split('see ')[1])}")


def test_an_unverified_or_failed_run_on_either_side_never_passes() -> None:
    runs = compare.prepare(CANDIDATE)
    _plant(runs[0])
    _plant(runs[1], complete=False)  # the baseline could not verify its loss: nothing to compare with
    v = compare.evaluate(runs, {"max_lost": 0})
    assert not v["passed"] and v["problems"] == [
        "baseline round 1 failed: incomplete, loss not verified: consumer c0 did not stop cleanly"]
    assert [g["gate"] for g in v["gates"]] == ["max_lost"]  # relative gates are not judged against it
    _plant(runs[1], stages="failed")
    with pytest.raises(UserError, match="baseline round 1 failed: stage load failed: fault x failed"):
        compare.judge(runs, {"max_lost": 0})
    runs = compare.prepare(CANDIDATE)
    _plant(runs[0])
    _plant(runs[1], p99=None)  # complete, but no acknowledged send: the p99 limit is unknown
    v = compare.evaluate(runs, {})
    p99 = next(g for g in v["gates"] if g["gate"] == "p99_vs_baseline")
    assert not v["passed"] and not p99["passed"] and "limit unknown (the baseline's value was not measured)" \
        in p99["line"]


def test_the_upgrade_figures_are_ranges_over_the_verified_repeats_per_scenario_and_version(tmp_path: Path) -> None:
    from pipeline.runs import create_run
    from pipeline.workflows import upgrade
    [f] = upgrade.overlays(["oom-tsp-on"], ["5.5.0"], tmp_path / "o")
    assert f.name == "oom-tsp-on-v5.5.0.yaml"
    runs = [str(create_run(f, tmp_path / f"r{i}", mode="detached").path) for i in range(3)]
    for d, lost, complete in zip(runs, (1, 109, 500), (True, True, False)):
        _plant(d, lost=lost, busy=2, complete=complete)
    assert upgrade.table([Path(d) for d in runs]).splitlines()[2] == \
        "| oom-tsp-on | 5.5.0 | 3 (1 unverified) | 1-109 | 0 | 100 | 2 |"  # the unverified run's 500 is in no range
