"""The run history (analysis/history/history.py, `rmqchaos history`): planted summaries shaped like a real
analysis/summary.json, small, built here (pure logic, no JVM)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.history import history
from cli import history as history_cli
from cli.main import main

pytestmark = pytest.mark.fast

T0 = 1795769386333  # 2026-11-27 08:49:46 UTC
DAY = 86_400_000
CAUSES = {"consumer_retry": 0, "backup_topic": 0, "producer_resend": 0, "consumer_repull": 0, "unexplained": 0}


def summary(run_id: str, scenario: str, start_ms: int, lost: int = 0, dup: int = 0, busy: int = 0,
            p99: int = 150, rto: float | None = 2.5, version: str = "5.5.0", **more: Any) -> dict[str, Any]:
    """A summary.json as analysis/job.py writes it, cut to what the history reads: one OOM kill of
    broker-a and its restart, `busy` [REJECTREQUEST] answers, `lost` lost keys, `dup` repulled keys."""
    keys = 1000 + lost + dup + busy
    counts = {"keys": keys, "attempts": keys, "acked": keys - busy, "acked_weak": 0, "acked_weak_lost": 0,
              "duplicate_deliveries": dup, "unexpected_deliveries": 0, "ok": 1000, "lost": lost, "duplicated": dup,
              "recovered": 0, "failed": busy, "indeterminate": 0, "undelivered_at_stop": 0, "unexpected": 0,
              "no_outcome": 0, "corrupted_deliveries": 0}
    answers = [{"answer": "SEND_OK", "attempts": keys - busy, "stored": keys - busy - lost, "dup_keys_first_answer": dup,
                "dup_keys_first_stored": dup}]
    if busy:
        answers.append({"answer": "[REJECTREQUEST]", "attempts": busy, "stored": 0, "dup_keys_first_answer": 0,
                        "dup_keys_first_stored": 0})
    fault = {"kind": "fault", "target": "broker-a", "start_ms": start_ms + 45_000, "end_ms": start_ms + 46_500,
             "outcome": "ok", "params": {"fault_id": "oom-broker-a", "fault_kind": "oom_kill", "at_s": 15.0,
                                         "evidence": {"pid": 11525}}}
    s = {"schema_version": 2, "run_id": run_id, "scenario": scenario, "extends": None,
         "run_dir": f"/nowhere/runs/{run_id}", "analyzed_ms": start_ms + 150_000, "complete": True,
         "incomplete_reasons": [], "versions": {"rocketmq": version, "python": "3.11.7"},
         "cluster": {"brokers": {"broker-a": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"}}},
         "load": {"topic": "T", "rate": 1000.0, "duration": 40.0, "policy": {"kind": "no_retry"}},
         "counts": counts, "duplicates_by_cause": dict(CAUSES, consumer_repull=dup),
         "errors": {"by_outcome": {"ok": keys - busy}, "by_status": {"SEND_OK": keys - busy},
                    "by_code": {"0": keys - busy, **({"2": busy} if busy else {})},
                    "by_remark_prefix": {"[REJECTREQUEST]": busy} if busy else {}, "by_broker": {}},
         "answers": answers,
         "latency_ms": {"send": {"n": keys, "p50": 6, "p95": 60, "p99": p99, "max": 600},
                        "send_from_intended": {"n": keys, "p50": 8, "p95": 70, "p99": p99 + 20, "max": 700},
                        "end_to_end": {"n": keys, "p50": 20, "p95": 90, "p99": p99 + 60, "max": 900}},
         "windows": [{"id": "oom-broker-a", "kind": "fault", "target": "broker-a", "start_ms": start_ms + 45_000,
                      "end_ms": start_ms + 46_500, "outcome": "ok", "keys_by_class": {"ok": 700},
                      "pre_rate": 500.0, "rate_during": 300.0, "throughput_drop": 0.4, "rto_s": rto},
                     {"id": "load-2", "kind": "load", "target": "T", "start_ms": start_ms + 30_000,
                      "end_ms": start_ms + 70_000, "outcome": "done", "rto_s": None}],
         "events": [{"kind": "stage", "target": "up", "params": {}, "start_ms": start_ms, "end_ms": start_ms + 30_000,
                     "outcome": "ok"}, fault],
         "warnings": [], "series": [], "monitor": [], "disk": []}
    s.update(more)
    return s


def plant(root: Path, s: dict[str, Any], scenario_yaml: dict[str, Any] | None = None) -> Path:
    """A run directory holding only what the history reads: analysis/summary.json, scenario.yaml and
    versions.json (with the platform's commit)."""
    d = root / s["run_id"]
    (d / "analysis").mkdir(parents=True)
    (d / "analysis" / "summary.json").write_text(json.dumps(s))
    (d / "scenario.yaml").write_text(yaml.safe_dump(scenario_yaml or {"name": s["scenario"], "load": {"rate": 1000}}))
    (d / "versions.json").write_text(json.dumps({"rocketmq": s["versions"]["rocketmq"], "platform_commit": "abc123"}))
    return d


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two control runs a day apart (the second lost 3 keys, with 5 busy answers) in runs/, and the
    history file's path."""
    runs = tmp_path / "runs"
    a = plant(runs, summary("20261127T084944-control-aaaaaa", "control", T0))
    b = plant(runs, summary("20261128T084944-control-bbbbbb", "control", T0 + DAY, lost=3, busy=5, p99=300))
    return a, b, tmp_path / "history.duckdb"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["history", *args]) == 0
    return capsys.readouterr().out


def test_importing_the_same_run_twice_adds_one_row(two: tuple[Path, Path, Path]) -> None:
    a, _, db = two
    assert [x["new"] for x in history.import_paths([a], db)] == [True]
    assert [x["new"] for x in history.import_paths([a / "analysis" / "summary.json"], db)] == [False]
    assert [x["new"] for x in history.import_paths([a, a.parent], db)] == [False, True]  # each file once
    assert [r["run_id"] for r in history.runs(db)] == ["20261127T084944-control-aaaaaa", "20261128T084944-control-bbbbbb"]


def test_two_control_runs_listed_with_their_counts(two: tuple[Path, Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    a, b, db = two
    out = cli(capsys, "import", str(a.parent), "--db", str(db))
    assert "imported 2 run(s)" in out and "2 new, 0 already there" in out
    lines = cli(capsys, "list", "--db", str(db)).splitlines()
    assert lines[0].split()[:2] == ["run", "scenario"] and lines[-1].startswith("2 run(s) in ")
    # run, scenario, rocketmq, started (date, time), complete, signature (none in these summaries), keys, lost,
    # dup, busy, p99 send, p99 intended, rto s
    assert lines[1].split() == ["20261127T084944-control-aaaaaa", "control", "5.5.0", "2026-11-27", "08:49:46", "yes", "-",
                                "1000", "0", "0", "0", "150", "170", "2.5"]
    assert lines[2].split()[5:13] == ["yes", "-", "1008", "3", "0", "5", "300", "320"]
    rows = json.loads(cli(capsys, "list", "--db", str(db), "--json"))
    assert [(r["lost"], r["busy_total"], r["busy_by_kind"]) for r in rows] == [(0, 0, {}), (3, 5, {"REJECTREQUEST": 5})]
    assert "summary" not in rows[0]


def test_the_row_of_a_run(two: tuple[Path, Path, Path]) -> None:
    a, b, db = two
    history.import_paths([a, b], db)
    r = history.get("bbbbbb", db)  # by the end of its id
    assert r["run_dir"] == str(b.resolve()) and r["report"] == str(b.resolve() / "report.html")
    assert (r["rocketmq_version"], r["platform_commit"], r["settings_from"]) == ("5.5.0", "abc123", "scenario")
    assert (r["started_ms"], r["complete"], r["lost"], r["failed"], r["busy_total"]) == (T0 + DAY, True, 3, 5, 5)
    assert r["busy_rate"] == round(5 / 1008, 6)
    assert (r["send_p50_ms"], r["send_p99_ms"], r["intended_p99_ms"], r["e2e_p99_ms"]) == (6, 300, 320, 360)
    assert r["recovery"] == [{"fault_id": "oom-broker-a", "fault_kind": "oom_kill", "target": "broker-a",
                              "rto_s": 2.5, "throughput_drop": 0.4}] and r["max_rto_s"] == 2.5
    assert r["summary"]["counts"]["lost"] == 3  # the whole summary, for figures derived later
    assert history.get(str(b), db)["run_id"] == r["run_id"]  # by its run directory
    # the same resolved settings, the same digest; the name is not a setting
    assert r["settings_digest"] == history.get("aaaaaa", db)["settings_digest"]


def test_settings_digest(tmp_path: Path) -> None:
    s = summary("r1", "control", T0)
    a = plant(tmp_path / "a", s, {"name": "control", "description": "x", "load": {"rate": 1000}})
    b = plant(tmp_path / "b", s, {"name": "other", "load": {"rate": 1000}})
    c = plant(tmp_path / "c", s, {"name": "control", "load": {"rate": 2000}})
    d = [history.settings_digest(s, x) for x in (a, b, c)]
    assert d[0] == d[1] and d[0][1] == "scenario" and d[2][0] != d[0][0]
    assert history.settings_digest(s, None)[1] == "summary"  # no scenario.yaml: the summary's brokers and load


def test_noise_reached(tmp_path: Path) -> None:
    intent = {"measures": [], "reached": 0.67, "short": True,
              "words": "Redis noise reached 67 % of its 200 SET/s (worst of 8 instances: redis 16385)"}
    noise = {"kind": "fault", "target": "cluster", "start_ms": T0 + 35_000, "end_ms": T0 + 70_000, "outcome": "ok",
             "params": {"fault_id": "redis", "fault_kind": "redis_noise", "evidence": {"intent": intent}}}
    s = summary("r1", "shared-host", T0)
    s["events"].append(noise)
    r = history.row(s)
    assert r["noise"] == [{"fault_kind": "redis_noise", "target": "cluster", "reached_pct": 67.0, "short": True,
                           "words": intent["words"]}] and r["noise_reached_pct"] == 67.0
    assert r["settings_from"] == "summary" and r["platform_commit"] is None  # /nowhere: from the summary alone


def test_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, db = tmp_path / "runs", tmp_path / "h.duckdb"
    for i, (name, v) in enumerate([("control", "5.5.0"), ("oom-tsp-on", "5.5.0"), ("control", "5.3.3"),
                                   ("control", "5.5.0")]):
        plant(runs, summary(f"2026112{i}T000000-{name}-00000{i}", name, T0 + i * DAY, version=v))
    history.import_paths([runs], db)
    ids = lambda **kw: [r["run_id"][-1] for r in history.runs(db, **kw)]  # noqa: E731
    assert ids() == ["0", "1", "2", "3"]
    assert ids(scenario="control") == ["0", "2", "3"]
    assert ids(scenario="control", version="5.5.0") == ["0", "3"]
    assert ids(since_ms=T0 + 2 * DAY) == ["2", "3"]
    assert ids(limit=2) == ["2", "3"]  # the last ones, still oldest first
    midnight = T0 - T0 % DAY  # 2026-11-27 00:00 UTC
    assert history_cli.since_ms("2026-11-29") == midnight + 2 * DAY
    assert history_cli.since_ms("2026-11-29T02:00") == history_cli.since_ms("2026-11-29T03:00+01:00") \
        == midnight + 2 * DAY + 2 * 3_600_000
    assert history_cli.since_ms("36h", now=1000.0) == (1000 - 36 * 3600) * 1000
    assert history_cli.since_ms("2w", now=0.0) == -14 * DAY
    out = cli(capsys, "list", "--db", str(db), "--scenario", "control", "--version", "5.5.0", "--since", "2026-11-27")
    assert [ln.split()[0][-1] for ln in out.splitlines()[1:-1]] == ["0", "3"]
    assert "matches" in cli(capsys, "list", "--db", str(db), "--scenario", "nope")
    assert main(["history", "list", "--db", str(db), "--since", "last tuesday"]) == 1
    assert "neither a date nor an age" in capsys.readouterr().err


def test_compare(two: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, db = two
    history.import_paths([a, b], db)
    rows = {x["figure"]: x for x in history.compare(history.get("aaaaaa", db), history.get("bbbbbb", db))}
    assert (rows["lost"]["a"], rows["lost"]["b"], rows["lost"]["change"]) == (0, 3, 3)
    assert (rows["busy REJECTREQUEST"]["a"], rows["busy REJECTREQUEST"]["b"]) == (0, 5)  # a kind only B got
    assert rows["send_p99_ms"]["change"] == 150 and not rows["rto_s oom-broker-a"]["differs"]
    assert rows["scenario"]["change"] is None and not rows["scenario"]["differs"]
    out = cli(capsys, "compare", "aaaaaa", "bbbbbb", "--db", str(db))
    table = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()[2:-1]}
    assert table["lost"] == ["0", "3", "+3"] and table["send_p99_ms"] == ["150", "300", "+150"]
    assert table["duplicated"] == ["0", "0", "+0"]  # lost and duplicated always shown
    assert "rto_s" not in out and "equal figure(s) not shown" in out.splitlines()[-1]
    assert "rto_s oom-broker-a" in cli(capsys, "compare", "aaaaaa", "bbbbbb", "--db", str(db), "--all")
    js = json.loads(cli(capsys, "compare", "aaaaaa", "bbbbbb", "--db", str(db), "--json"))
    assert js["a"].endswith("aaaaaa") and {"figure": "lost", "a": 0, "b": 3, "change": 3, "differs": True} in js["figures"]


def test_show(two: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, db = two
    history.import_paths([a, b], db)
    out = cli(capsys, "show", "bbbbbb", "--db", str(db))
    assert out.startswith("run 20261128T084944-control-bbbbbb  scenario control\n")
    assert "LOST 3" in out and "busy answers: 5 (0.50 % of the sends), REJECTREQUEST 5" in out
    assert "fault oom-broker-a (oom_kill of broker-a): recovery 2.5 s" in out and "(not there)" in out
    js = json.loads(cli(capsys, "show", "bbbbbb", "--db", str(db), "--json"))
    assert js["lost"] == 3 and "summary" not in js
    assert json.loads(cli(capsys, "show", "bbbbbb", "--db", str(db), "--json", "--summary"))["summary"]["run_id"] \
        == js["run_id"]
    assert main(["history", "show", "control", "--db", str(db)]) == 1  # no run id ends so
    assert main(["history", "show", "20261127T084944-control-aaaaa", "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert "no run 'control' in the history" in err


def test_ambiguous_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, db = tmp_path / "runs", tmp_path / "h.duckdb"
    plant(runs, summary("x-control-0000aa", "control", T0))
    plant(runs, summary("y-control-0000aa", "control", T0 + 1))
    assert main(["history", "list", "--db", str(db)]) == 1
    assert "no run history at" in capsys.readouterr().err
    history.import_paths([runs], db)
    assert main(["history", "show", "0000aa", "--db", str(db)]) == 1
    assert "names 2 runs" in capsys.readouterr().err
    assert main(["history", "import", str(tmp_path / "nothing"), "--db", str(db)]) == 1
    import duckdb
    duckdb.connect(str(tmp_path / "other.duckdb")).close()  # a DuckDB file, but not a history
    assert main(["history", "list", "--db", str(tmp_path / "other.duckdb")]) == 1
    assert "is not a run history" in capsys.readouterr().err
    (runs / "bad.json").write_text("{")
    assert main(["history", "import", str(runs / "bad.json"), "--db", str(db)]) == 1
    assert "is not JSON" in capsys.readouterr().err
    assert len(history.runs(db)) == 2  # nothing half-imported


def test_default_location_and_analyze_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """$RMQCHAOS_HOME/history.duckdb unless $RMQCHAOS_HISTORY says otherwise; the analyze stage's
    recording, and a history it cannot write: one warning line, the analysis stands."""
    from pipeline.stages.analyze import _remember
    from rmqchaos.machine import paths
    from rmqchaos.run.rundir import RunDir
    monkeypatch.delenv("RMQCHAOS_HISTORY", raising=False)
    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    assert paths.history_db() == tmp_path / "home" / "history.duckdb"
    d = plant(tmp_path / "runs", summary("20261127T084944-control-cccccc", "control", T0))
    s = json.loads((d / "analysis" / "summary.json").read_text())
    assert _remember(RunDir(d), s) == str(tmp_path / "home" / "history.duckdb")
    assert "control-cccccc" in cli(capsys, "list")
    monkeypatch.setenv("RMQCHAOS_HISTORY", str(tmp_path))  # a directory: cannot be opened
    monkeypatch.setattr("rmqchaos.progress._quiet", False)
    assert _remember(RunDir(d), s) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "analyze: warning: not recorded in the run history" in err[0]
    assert f"rmqchaos history import {d}" in err[0]


def test_help_texts(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["history"], *(["history", c] for c in ("list", "show", "compare", "import", "flags"))):
        with pytest.raises(SystemExit) as e:
            main([*args, "--help"])
        assert e.value.code == 0
        assert "usage: rmqchaos history" in capsys.readouterr().out


# ---------------------------------------------------------------- regression flags (analysis/history/regress.py)

def night(i: int, scenario: str = "control", lost: int = 0, p99: int = 150, complete: bool = True,
          **more: Any) -> dict[str, Any]:
    """A history row, as history.row makes it from a summary, of night i."""
    r = history.row(summary(f"2026110{i:02d}T020000-{scenario}-{i:06d}", scenario, T0 + i * DAY, lost=lost, p99=p99))
    r.update(complete=complete, **more)
    return r


def test_a_control_night_that_loses_one_key_fails() -> None:
    from analysis.history.regress import regressions
    rows = [night(i, p99=140 + 5 * i) for i in range(5)]
    assert regressions(night(5, p99=160), rows) == {
        "run_id": night(5)["run_id"], "scenario": "control", "baseline": [r["run_id"] for r in rows], "flags": [],
        "fails": False, "notes": [], "rule": regressions(night(5), rows)["rule"]}  # an ordinary night: nothing
    res = regressions(night(5, lost=1), rows)
    assert res["fails"] and [(f["figure"], f["kind"], f["value"]) for f in res["flags"]] == [("lost", "new_loss", 1)]
    assert res["flags"][0]["words"] == "lost 1 acknowledged message(s) in a scenario that lost none in its last 5 " \
                                       "complete run(s)"


def test_a_p99_far_outside_its_range_is_named_but_does_not_fail() -> None:
    from analysis.history.regress import regressions
    rows = [night(i, p99=p) for i, p in enumerate([140, 150, 160, 150])]
    # send p99: max 160 + max(0.5 x 20, 25 % of 160 = 40, 50 ms) = 210; intended p99 (+20) the same
    assert regressions(night(4, p99=210), rows)["flags"] == []
    res = regressions(night(4, p99=900), rows)
    assert not res["fails"]
    f = {x["figure"]: x for x in res["flags"]}
    assert set(f) == {"send_p99_ms", "intended_p99_ms", "e2e_p99_ms"}
    assert f["send_p99_ms"]["baseline"] == {"n": 4, "min": 140, "max": 160} and f["send_p99_ms"]["limit"] == 210
    assert f["send_p99_ms"]["words"] == "p99 send latency (ms) 900, beyond its last 4 runs' 140..160 (limit 210)"


def test_a_lossy_scenario_that_keeps_losing_is_no_regression() -> None:
    from analysis.history.regress import regressions
    rows = [night(i, "oom-tsp-on", lost=n) for i, n in enumerate([97, 79, 82, 1, 7, 25])]  # six `make run`s
    assert regressions(night(6, "oom-tsp-on", lost=140), rows)["flags"] == []  # limit 97 + 0.5 x 96 = 145
    res = regressions(night(6, "oom-tsp-on", lost=300), rows)
    assert [(f["figure"], f["kind"], f["fails"]) for f in res["flags"]] == [("lost", "spread", False)]
    assert not res["fails"]


def test_the_baseline() -> None:
    from analysis.history.regress import Rule, baseline, regressions
    rows = [night(0), night(1, complete=False, lost=5), night(2, "oom-tsp-on", lost=50), night(3), night(4),
            night(9)]  # night 9 is after the judged one
    cur = night(5, lost=2)
    assert [r["run_id"][-1] for r in baseline(cur, rows + [cur])] == ["0", "3", "4"]
    assert [r["run_id"][-1] for r in baseline(cur, rows, Rule(nights=2))] == ["3", "4"]
    assert regressions(cur, rows)["fails"]  # night 1 lost, but did not finish: not in the baseline
    # two nights are enough for "never lost", not for a spread (min_nights 3)
    res = regressions(night(5, lost=2, p99=5000), [night(0), night(1)])
    assert [f["kind"] for f in res["flags"]] == ["new_loss"]
    assert regressions(night(5, lost=2), [])["notes"] == ["no earlier complete run of this scenario: nothing to "
                                                          "compare with"]
    unfinished = regressions(night(5, lost=2, complete=False), rows)
    assert unfinished["flags"] == [] and not unfinished["fails"] and "did not finish" in unfinished["notes"][0]
    changed = regressions(night(5, settings_digest="other"), rows)
    assert changed["notes"] == ["the scenario's settings differ between this run and its baseline (settings digest)"]


def test_flags_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, db = tmp_path / "runs", tmp_path / "h.duckdb"
    for i in range(4):
        plant(runs, summary(f"2026110{i}T020000-control-00000{i}", "control", T0 + i * DAY))
    plant(runs, summary("20261104T020000-control-000004", "control", T0 + 4 * DAY, lost=1))
    history.import_paths([runs], db)
    out = cli(capsys, "flags", "000004", "--db", str(db))
    assert out.splitlines()[:2] == [
        "20261104T020000-control-000004 against 4 earlier complete run(s) of control: REGRESSION of a zero-loss "
        "scenario", "  FAILS lost 1 acknowledged message(s) in a scenario that lost none in its last 4 complete run(s)"]
    assert "nothing left its range" in cli(capsys, "flags", "000003", "--db", str(db))
    js = json.loads(cli(capsys, "flags", "000004", "--db", str(db), "--json", "--nights", "2"))
    assert js["fails"] and len(js["baseline"]) == 2


def test_a_history_locked_by_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Another process holds the file (a parallel DAG task): waited for LOCK_WAIT_S, then one warning
    line in the analyze stage, the analysis stands; once it lets go, the run is recorded."""
    import subprocess
    import sys
    from pipeline.stages.analyze import _remember
    from rmqchaos.run.rundir import RunDir
    db = tmp_path / "h.duckdb"
    d = plant(tmp_path / "runs", summary("20261127T084944-control-dddddd", "control", T0))
    s = json.loads((d / "analysis" / "summary.json").read_text())
    monkeypatch.setenv("RMQCHAOS_HISTORY", str(db))
    monkeypatch.setattr(history, "LOCK_WAIT_S", 0.5)
    monkeypatch.setattr("rmqchaos.progress._quiet", False)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); sys.stdin.read()", str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert _remember(RunDir(d), s) is None
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is locked by another process" in err[0]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert _remember(RunDir(d), s) == str(db)
    assert [r["run_id"] for r in history.runs(db)] == [s["run_id"]]


def test_signatures_per_scenario_of_a_matrix_since_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`history signatures`: each scenario of the matrix with its last run since --since, reproduced or
    NOT (with the failed condition), how many of its runs reached it, and the scenarios never run."""
    from rmqchaos.machine.paths import REPO
    def sig(reached: bool | None, words: str) -> dict[str, Any]:
        return {"signature": {"reached": reached, "words": words, "shows": "x", "source": "signature"}}
    runs = tmp_path / "runs"
    plant(runs, summary("r0-control", "control", T0 - DAY, **sig(False, "NOT reproduced: an old miss")))  # before --since
    plant(runs, summary("r1-control", "control", T0, **sig(True, "reproduced")))
    plant(runs, summary("r2-oom", "oom-tsp-on", T0 + 1000, **sig(True, "reproduced")))
    plant(runs, summary("r3-oom", "oom-tsp-on", T0 + 2000, **sig(False, "NOT reproduced: lost_from_store 0 (want > 0)")))
    db = tmp_path / "h.duckdb"
    history.import_paths([runs], db)
    m = tmp_path / "m.yaml"
    m.write_text("scenarios: [" + ", ".join(str(REPO / "scenarios" / f"{n}.yaml")
                                            for n in ("control", "oom-tsp-on", "oom-tsp-off")) + "]\n")
    assert main(["history", "signatures", "--db", str(db), "--matrix", str(m), "--since", "2026-11-27"]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:4]}
    assert lines["control"].split()[1:2] == ["reproduced"] and "1/1" in lines["control"]
    assert lines["oom-tsp-on"].split()[1] == "NOT" and "1/2" in lines["oom-tsp-on"]
    assert lines["oom-tsp-on"].endswith("NOT reproduced: lost_from_store 0 (want > 0)")
    assert lines["oom-tsp-off"].split()[1:3] == ["never", "run"]
    assert out.splitlines()[-1] == ("1 of 3 scenarios reproduced in their last run since 2026-11-27 (commits abc123); "
                                   "NOT: oom-tsp-on; never run: oom-tsp-off")
    assert main(["history", "signatures", "--db", str(db), "--matrix", str(m), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert [(x["scenario"], x["runs"], x["reached"]) for x in st] == [("control", 2, 1), ("oom-tsp-on", 2, 1),
                                                                       ("oom-tsp-off", 0, 0)]
