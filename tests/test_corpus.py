"""The upstream corpus (pipeline/workflows/corpus.py, analysis/report/corpus.py, DAG rocketmq_upstream_corpus).

Fast: the corpus file's entries and its one-line refusals; the verdict over planted run directories
(apache/rocketmq#9403 on 5.3.3 and 5.5.0: reproduced / stopped reproducing / regressed / could not
tell); the pre-release gate; the report's table in real Chromium. The planted runs hold what a real
run writes (scenario.yaml as stored, state.json's stages, analysis/summary.json with the `expect`
result analysis/judge/expect.py computes from the probes) and are never validated again, so no version's
jars are resolved here.
Real, long (two clusters, one after the other; 5.3.3 resolves on its first use, ~100 s): the DAG
itself, on this machine; 746 s measured here with the host at load average 40-80 (the up and load
stages alone took 127 s each), expect ~4-5 min on a quiet host. Subnet 127.0.91.0/24, ports 24176..24227."""
from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.judge.expect import evaluate
from pipeline.workflows import corpus
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.spec.expect import Expect
from tests.helpers import CHROMIUM_FLAGS, chromium
from tests.test_history import T0, summary

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "scenarios" / "upstream"
BUG = UPSTREAM / "issue-9403-attributed-topic-slave-sync.yaml"
RAW = yaml.safe_load(BUG.read_text())
EXPECT = Expect.model_validate(RAW["expect"])
TOPIC = "RMQCHAOS_9403"


def plant(root: Path, version: str, reproduced: bool | None, failed_stage: str | None = None) -> Path:
    """A corpus run of the 9403 scenario on `version` as the pipeline leaves it: the probe found the
    topic absent from the slave (reproduced), present (not), or the run never got that far (None: its
    `failed_stage` failed and nothing was analyzed)."""
    d = root / f"run-{version}-{reproduced}"
    (d / "analysis").mkdir(parents=True)
    raw = copy.deepcopy(RAW)
    raw["name"] = corpus._name("issue-9403-attributed-topic-slave-sync", version)
    raw["cluster"]["rocketmq_version"] = version
    (d / "scenario.yaml").write_text(yaml.safe_dump(raw))
    (d / corpus.ENTRY_FILE).write_text(json.dumps({"scenario": BUG.stem, "version": version}))
    t = now_ms()
    stages = {n: {"status": "failed" if n == failed_stage else "ok", "start_ms": t, "end_ms": t,
                  "error": "broker-a did not come up in 90 s" if n == failed_stage else None}
              for n in ("up", "check", "load", "drain", "down", "analyze")[:None if failed_stage is None else 1]}
    (d / "state.json").write_text(json.dumps({"run_id": d.name, "created_ms": t, "mode": "detached",
                                              "cluster": "down", "stages": stages}))
    if reproduced is not None:
        s = summary(d.name, raw["name"], T0, run_dir=str(d), version=version)
        for w in s["windows"]:  # what the HTML report reads besides the history's figures
            w.update(latency_from_intended_ms={"p99": 170}, keys_by_class=w.get("keys_by_class") or {},
                     throughput_drop=w.get("throughput_drop"))
        n = 13 if reproduced else 14
        probes = [{"probe": 0, "holds": reproduced,
                   "seen": f"broker-a-s holds {n} topics, {TOPIC} {'not ' if reproduced else ''}among them"}]
        s["expect"] = evaluate(EXPECT, s, probes, version)
        (d / "analysis" / "summary.json").write_text(json.dumps(s))
    return d


def reports(*dirs: Path) -> list[dict[str, Any] | None]:
    return [{"run_dir": str(d)} for d in dirs] + [None]  # None: a run whose report task did not run


def judge(*dirs: Path) -> dict[str, Any]:
    return corpus.judge([str(d) for d in dirs])


@pytest.mark.fast
def test_the_corpus_lists_each_bug_on_its_reported_and_its_fixed_version(tmp_path: Path) -> None:
    # the 9403 scenario at the pinned version (an overlay), so that listing it resolves no other version
    (tmp_path / "bug.yaml").write_text(f"extends: {BUG}\nname: bug9403\ncluster: {{rocketmq_version: 5.5.0}}\n")
    f = tmp_path / "corpus.yaml"
    f.write_text("entries:\n  - bug.yaml\n")
    assert corpus.entries(f) == [{"scenario": str(tmp_path / "bug.yaml"), "version": "5.3.3"},
                                 {"scenario": str(tmp_path / "bug.yaml"), "version": "5.5.0"}]
    f.write_text("entries:\n  - {scenario: bug.yaml, versions: [5.3.2, 5.4.0]}\n")
    assert [e["version"] for e in corpus.entries(f)] == ["5.3.2", "5.4.0"]
    assert corpus.default_versions(EXPECT) == ["5.3.3", "5.5.0"]  # the pinned one is among gone_in
    assert corpus.default_versions(EXPECT.model_copy(update={"gone_in": ["5.4.0"]})) == ["5.3.3", "5.4.0"]
    # the repository's corpus, read without validating its scenarios at 5.3.3 (that would resolve its jars)
    listed = corpus._scenarios(corpus.CORPUS)
    assert listed[:2] == [(str(BUG), None), (str(BUG.parent / "issue-9717-jraft-no-dead-broker-scan.yaml"), None)]
    assert (str(BUG.parent / "issue-8032-dledger-abnormal-recovery-cq.yaml"), None) in listed
    assert all(Path(p).is_file() and (v is None or v) for p, v in listed)  # each entry a scenario file of this directory
    assert (str(BUG.parent / "issue-6662-isolated-master-with-a-slave.yaml"), ["5.1.0", "5.1.1", "5.5.0"]) in listed
    assert (str(BUG.parent / "issue-7689-master-reuses-queue-offsets.yaml"), ["5.1.1", "5.2.0", "5.5.0"]) in listed

    def refused(text: str) -> str:
        f.write_text(text)
        with pytest.raises(UserError) as e:
            corpus.entries(f)
        assert "\n" not in str(e.value)
        return str(e.value)
    assert refused("entries:\n  - {scenario: bug.yaml, versions: [5.3.9]}\n").startswith(
        f"{f}: entries[0]: unknown RocketMQ version '5.3.9': known: 4.6.0, 4.6.1, 4.7.0, ")
    assert refused("entries:\n  - {scenario: bug.yaml, versions: [5.2.0]}\n") == (
        f"{f}: entries[0]: version 5.2.0 is in none of shows_on, gone_in, measure_on of bug.yaml: a run there could not "
        "be judged")
    (tmp_path / "plain.yaml").write_text(f"extends: {REPO / 'scenarios' / 'control.yaml'}\nname: plain\n")
    assert refused("entries: [plain.yaml]\n").startswith(f"{f}: entries[0]: plain.yaml has no `expect:` block")
    assert refused("entries:\n  - {scenario: bug.yaml, version: 5.3.3}\n").startswith(
        f"{f}: entries[0]: expected a scenario file or {{scenario: FILE, versions: [5.3.3, ...]}}")
    assert "`entries:` must be a non-empty list" in refused("entries: []\n")
    # the pre-release form: every corpus scenario on the candidate and on the pinned version
    assert [e["version"] for e in corpus.candidate_entries("5.4.0")] == ["5.4.0", "5.5.0"] * len(listed)
    assert [e["version"] for e in corpus.candidate_entries("5.5.0")] == ["5.5.0"] * len(listed)
    with pytest.raises(UserError, match="the corpus needs a candidate version: set rocketmq_version"):
        corpus.candidate_entries(None)


@pytest.mark.fast
def test_reproduced_on_the_reported_version_and_not_on_the_fixed_one_passes(tmp_path: Path) -> None:
    rep = judge(plant(tmp_path, "5.3.3", True), plant(tmp_path, "5.5.0", False))
    [bug] = rep["bugs"]
    assert (bug["name"], bug["status"], bug["line"]) == ("apache/rocketmq#9403", "as expected",
                                                         "reproduced on 5.3.3 · not on 5.5.0")
    assert bug["scenarios"] == [BUG.stem] and rep["problems"] == []
    assert corpus.verdict(rep)["bugs"] == {"apache/rocketmq#9403": "reproduced on 5.3.3 · not on 5.5.0"}


@pytest.mark.fast
def test_a_bug_that_stops_reproducing_where_it_was_reported_fails_as_the_platforms_failure(tmp_path: Path) -> None:
    rep = judge(plant(tmp_path, "5.3.3", False), plant(tmp_path, "5.5.0", False))
    assert (rep["bugs"][0]["status"], rep["bugs"][0]["line"]) == ("stopped reproducing", "not reproduced on 5.3.3, 5.5.0")
    with pytest.raises(UserError) as e:
        corpus.verdict(rep)
    assert str(e.value).startswith(
        "upstream corpus: 1 problem(s): apache/rocketmq#9403 no longer reproduces on 5.3.3, a version it was reported "
        "on: a failure of the platform (its scenario or signature misses it), not a pass (did not reproduce "
        "apache/rocketmq#9403 on 5.3.3, NOT as expected (a version it was reported on): not topic RMQCHAOS_9403 absent "
        "from broker-a-s (broker-a-s holds 14 topics, RMQCHAOS_9403 among them))")


@pytest.mark.fast
def test_a_bug_back_on_a_fixed_version_is_named_a_regression_upstream(tmp_path: Path) -> None:
    rep = judge(plant(tmp_path, "5.3.3", True), plant(tmp_path, "5.5.0", True))
    assert (rep["bugs"][0]["status"], rep["bugs"][0]["line"]) == ("regressed upstream", "reproduced on 5.3.3, 5.5.0")
    with pytest.raises(UserError, match=r"apache/rocketmq#9403 reproduces on 5\.5\.0, a version with the fix: a "
                                        r"regression upstream \(reproduced apache/rocketmq#9403 on 5\.5\.0, NOT as"):
        corpus.verdict(rep)


@pytest.mark.fast
def test_a_run_that_never_got_to_the_probe_could_not_tell_and_fails(tmp_path: Path) -> None:
    rep = judge(plant(tmp_path, "5.3.3", None, failed_stage="up"), plant(tmp_path, "5.5.0", False))
    assert (rep["bugs"][0]["status"], rep["bugs"][0]["line"]) == ("could not tell",
                                                                  "not reproduced on 5.5.0 · could not tell on 5.3.3")
    with pytest.raises(UserError, match=r"could not tell whether it reproduces on 5\.3\.3 \(stage up failed: broker-a "
                                        r"did not come up in 90 s\)"):
        corpus.verdict(rep)


@pytest.mark.fast
def test_the_prerelease_gate_fails_naming_a_bug_that_reproduces_on_the_candidate(tmp_path: Path) -> None:
    base = plant(tmp_path, "5.5.0", False)
    ok = corpus.gate(reports(plant(tmp_path, "5.4.0", False), base), "5.4.0", tmp_path / "ok.html")
    assert ok["bugs"] == {"apache/rocketmq#9403": "not reproduced on 5.4.0, 5.5.0"}
    assert 'data-status="as expected"' in Path(ok["report"]).read_text()
    with pytest.raises(UserError) as e:
        corpus.gate(reports(plant(tmp_path, "5.4.0", True), base), "5.4.0", tmp_path / "bad.html")
    assert str(e.value).startswith("pre-release corpus gate: apache/rocketmq#9403 reproduces on the candidate 5.4.0 "
                                   "(reproduced apache/rocketmq#9403 on 5.4.0, NOT as expected (a version with the fix)")
    assert str(e.value).endswith(f"see {tmp_path / 'bad.html'}")
    # a candidate the bug was reported on (expected to reproduce there) still fails the gate
    assert corpus.gate_problems(judge(plant(tmp_path, "5.3.3", True), base), "5.3.3") == [
        "apache/rocketmq#9403 reproduces on the candidate 5.3.3 (reproduced apache/rocketmq#9403 on 5.3.3, as expected "
        "(a version it was reported on): topic RMQCHAOS_9403 absent from broker-a-s (broker-a-s holds 13 topics, "
        "RMQCHAOS_9403 not among them))"]
    # a candidate that could not be told fails too
    assert corpus.gate_problems(judge(plant(tmp_path / "u", "5.4.0", None, failed_stage="up"), base), "5.4.0") == [
        "apache/rocketmq#9403 could not be told on the candidate 5.4.0 (stage up failed: broker-a did not come up in "
        "90 s)"]
    # the control fired: the pinned version's run says the signature cannot tell the candidate anything
    [line] = corpus.gate_problems(judge(plant(tmp_path / "b", "5.4.0", False), plant(tmp_path / "b", "5.5.0", True)),
                                  "5.4.0")
    assert line.startswith("apache/rocketmq#9403 reproduces on 5.5.0, a version with the fix: a regression upstream")


def rec(version: str, reproduced: bool) -> dict[str, Any]:
    """A corpus record (pipeline/workflows/corpus.py `record`) of a bug upstream has no confirmed fix for
    (apache/rocketmq#7017's form): reported on 5.1.1, measured on 5.5.0."""
    return {"issue": "https://github.com/apache/rocketmq/issues/7017", "scenario": "issue-7017", "version": version,
            "shows_on": ["5.1.1"], "gone_in": [], "measure_on": ["5.5.0"], "reproduced": reproduced,
            "words": f"{'reproduced' if reproduced else 'did not reproduce'} on {version}", "failures": [],
            "run_dir": None}


@pytest.mark.fast
def test_a_bug_without_a_confirmed_fix_is_measured_on_its_other_versions_and_gates_only_against_the_baseline() -> None:
    assert corpus.default_versions(EXPECT.model_copy(update={"gone_in": [], "measure_on": ["5.5.0"]})) == \
        ["5.3.3", "5.5.0"]
    # what it did on a version upstream reports nothing for is a note (news), never a problem
    [bug] = corpus.judged.bugs([rec("5.1.1", True), rec("5.5.0", True)])
    assert (bug["status"], bug["line"], bug["problems"]) == ("as expected", "reproduced on 5.1.1, 5.5.0", [])
    assert bug["notes"] == ["apache/rocketmq#7017 reproduces on 5.5.0, a version upstream reports nothing for "
                            "(reproduced on 5.5.0)"]
    assert "<li class=note>apache/rocketmq#7017 reproduces on 5.5.0" in corpus.judged.table([bug])
    # the pre-release gate: present on the baseline (the pinned 5.5.0) too, it is RocketMQ's state, not the
    # candidate's; present on the candidate alone, it fails the gate
    assert corpus.gate_problems({"records": [rec("5.4.0", True), rec("5.5.0", True)]}, "5.4.0") == []
    assert corpus.gate_problems({"records": [rec("5.4.0", True), rec("5.5.0", False)]}, "5.4.0") == [
        "apache/rocketmq#7017 reproduces on the candidate 5.4.0 (reproduced on 5.4.0)"]
    # a fix that regressed (apache/rocketmq#6662's form: fixed in 5.1.1, measured again on 5.5.0): the same
    six = [{**rec(v, True), "issue": "https://github.com/apache/rocketmq/issues/6662", "shows_on": ["5.1.0"],
            "gone_in": ["5.1.1"]} for v in ("5.4.0", "5.5.0")]
    assert corpus.gate_problems({"records": six}, "5.4.0") == []
    assert corpus.gate_problems({"records": [six[0], {**six[1], "measure_on": []}]}, "5.4.0")[0] == (
        "apache/rocketmq#6662 reproduces on the candidate 5.4.0 (reproduced on 5.4.0)")
    # the words of a run there: a measurement, not a judgment
    r = evaluate(Expect.model_validate({"issue": "https://github.com/apache/rocketmq/issues/7017", "shows_on": ["5.1.1"],
                                        "measure_on": ["5.5.0"], "conditions": ["lost_send_ok > 0"]}),
                 {"counts": {"lost": 7, "acked_weak_lost": 2}}, [], "5.5.0")
    assert (r["reproduced"], r["expected"], r["as_expected"]) == (True, None, None)
    assert r["words"] == ("reproduced apache/rocketmq#7017 on 5.5.0 (a version upstream reports nothing for: a "
                          "measurement, not a judgment): lost_send_ok > 0 (lost_send_ok = 5)")


@pytest.mark.fast
def test_the_corpus_table_renders_in_chromium(tmp_path: Path) -> None:
    a, b = plant(tmp_path, "5.3.3", True), plant(tmp_path, "5.5.0", False)
    (a / "report.html").write_text("<p>the run's own report</p>")  # the run's report task wrote it
    rep = corpus.report(reports(a, b), tmp_path / "corpus.html")
    text = Path(rep["report"]).read_text()
    for external in ("<script", "<link", "src=", 'href="http'):  # self-contained
        assert external not in text, external
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          Path(rep["report"]).as_uri()], capture_output=True, timeout=120, check=True, text=True).stdout
    assert ('<tr data-issue="apache/rocketmq#9403" data-status="as expected"><td>apache/rocketmq#9403</td>'
            f'<td>{BUG.stem}</td><td>5.3.2, 5.3.3</td><td>5.4.0, 5.5.0</td>'
            '<td class="result">reproduced on 5.3.3 · not on 5.5.0</td><td>as expected</td></tr>') in dom
    assert dom.count("<tr data-issue=") == 1 and 'class="warn"' not in dom
    runs = dom.split('<section id="runs">')[1]  # each run below, with its evidence and its own report
    assert '<tr data-version="5.3.3"><td>apache/rocketmq#9403</td><td>5.3.3</td><td>reproduced</td>' in runs
    assert '<tr data-version="5.5.0"><td>apache/rocketmq#9403</td><td>5.5.0</td><td>not reproduced</td>' in runs
    assert '<a href="run-5.3.3-True/report.html">run-5.3.3-True</a>' in runs
    assert json.loads(Path(rep["json"]).read_text())["bugs"][0]["line"] == "reproduced on 5.3.3 · not on 5.5.0"


@pytest.mark.long
def test_the_corpus_dag_reproduces_9403_on_5_3_3_and_not_on_5_5_0(tmp_path: Path) -> None:
    """The DAG on this machine (`rmqchaos airflow test`): both runs, the report, the verdict passing."""
    from conftest import RMQCHAOS
    from helpers import assert_nothing_left
    # the corpus scenario on this test's own subnet and ports
    (tmp_path / "bug.yaml").write_text(
        f"extends: {BUG}\nname: issue-9403\ncluster:\n  subnet: 127.0.91.0/24\n  namesrv: {{port: 24176}}\n"
        "  brokers: [{name: broker-a, port: 24211, slave: {port: 24221}}]\n")
    (tmp_path / "corpus.yaml").write_text("entries: [bug.yaml]\n")
    env = dict(os.environ, RMQCHAOS_HOME=str(tmp_path / "home"), RMQCHAOS_RUNS=str(tmp_path / "runs"))
    r = subprocess.run([*RMQCHAOS, "airflow", "test", "rocketmq_upstream_corpus", "--conf",
                        json.dumps({"corpus": str(tmp_path / "corpus.yaml")})], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    runs = sorted(p for p in (tmp_path / "runs").glob("*") if (p / "state.json").exists())
    for run in runs:
        assert_nothing_left(run)
    assert r.returncode == 0, out[-4000:]
    assert "corpus: apache/rocketmq#9403: reproduced on 5.3.3 · not on 5.5.0 (as expected)" in out
    [page] = (tmp_path / "runs").glob("*-corpus.html")
    assert "reproduced on 5.3.3 · not on 5.5.0" in page.read_text() and page.with_suffix(".json").is_file()
