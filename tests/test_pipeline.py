"""The pipeline as a DAG and a person drive it, on a real cluster: one stage at a time through the
CLI with load and faults (kill, jvm_oom, a repeated pause, restarts) through analyze and the HTML
report; and several scenarios (overlays of one base) run and reported side by side."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import cli, scenario_dict, write_scenario
from helpers import assert_nothing_left
from rmqchaos.run.stagetimes import time_by_stage, time_line


def fault_events(run_dir: Path) -> dict[str, dict]:
    out = {}
    for x in (run_dir / "timeline.jsonl").read_text().splitlines():
        e = json.loads(x)
        if e["kind"] == "fault":
            out[e["params"]["fault_id"]] = e
    return out


@pytest.mark.long  # make test: the DAG tests run the same stage functions one task at a time, with faults, to the HTML report
def test_stages_one_at_a_time_with_load_and_faults_through_the_html_report(tmp_path: Path) -> None:
    d = scenario_dict("stages", 25876, [25911, 25921],
                      checks={"witness": {"messages": 200, "threads": 2, "topic": "T_STAGES_W"}},
                      load={"topic": "T_STAGES", "users": 6, "rate": 150, "duration": "36s", "timeout": "1s"},
                      consumers={"settle": "5s"},
                      faults=[{"id": "pause-a", "kind": "pause", "target": "broker-a", "at": "2s", "duration": "2s",
                               "repeat": {"every": "5s", "times": 2}},
                              {"id": "kill-b", "kind": "kill", "target": "broker-b", "at": "3s", "restart_after": "4s"},
                              {"id": "oom-a", "kind": "jvm_oom", "target": "broker-a", "at": "16s",
                               "restart_after": "4s"}])
    d["cluster"]["broker_defaults"] = {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256,
                                               "options": ["-XX:+ExitOnOutOfMemoryError"]}}
    f = write_scenario(tmp_path / "stages.yaml", d)
    run = tmp_path / "run"
    results = {}
    try:
        r = cli("stage", "up", str(run), "--scenario", str(f))
        assert r.returncode == 0, r.stderr[-2000:]
        results["up"] = json.loads(r.stdout)
        for st in ("check", "load", "drain"):
            r = cli("stage", st, str(run), timeout=600)
            assert r.returncode == 0, r.stderr[-3000:]
            results[st] = json.loads(r.stdout)
    finally:
        r = cli("stage", "down", str(run))
    assert r.returncode == 0, r.stderr
    assert_nothing_left(run)
    assert results["up"]["namesrv"] == "127.0.10.1:25876"
    assert results["check"]["witness"]["ok"] is True and results["check"]["witness"]["read_back_total"] == 200
    assert results["load"] == {"faults": 6, "consumers": 1}
    assert results["drain"]["drained"] is True and results["drain"]["deliveries"] > 0
    disk = [json.loads(x) for x in (run / "metrics" / "disk.jsonl").read_text().splitlines()]
    assert len(disk) >= 30 and sum(r["write_mb_s"] for r in disk) > 0, disk  # once a second through the 36 s load

    ev = fault_events(run)
    assert set(ev) == {"pause-a#1", "pause-a#2", "kill-b", "kill-b-restart", "oom-a", "oom-a-restart"}
    assert all(e["outcome"] == "ok" for e in ev.values()), {k: e["params"]["evidence"] for k, e in ev.items()}
    assert ev["kill-b"]["params"]["evidence"]["signal"] == "SIGKILL"
    assert "OutOfMemoryError" in (ev["oom-a"]["params"]["evidence"]["stdout"] or "")
    for k in ("pause-a#1", "pause-a#2"):
        assert 1.9 <= ev[k]["params"]["evidence"]["frozen_s"] <= 3.0
    # concurrent occurrences: broker-b's restart (at 7 s, until re-registered) overlaps the second pause (7-9 s)
    assert ev["kill-b-restart"]["start_ms"] < ev["pause-a#2"]["end_ms"]
    assert ev["pause-a#2"]["start_ms"] < ev["kill-b-restart"]["end_ms"]

    r = cli("stage", "analyze", str(run), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = json.loads(r.stdout)["counts"]
    assert counts["keys"] > 0 and counts["acked"] > 0
    assert counts["keys"] == sum(counts[c] for c in ("ok", "lost", "duplicated", "recovered", "failed",
                                                    "indeterminate"))
    r = cli("stage", "report", str(run))
    assert r.returncode == 0, r.stderr
    assert f"keys {counts['keys']} " in r.stdout
    html = (run / "report.html").read_text()
    assert "<svg" in html and "stages" in html
    state = json.loads((run / "state.json").read_text())
    assert [*state["stages"]] == ["up", "check", "load", "drain", "down", "analyze", "report"]
    assert all(s["status"] == "ok" for s in state["stages"].values())


# long: two whole runs; `make test` covers a matrix and its combined report through the nightly DAG
# (tests/test_dags.py) and the comparisons in tests/test_verdict.py
@pytest.mark.long
def test_two_overlay_scenarios_run_and_are_reported_side_by_side(tmp_path: Path) -> None:
    base = scenario_dict("base", 25876, [25911, 25921],
                         load={"topic": "T_PAIR", "users": 4, "rate": 100, "duration": "8s"},
                         consumers={"settle": "3s"})
    write_scenario(tmp_path / "base.yaml", base)
    (tmp_path / "pair-a.yaml").write_text("extends: base.yaml\n")
    (tmp_path / "pair-b.yaml").write_text("extends: base.yaml\nload: {rate: 150}\n")
    out = tmp_path / "pair.html"
    r = cli("run", str(tmp_path / "pair-a.yaml"), str(tmp_path / "pair-b.yaml"), "--report", str(out), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"report: {out}" in r.stdout
    runs = sorted(p for p in Path(os.environ["RMQCHAOS_RUNS"]).iterdir() if p.is_dir())
    assert [p.name.rsplit("-", 2)[-2:] for p in runs] == [["pair", "a"], ["pair", "b"]]
    for p in runs:
        assert json.loads((p / "analysis" / "summary.json").read_text())["counts"]["lost"] == 0
        assert_nothing_left(p)
        # where the time went, in the text report: each stage's seconds and the rest between them add
        # up to the wall time (how long this host took is not the test's business: docs/benchmarks.md)
        stages = json.loads((p / "state.json").read_text())["stages"]
        t = time_by_stage({k: v for k, v in stages.items() if k != "report"})  # what report.txt could know
        assert t is not None and t["load_s"] and time_line(t) in (p / "report.txt").read_text()
        assert abs(sum(t["stages"].values()) + t["between_s"] - t["wall_s"]) <= 0.1 * len(t["stages"]) + 0.1, t
    html = out.read_text()
    assert "pair-a" in html and "pair-b" in html
    assert r.stdout.count("LOST 0,") == 2, r.stdout  # each run's text report, then the combined one
