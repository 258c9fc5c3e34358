"""The run history in the nightly and the report (issue 38 items 2 and 3): the nightly verdict judges
each run against its scenario's trailing runs (pipeline/workflows/matrix.py `verdict`, pipeline/history/trends.py) and
the report shows each scenario's trend (analysis/history/trends.py). Planted history rows (summaries shaped
like a real analysis/summary.json, tests/test_history.py) and planted run directories; no JVM."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from analysis.history import history
from cli.main import main
from pipeline.workflows import matrix
from pipeline.stages.report import rebuild
from pipeline.runs import create_run
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.run.rundir import RunDir
from tests.helpers import CHROMIUM_FLAGS, chromium
from tests.test_history import DAY, T0, plant, summary

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parent.parent
NIGHTS = 5  # earlier nights per scenario in the planted history
LOSSY = [97, 79, 82, 1, 7]  # oom-tsp-on's losses over its earlier nights (six `make run`s, issue 38)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A history of NIGHTS earlier nights of control (no loss, p99 140..160 ms) and oom-tsp-on (lossy)."""
    old = tmp_path / "old-runs"
    for i in range(NIGHTS):
        plant(old, summary(f"2026110{i}T020000-control-c0000{i}", "control", T0 + i * DAY, p99=140 + 5 * i))
        plant(old, summary(f"2026110{i}T021000-oom-tsp-on-t0000{i}", "oom-tsp-on", T0 + i * DAY + 600_000,
                           lost=LOSSY[i], p99=150))
    f = tmp_path / "history.duckdb"
    history.import_paths([old], f)
    return f


def tonight(tmp_path: Path, scenario: str, lost: int = 0, p99: int = 150, record: Path | None = None) -> RunDir:
    """Tonight's run of `scenario`: a run directory whose stages all ended ok, with its summary (and,
    as the analyze stage does, its row in the history `record`)."""
    run = create_run(REPO / "scenarios" / "prerelease.yaml", tmp_path / f"tonight-{scenario}", mode="detached")
    t = now_ms()
    for name in ("up", "check", "load", "drain", "down", "analyze"):
        run.set_stage(name, {"status": "ok", "start_ms": t, "end_ms": t, "error": None})
    run.analysis_dir.mkdir()
    s = summary(run.state()["run_id"], scenario, T0 + NIGHTS * DAY + 60_000, lost=lost, p99=p99,
                run_dir=str(run.path))
    for w in s["windows"]:  # what the HTML report reads besides the history's figures
        w.update(latency_from_intended_ms={"p99": p99}, keys_by_class=w.get("keys_by_class") or {},
                 throughput_drop=w.get("throughput_drop"))
    run.summary_file.write_text(json.dumps(s))
    if record:
        history.record(s, run.path, record)
    return run


def test_an_ordinary_night_passes_and_says_so(tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [str(tonight(tmp_path, "control", p99=160, record=db).path),
            str(tonight(tmp_path, "oom-tsp-on", lost=60, record=db).path)]  # a lossy scenario that keeps losing
    res = matrix.verdict(runs, db)
    assert res["failed"] == {} and res["flags"] == []
    assert [len(r["baseline"]) for r in res["regressions"]] == [NIGHTS, NIGHTS]
    assert "verdict: nothing left its range (2 run(s) against the run history)" in capsys.readouterr().out


def test_a_control_night_that_lost_one_key_fails_the_nightly_naming_it(tmp_path: Path, db: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ctl = tonight(tmp_path, "control", lost=1, record=db)
    tsp = tonight(tmp_path, "oom-tsp-on", lost=90, p99=2000)  # not recorded: judged from its own summary
    with pytest.raises(UserError) as e:
        matrix.verdict([str(ctl.path), str(tsp.path)], db)
    cid, tid = ctl.state()["run_id"], tsp.state()["run_id"]
    new_loss = (f"control (run {cid}): REGRESSION of a zero-loss scenario: lost 1 acknowledged message(s) in a "
                f"scenario that lost none in its last {NIGHTS} complete run(s)")
    # the p99 far outside its range (140..160, limit 210) is named, and fails nothing: only the new loss does
    p99 = (f"oom-tsp-on (run {tid}): beyond its range: p99 send latency (ms) 2000, beyond its last {NIGHTS} runs' "
           "150..150 (limit 200)")
    assert e.value.line() == f"{new_loss}: see the combined report"
    log = capsys.readouterr().out.splitlines()
    assert f"verdict: {new_loss}" in log and f"verdict: {p99}" in log
    # a run that failed is named before the regressions, as before
    ctl.set_stage("load", {"status": "failed", "start_ms": now_ms(), "end_ms": now_ms(), "error": "fault x failed"})
    with pytest.raises(UserError, match=r"^1 of 2 runs failed: prerelease: stage load failed: fault x failed \| "
                                        r"control \(run .*\): REGRESSION of a zero-loss scenario: lost 1"):
        matrix.verdict([str(ctl.path), str(tsp.path)], db)


def test_a_control_night_whose_p99_left_its_range_is_named_and_fails_nothing(tmp_path: Path, db: Path) -> None:
    run = tonight(tmp_path, "control", p99=900, record=db)
    res = matrix.verdict([str(run.path)], db)
    assert res["flags"] == [f"control (run {run.state()['run_id']}): beyond its range: p99 send latency (ms) 900, "
                            f"beyond its last {NIGHTS} runs' 140..160 (limit 210)",
                            f"control (run {run.state()['run_id']}): beyond its range: p99 latency from the intended "
                            f"send time (ms) 920, beyond its last {NIGHTS} runs' 160..180 (limit 230)",
                            f"control (run {run.state()['run_id']}): beyond its range: p99 end-to-end latency (ms) "
                            f"960, beyond its last {NIGHTS} runs' 200..220 (limit 275)"]


def test_a_first_night_without_a_history_is_judged_against_nothing(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tonight(tmp_path, "control", lost=1)
    res = matrix.verdict([str(run.path)], tmp_path / "none.duckdb")  # lost 1, but nothing to compare with
    assert res["flags"] == [] and res["regressions"][0]["notes"] == [
        "no earlier complete run of this scenario: nothing to compare with"]
    assert "verdict: the run history could not be read, so these runs are judged against nothing: no run history " \
           "at" in capsys.readouterr().out
    run.summary_file.write_text("{}")  # a summary the history cannot read: the verdict still stands
    res = matrix.verdict([str(run.path)], tmp_path / "none.duckdb")
    assert res["regressions"] == [] and "verdict: the runs could not be judged against the run history: " \
                                       "KeyError" in capsys.readouterr().out


def _dom(page: Path, profile: Path) -> str:
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                          capture_output=True, timeout=120, check=True, text=True).stdout


def _markers(dom: str, gid: str) -> int:
    """Markers drawn in the plot group `gid` of the rendered page (one <use> per point)."""
    from html.parser import HTMLParser

    class Count(HTMLParser):
        depth, uses = 0, 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if self.depth:
                self.depth += tag == "g"
                self.uses += tag == "use"
            elif tag == "g" and ("id", gid) in attrs:
                self.depth = 1

        def handle_endtag(self, tag: str) -> None:
            if self.depth and tag == "g":
                self.depth -= 1
    c = Count()
    c.feed(dom)
    return c.uses


def test_the_trend_page_renders_in_chromium_with_one_point_per_night(tmp_path: Path, db: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ctl = tonight(tmp_path, "control", lost=1, record=db)
    tsp = tonight(tmp_path, "oom-tsp-on", lost=60, record=db)
    out = tmp_path / "report.html"
    assert main(["report", str(ctl.path), str(tsp.path), "--out", str(out), "--history", "--db", str(db)]) == 0
    text = out.read_text()
    for external in ("<script", "<link", "src=", 'href="http'):  # still self-contained
        assert external not in text, external
    dom = _dom(out, tmp_path / "profile")
    for name in ("control", "oom-tsp-on"):
        assert f'data-scenario="{name}" data-runs="{NIGHTS + 1}"' in dom
        for fig in ("lost", "duplicated", "busy_rate", "send_p99_ms", "max_rto_s"):
            assert _markers(dom, f"trend-{name}-{fig}-points") == NIGHTS + 1, (name, fig)
    assert _markers(dom, "trend-control-lost-regression") == 1  # tonight's loss, ringed
    assert _markers(dom, "trend-oom-tsp-on-lost-regression") == _markers(dom, "trend-oom-tsp-on-lost-flagged") == 0
    assert 'id="trend-control-lost-range"' in dom
    flags = re.findall(r'<li class="warn" data-fails="(\w+)">(.*?)</li>', dom)
    assert flags == [("true", f"control (run {ctl.state()['run_id']}): REGRESSION of a zero-loss scenario: lost 1 "
                              f"acknowledged message(s) in a scenario that lost none in its last {NIGHTS} complete "
                              "run(s)")]
    # without --history: no trend
    assert main(["report", str(ctl.path), "--out", str(tmp_path / "plain.html")]) == 0
    assert "Against the run history" not in (tmp_path / "plain.html").read_text()


def test_the_loss_report_and_the_nightly_report_carry_the_trends(tmp_path: Path, db: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQCHAOS_HISTORY", str(db))
    ctl = tonight(tmp_path, "control", p99=900, record=db)
    one = rebuild([ctl.path], history=True)  # the loss-report DAG's task, triggered by one analysis
    page = Path(one["report"]).read_text()
    assert one["report"] == str(ctl.report_html) and "Against the run history" in page
    assert "p99 send latency (ms) 900, beyond its last 5 runs&#x27; 140..160 (limit 210)" in page
    rep: dict[str, Any] = matrix.combined_report([{"run_dir": str(ctl.path)}], tmp_path / "nightly.html")
    assert "beyond its range: p99 send latency (ms) 900" in Path(rep["report"]).read_text()
    part = matrix.combined_report([{"run_dir": str(ctl.path)}], part="2/4")  # a part's report says which
    assert Path(part["report"]).name.endswith("-nightly-part-2-of-4.html") and Path(part["report"]).exists()


def test_each_point_sits_over_the_range_of_its_own_baseline(db: Path) -> None:
    from analysis.history.trends import points
    rows = history.runs(db, scenario="oom-tsp-on")
    pts = points(rows)
    assert [p["row"]["lost"] for p in pts] == LOSSY
    assert [p["range"]["lost"] for p in pts] == [None, (97, 97), (79, 97), (79, 97), (1, 97)]  # the runs before each
    assert [len(p["judged"]["baseline"]) for p in pts] == [0, 1, 2, 3, 4]
    assert [p["row"]["lost"] for p in points(rows, upto_ms=rows[2]["started_ms"])] == LOSSY[:3]  # a report of older runs
    unfinished = {**rows[-1], "run_id": "later-unfinished", "started_ms": rows[-1]["started_ms"] + DAY,
                  "complete": False, "lost": 500}
    last = points([*rows, unfinished])[-1]
    assert last["judged"]["flags"] == [] and last["range"]["lost"] == (1, 97)  # shown (a grey cross), not judged
