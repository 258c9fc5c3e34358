"""`rmqchaos report-upstream` (issue 49) on recorded runs: every section filled or marked not measured,
source lines read from a sources jar, and the history's anomaly and seed columns. Recorded runs are
made here from a scenario file with the files an analysis leaves (summary, report, logs)."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.runs import create_run
from rmqchaos.errors import UserError

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def recorded(tmp_path: Path, name: str, version: str, lost: int, explore_seed: int | None = None) -> Path:
    src = tmp_path / f"{name}.yaml"
    doc: dict[str, Any] = {"extends": str(SCENARIOS / "failover-kill-master.yaml"), "name": name}
    if explore_seed is not None:
        doc["explore"] = {"seed": explore_seed, "base": str(SCENARIOS / "failover-kill-master.yaml")}
    src.write_text(yaml.safe_dump(doc))
    run = create_run(src, tmp_path / f"run-{name}")
    (run.path / "analysis").mkdir(exist_ok=True)
    reached = lost > 0
    run.summary_file.write_text(json.dumps({
        "run_id": run.run_id, "scenario": name, "complete": True, "events": [],
        "counts": {"acked": 4408, "lost": lost, "duplicated": 0, "keys": 5000},
        "duplicates_by_cause": {}, "signature": {"shows": "a cut-off master's acks", "reached": reached,
                                                 "words": "reproduced" if reached else "NOT reproduced: lost > 0 (lost = 0)"}}))
    (run.path / "versions.json").write_text(json.dumps({"rocketmq": version}))
    run.report_txt.write_text(f"{name}: {'reproduced' if reached else 'NOT reproduced'}; lost {lost} acknowledged\n")
    node = run.path / "cluster" / "broker-a-0"
    (node / "logs" / "rocketmqlogs").mkdir(parents=True)
    (node / "stdout.log").write_text("boot success\n")
    (node / "logs" / "rocketmqlogs" / "broker.log").write_text(
        "2026-11-29 10:00:00 INFO main - started\n"
        "2026-11-29 10:00:05 WARN HAService - Change SyncStateSet from [1, 2, 3] to [1]\n")
    return run.path


@pytest.mark.fast
def test_a_report_has_every_section_filled_or_marked_not_measured(tmp_path: Path, monkeypatch: Any) -> None:
    from pipeline.workflows import upstream
    m2 = tmp_path / "m2"
    jar = m2 / "rocketmq-store" / "5.5.0" / "rocketmq-store-5.5.0-sources.jar"
    jar.parent.mkdir(parents=True)
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("org/apache/rocketmq/store/ha/X.java", "\n".join(f"line {i}" for i in range(1, 21)))
    monkeypatch.setattr(upstream, "M2", m2)
    old, new = recorded(tmp_path, "cut-off-acks-533", "5.3.3", 0), recorded(tmp_path, "cut-off-acks-550", "5.5.0", 1921)
    res = upstream.report_upstream([str(new), str(old)], title="allAckInSyncStateSet does not protect a cut-off master",
                                   sources=["org/apache/rocketmq/store/ha/X.java:3-5@5.5.0"], out=tmp_path / "r.md")
    assert (res["affected"], res["not_affected"]) == (["5.5.0"], ["5.3.3"])
    md = Path(res["report"]).read_text()
    for section in ("# allAckInSyncStateSet does not protect a cut-off master", "## Versions", "**Affected:** 5.5.0",
                    "**Not affected:** 5.3.3", "## The scenario", "extends:", "## Broker settings that matter",
                    "allAckInSyncStateSet: true", "## What was measured", "| 5.5.0 | `run-cut-off-acks-550` | yes |",
                    "## Logs", "cluster/broker-a-0/logs/rocketmqlogs/broker.log", "2: 2026-11-29 10:00:05 WARN HAService",
                    "## Source", "   3  line 3", "   5  line 5", "rocketmq-store-5.5.0-sources.jar",
                    "## Analysis and a proposed fix", "_not measured_", "run <code>rmqchaos run scenario.yaml</code>"):
        assert section in md, section
    # the resolved scenario is in the report itself, and runs as is
    resolved = md.split("<summary>", 1)[1].split("```yaml\n", 1)[1].split("\n```", 1)[0]
    from pipeline.runs import load_scenario
    (tmp_path / "saved.yaml").write_text(resolved)
    assert load_scenario(tmp_path / "saved.yaml").name == "cut-off-acks-550"
    # a bisect's overlay is named after its version: the report names the scenario it bisected
    bisected = recorded(tmp_path, "cut-off-acks-5_4_0", "5.4.0", 12)
    assert upstream.run_record(bisected)["scenario"] == "cut-off-acks"
    assert md.index("| 5.3.3 |") < md.index("| 5.5.0 |")  # versions in order
    with pytest.raises(UserError, match="in none of the 1 RocketMQ 5.5.0 sources jar"):
        upstream.source_lines("org/apache/rocketmq/Missing.java:1-2@5.5.0")
    with pytest.raises(UserError, match="expected PATH.java:FROM-TO@VERSION"):
        upstream.source_lines("X.java:1-2")
    with pytest.raises(UserError, match="1 <= FROM <= TO"):
        upstream.source_lines("org/apache/rocketmq/store/ha/X.java:9-3@5.5.0")
    with pytest.raises(UserError, match="has 20 lines"):
        upstream.source_lines("org/apache/rocketmq/store/ha/X.java:30-40@5.5.0")
    with pytest.raises(UserError, match="cannot read it"):
        upstream.report_upstream([str(new)], notes_file=str(tmp_path / "missing.md"), out=tmp_path / "r2.md")


@pytest.mark.fast
def test_the_history_row_names_a_runs_anomalies_and_the_seed_that_drew_it(tmp_path: Path) -> None:
    from analysis.history.history import row
    d = recorded(tmp_path, "explore-41", "5.5.0", 7, explore_seed=41)
    r = row(json.loads((d / "analysis" / "summary.json").read_text()), d)
    assert r["anomalies"] == ["lost"] and r["explore_seed"] == 41 and r["explore_base"].endswith("failover-kill-master.yaml")
    plain = recorded(tmp_path, "plain", "5.5.0", 0)
    r2 = row(json.loads((plain / "analysis" / "summary.json").read_text()), plain)
    assert r2["anomalies"] == [] and r2["explore_seed"] is None


@pytest.mark.fast
def test_shrink_of_a_recorded_run_writes_a_scenario_with_its_expect(tmp_path: Path, monkeypatch: Any) -> None:
    """The glue of `rmqchaos shrink` on a recorded run; each trial's run is a recorded one whose loss
    appears iff pause-2 is in its schedule (the search itself: tests/test_explore.py)."""
    import pipeline.scenario
    from pipeline.runs import load_scenario
    from pipeline.workflows.shrink import shrink_run
    faults = [{"id": f"pause-{i}", "kind": "pause", "target": "namesrv", "at": f"{20 + 10 * i}s", "duration": "8s"}
              for i in range(3)]
    src = tmp_path / "explore-5.yaml"
    src.write_text(yaml.safe_dump({"extends": str(SCENARIOS / "failover-kill-master.yaml"), "name": "explore-5",
                                   "explore": {"seed": 5, "base": str(SCENARIOS / "failover-kill-master.yaml")},
                                   "faults": faults, "signature": None}))
    run = create_run(src, tmp_path / "run-5")
    (run.path / "analysis").mkdir()
    run.summary_file.write_text(json.dumps({"run_id": run.run_id, "complete": True, "counts": {"lost": 3}, "events": []}))

    def fake_run(f: Path, out: Path) -> Any:
        r = create_run(f, out)
        (r.path / "analysis").mkdir()
        ids = [x["id"] for x in yaml.safe_load(Path(f).read_text())["faults"]]
        r.summary_file.write_text(json.dumps({"run_id": r.run_id, "complete": True, "events": [],
                                              "counts": {"lost": 3 if "pause-2" in ids else 0}}))
        return pipeline.scenario.Outcome(r, None)
    monkeypatch.setattr(pipeline.scenario, "run_scenario", fake_run)
    res = shrink_run(run.path, budget=20, out=tmp_path / "shrink")
    assert res["check"] == "lost" and res["reproduced"] and [f["id"] for f in res["faults"]] == ["pause-2"]
    assert res["faults"][0]["duration"] == "2s" and res["faults"][0]["at"] == "10s"
    shrunk = load_scenario(res["scenario"])  # a scenario that validates, judged by its expect
    assert shrunk.expect is not None and shrunk.expect.issue == "unfiled:explore-5-lost"
    assert shrunk.expect.conditions == ["lost > 0"] and [f.id for f in shrunk.faults] == ["pause-2"]
    with pytest.raises(UserError, match="does not show two_masters"):
        shrink_run(run.path, check="two_masters", out=tmp_path / "s2")
    with pytest.raises(UserError, match="no such anomaly check"):
        shrink_run(run.path, check="bogus", out=tmp_path / "s3")


@pytest.mark.fast
def test_log_excerpts_keep_the_first_and_the_last_matches_and_leave_out_the_noise(tmp_path: Path) -> None:
    from pipeline.workflows import upstream
    run = recorded(tmp_path, "cut-off-acks-550", "5.5.0", 1921)
    lines = ["2026-11-29 10:00:00 INFO main - started\n",
             "2026-11-29 10:00:01 WARN main - java.lang.reflect.InaccessibleObjectException: Unable to make field\n"]
    lines += [f"2026-11-29 10:00:{i:02d} INFO HAService - SyncStateSet expand [1, {i}]\n" for i in range(2, 40)]
    lines += ["2026-11-29 10:01:00 WARN HAService - Change SyncStateSet from [1, 2, 3] to [1]\n"]  # after the cut
    (run / "cluster" / "broker-a-0" / "logs" / "rocketmqlogs" / "broker.log").write_text("".join(lines))
    (e,) = [x for x in upstream.excerpts(run) if x["file"].endswith("broker.log")]
    texts = [t for _, t in e["lines"]]
    assert len(texts) == upstream.EXCERPT_LINES and e["head"] == upstream.EXCERPT_LINES // 3
    assert "expand [1, 2]" in texts[0] and texts[-1].endswith("to [1]")  # the setup and what the fault led to
    assert not [t for t in texts if "InaccessibleObjectException" in t]
    assert e["skipped"] == 38 + 1 - upstream.EXCERPT_LINES
    res = upstream.report_upstream([str(run)], title="t", out=tmp_path / "r.md")
    assert f"... ({e['skipped']:,} more matching lines)" in Path(res["report"]).read_text()  # the gap is named
