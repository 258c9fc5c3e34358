"""The upstream corpus (scenarios/upstream/corpus.yaml): which known bugs run on which RocketMQ
versions, the run directory each (scenario, version) gets (an `extends:` overlay setting
cluster.rocketmq_version), the corpus report (analysis/report/corpus.py's table over the runs' reports) and
its verdict; and the pre-release gate: the corpus on a candidate version beside the pinned one, where
any bug that reproduces on the candidate fails."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from analysis.report import corpus as judged
from pipeline.runs import as_run, create_run, default_run_dir, load_scenario, reap_orphans
from rmqchaos.machine import paths
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError
from rmqchaos.spec import read_text
from rmqchaos.spec.expect import Expect

CORPUS = paths.REPO / "scenarios" / "upstream" / "corpus.yaml"
ENTRY_FILE = "corpus-entry.json"  # in a corpus run's directory: {scenario, version}


def default_versions(expect: Expect) -> list[str]:
    """The version the bug was reported on (the last of shows_on) and one with the fix: the pinned
    version when it is among gone_in (already resolved), else the first of gone_in; with no fix
    known, the versions of measure_on."""
    pinned = paths.pinned_rocketmq_version()
    fixed = [pinned if pinned in expect.gone_in else expect.gone_in[0]] if expect.gone_in else expect.measure_on
    return list(dict.fromkeys([expect.shows_on[-1], *fixed]))


def _file(corpus: str | Path | None) -> Path:
    f = Path(corpus) if corpus else CORPUS
    return f if f.is_absolute() else paths.REPO / f


def _scenarios(f: Path) -> list[tuple[str, list[str] | None]]:
    """The corpus file's entries: (scenario path, its versions or None for the default)."""
    try:
        doc = yaml.safe_load(read_text(f, "corpus"))
    except yaml.YAMLError as e:
        raise UserError(f"cannot read the corpus {f}: {e}", "it lists `entries:` as scenario files") from None
    items = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise UserError(f"{f}: `entries:` must be a non-empty list", "see scenarios/upstream/corpus.yaml")
    out: list[tuple[str, list[str] | None]] = []
    for i, x in enumerate(items):
        if isinstance(x, str):
            out.append((str((f.parent / x).resolve()), None))
        elif (isinstance(x, dict) and set(x) <= {"scenario", "versions"} and isinstance(x.get("scenario"), str)
              and (x.get("versions") is None or (isinstance(x["versions"], list) and x["versions"]
                                                 and all(isinstance(v, str) for v in x["versions"])))):
            out.append((str((f.parent / x["scenario"]).resolve()), x.get("versions")))
        else:
            raise UserError(f"{f}: entries[{i}]: expected a scenario file or {{scenario: FILE, versions: [5.3.3, ...]}}",
                            "see scenarios/upstream/corpus.yaml")
    return out


def entries(corpus: str | Path | None = None) -> list[dict[str, str]]:
    """[{scenario, version}] of the corpus file, each scenario validated and carrying an `expect:`
    block, each version known here and one its expect names (else the run could not be judged): one
    clear line for the first that is not."""
    f = _file(corpus)
    known = rocketmq_dist.known_versions()
    out: list[dict[str, str]] = []
    for i, (path, versions) in enumerate(_scenarios(f)):
        exp = load_scenario(path).expect
        if exp is None:
            raise UserError(f"{f}: entries[{i}]: {Path(path).name} has no `expect:` block",
                            "a corpus scenario says what 'reproduced' means (docs/spec.md, expect)")
        for v in versions or default_versions(exp):
            if v not in known:
                raise UserError(f"{f}: entries[{i}]: unknown RocketMQ version {v!r}", f"known: {', '.join(known)}")
            if v not in exp.shows_on + exp.gone_in + exp.measure_on:
                raise UserError(f"{f}: entries[{i}]: version {v} is in none of shows_on, gone_in, measure_on of "
                                f"{Path(path).name}", "a run there could not be judged")
            out.append({"scenario": path, "version": v})
    return out


def candidate_entries(candidate: str | None, corpus: str | Path | None = None) -> list[dict[str, str]]:
    """The pre-release form: every corpus scenario on the candidate version and on the pinned one."""
    if not candidate:
        raise UserError("the corpus needs a candidate version", "set rocketmq_version (or leave corpus false)")
    rocketmq_dist.check_version(candidate)
    pinned = paths.pinned_rocketmq_version()
    paths_ = list(dict.fromkeys(p for p, _ in _scenarios(_file(corpus))))
    return [{"scenario": p, "version": v} for p in paths_ for v in dict.fromkeys([candidate, pinned])]


def _name(base: str, version: str) -> str:
    """The run's scenario name: the base's with the version (a scenario name holds no dots)."""
    sfx = "-" + version.replace(".", "_")
    return base[:41 - len(sfx)] + sfx


def prepare(entry: dict[str, str], out: str | Path | None = None) -> str:
    """A detached run directory for one (scenario, version): an overlay beside it sets the version."""
    reap_orphans()
    # the base's name without validating it at its own version (the overlay is validated at the entry's)
    raw = yaml.safe_load(Path(entry["scenario"]).read_text()) or {}
    name = _name(str(raw.get("name") or Path(entry["scenario"]).stem), entry["version"])
    d = Path(out) if out is not None else default_run_dir(name)
    d.parent.mkdir(parents=True, exist_ok=True)
    src = d.with_name(d.name + ".scenario.yaml")  # beside the run: the run directory must not exist yet
    doc = {"extends": str(Path(entry["scenario"]).resolve()), "name": name,
           "cluster": {"rocketmq_version": entry["version"]}}
    src.write_text("# a corpus run: the bug's scenario on one version (written by pipeline/workflows/corpus.py)\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    run = create_run(src, d, mode="detached")
    (run.path / ENTRY_FILE).write_text(json.dumps({"scenario": Path(entry["scenario"]).stem,
                                                   "version": entry["version"]}) + "\n")
    return str(run.path)


def record(run_dir: str | Path) -> dict[str, Any] | None:
    """What the corpus reads of one run (None: its scenario has no `expect:`). From the run's stored
    scenario as written (no validation again: that would resolve the version's jars) and its summary;
    a run that was not analyzed, or whose evidence could not be read, is `reproduced: None`."""
    from pipeline.workflows.matrix import failures
    r = as_run(run_dir)
    raw = yaml.safe_load((r.path / "scenario.yaml").read_text()) or {}
    exp = raw.get("expect")
    if not exp:
        return None
    entry = json.loads((r.path / ENTRY_FILE).read_text()) if (r.path / ENTRY_FILE).is_file() else {}
    summ = json.loads(r.summary_file.read_text()) if r.summary_file.is_file() else {}
    got = summ.get("expect") or {}
    fails = [x for x in failures(r) if x != got.get("words")]  # the expect's own line is the table's business
    return {"issue": exp["issue"], "scenario": entry.get("scenario") or raw.get("name"),
            "version": str((raw.get("cluster") or {}).get("rocketmq_version") or paths.pinned_rocketmq_version()),
            "shows_on": [str(v) for v in exp.get("shows_on") or []], "gone_in": [str(v) for v in exp.get("gone_in") or []],
            "measure_on": [str(v) for v in exp.get("measure_on") or []],
            "reproduced": got.get("reproduced"), "words": got.get("words") or "; ".join(fails) or "not analyzed",
            "failures": fails, "run_dir": str(r.path)}


def judge(run_dirs: list[str]) -> dict[str, Any]:
    """The corpus's judgment of its runs, without rendering: {bugs (analysis/report/corpus.py), problems
    (each bug's, then each run that failed although it has evidence: a failed run never passes),
    records}."""
    recs = [x for d in run_dirs if (x := record(d))]
    bugs = judged.bugs(recs)
    problems = [p for b in bugs for p in b["problems"]] + _failed(recs)
    return {"bugs": bugs, "problems": problems, "records": recs}


def _failed(recs: list[dict[str, Any]]) -> list[str]:
    return [f"{x['scenario']} on {x['version']}: {'; '.join(x['failures'])}" for x in recs
            if x["failures"] and x["reproduced"] is not None]


def report(reports: list[dict | None] | None, out: str | Path | None = None,
           title: str = "RocketMQ upstream corpus") -> dict[str, Any]:
    """The corpus report from its runs' `report` results (None: a run whose report task did not
    run): out (default runs/<time>-corpus.html), the table and the runs, and its .json beside it.
    Returns judge()'s result with {report, json, runs}."""
    runs = [r["run_dir"] for r in (reports or []) if r]
    if not runs:
        raise UserError("no run of the corpus ran", "see the failed tasks before this one")
    res = judge(runs)
    target = Path(out) if out else Path(str(default_run_dir("corpus")) + ".html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(judged.render(res["bugs"], target, title))
    js = target.with_suffix(".json")
    js.write_text(json.dumps({"written_ms": int(time.time() * 1000), "bugs": res["bugs"],
                              "problems": res["problems"]}, indent=1) + "\n")
    for b in res["bugs"]:
        print(f"corpus: {b['name']}: {b['line']} ({b['status']})", flush=True)
    return {**res, "report": str(target), "json": str(js), "runs": runs}


def verdict(rep: dict[str, Any]) -> dict[str, Any]:
    """Fails (one UserError line) naming each problem of the corpus: a bug that stopped reproducing
    where it was reported, one back on a fixed version, a run that could not tell."""
    if rep["problems"]:
        raise UserError(f"upstream corpus: {len(rep['problems'])} problem(s): " + " | ".join(rep["problems"]),
                        f"see {rep.get('report')}")
    return {"bugs": {b["name"]: b["line"] for b in rep["bugs"]}, "report": rep.get("report")}


def gate_problems(res: dict[str, Any], candidate: str) -> list[str]:
    """What fails the pre-release gate: every bug that reproduces on the candidate (or could not be
    told there), then any problem of the other versions' runs (the pinned version's runs are the
    control: a signature that fires on a fixed version tells nothing about the candidate)."""
    recs = res["records"]
    pinned = {x["issue"]: x for x in recs if x["version"] != candidate}

    def state_of_rocketmq(x: dict[str, Any]) -> bool:
        # a bug that reproduces on the baseline too, where upstream confirms no fix (gone_in empty) or the
        # baseline's version is one the platform measured it on (measure_on: e.g. a behaviour changed since the fix),
        # is the state of RocketMQ, not of the candidate: it fails the gate only where the baseline did not show it
        b = pinned.get(x["issue"])
        return bool(x["reproduced"] and b and b["reproduced"] is True
                    and (not x["gone_in"] or b["version"] in b.get("measure_on", [])))
    bad = [f"{judged.issue_name(x['issue'])} {'reproduces' if x['reproduced'] else 'could not be told'} on the "
           f"candidate {candidate} ({x['words']})" for x in recs if x["version"] == candidate and x["reproduced"] is not False
           and not state_of_rocketmq(x)]
    bad += [p for b in judged.bugs([x for x in recs if x["version"] != candidate]) for p in b["problems"]]
    return list(dict.fromkeys(bad + _failed(recs)))


def gate(reports: list[dict | None] | None, candidate: str, out: str | Path | None = None) -> dict[str, Any]:
    """The pre-release corpus gate: the report over the candidate's runs and the pinned version's,
    side by side, and a UserError naming each of gate_problems()."""
    rep = report(reports, out or Path(str(default_run_dir("prerelease-corpus")) + ".html"),
                 title=f"RocketMQ upstream corpus on the candidate {candidate}")
    bad = gate_problems(rep, candidate)
    if bad:
        raise UserError("pre-release corpus gate: " + " | ".join(bad), f"see {rep['report']}")
    return {"bugs": {b["name"]: b["line"] for b in rep["bugs"]}, "report": rep["report"]}
