"""The nightly resilience matrix: which scenarios run (listed in one file, scenarios/nightly.yaml),
the run directory each gets, and the matrix's verdict once every run has been analyzed: the runs that
failed and the regressions against the run history."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from analysis.history.regress import flag_line
from analysis.judge.signature import missed
from pipeline.history import trends
from pipeline.runs import as_run, create_run, load_scenario, reap_orphans
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import Scenario, read_text

NIGHTLY = paths.REPO / "scenarios" / "nightly.yaml"


def part_of(part: str) -> tuple[int, int]:
    """"k/n" -> (k, n), 1 <= k <= n; one clear line otherwise."""
    k, sep, n = str(part).partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise UserError(f"part must be k/n with 1 <= k <= n (e.g. 1/4), got {part!r}",
                        "1/1 runs the whole matrix; k/n runs every n-th scenario from the k-th")
    return int(k), int(n)


def _members(matrix: str | Path | None) -> list[tuple[str, Scenario]]:
    """The matrix file's scenario paths (relative to it), each with its loaded (validated) scenario."""
    f = Path(matrix) if matrix else NIGHTLY
    if not f.is_absolute():
        f = paths.REPO / f
    try:
        doc = yaml.safe_load(read_text(f, "matrix"))
    except yaml.YAMLError as e:
        raise UserError(f"cannot read the matrix {f}: {e}", "it lists `scenarios:` as file paths") from None
    items = doc.get("scenarios") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
        raise UserError(f"{f}: `scenarios:` must be a non-empty list of scenario files", "see scenarios/nightly.yaml")
    return [(x, load_scenario(x)) for x in (str((f.parent / i).resolve()) for i in items)]


def scenarios(matrix: str | Path | None = None, part: str = "1/1") -> list[str]:
    """The matrix file's scenario paths (relative to it), each validated; one clear line if any is wrong.

    part "k/n": every n-th scenario from the k-th, so that n runs (nights, or CI jobs under a time
    cap) cover the matrix once. Round robin, not slices: the file groups scenarios by kind and the
    slow kinds (POP drains, failovers) sit together, so slices would be uneven."""
    k, n = part_of(part)
    return [f for f, _ in _members(matrix)][k - 1::n]


def signature_status(rows: list[dict[str, Any]], matrix: str | Path | None = None) -> list[dict[str, Any]]:
    """Per scenario of the matrix, in its order, from history rows (oldest first): its last run and
    how many of its runs reached the signature. What the parts of a nightly reproduced, together
    (`rmqchaos history signatures --since <the first part's start>`). A run whose signature could
    not be judged (`signature_reached` null: unfinished, or none stated) counts as neither."""
    out = []
    for f, sc in _members(matrix):
        mine = [r for r in rows if r.get("scenario") == sc.name]
        judged = [r for r in mine if r.get("signature_reached") is not None]
        out.append({"scenario": sc.name, "file": f, "runs": len(mine), "judged": len(judged),
                    "reached": sum(1 for r in judged if r["signature_reached"]), "last": mine[-1] if mine else None})
    return out


def prepare(scenario: str | Path) -> str:
    """A detached run directory for one scenario of a scheduled run (reaping what killed runs left)."""
    reap_orphans()
    return str(create_run(scenario, mode="detached").path)


def failures(run_dir: str | Path | RunDir, signature_misses: str = "fail") -> list[str]:
    """What went wrong in a run: each stage up to the analysis that did not end ok, an analysis that
    could not verify loss, and (with signature_misses "fail") a run that did not reach its scenario's
    signature (analysis/judge/signature.py). Not `report`: it only renders, its own task fails if it does, and the
    loss-report DAG (triggered by the analysis) may be rebuilding it while a verdict reads the state."""
    r = as_run(run_dir)
    out = [f"stage {name} {rec.get('status')}" + (f": {rec['error']}" if rec.get("error") else "")
           for name, rec in r.stages().items() if rec.get("status") != "ok" and name != "report"]
    if r.summary_file.exists():
        s = json.loads(r.summary_file.read_text())
        if not s.get("complete", True):
            out.append("incomplete, loss not verified: " + "; ".join(s.get("incomplete_reasons") or []))
        if (s.get("expect") or {}).get("as_expected") is False:  # a known bug gone from its version, or back
            out.append(s["expect"]["words"])
        elif signature_misses == "fail" and missed(s) and s["signature"]["source"] == "signature" \
                and s.get("complete", True):  # an unfinished run is named above, once
            out.append(f"signature ({s['signature']['shows']}) {s['signature']['words']}")
    return out


def signature_lines(run_dirs: list[str]) -> list[str]:
    """One line per analyzed run: its scenario and whether it reached its signature, misses first."""
    rows = []
    for d in run_dirs:
        r = as_run(d)
        if r.summary_file.exists():
            s = json.loads(r.summary_file.read_text())
            sig = s.get("signature")
            name = s.get("scenario") or r.scenario().name  # a summary it cannot read still names its run
            rows.append((not missed(s) if sig else True, f"{name}: " + (sig["words"] if sig else "no signature")))
    return [line for _, line in sorted(rows, key=lambda x: x[0])]


def verdict(run_dirs: list[str], db: str | Path | None = None, signature_misses: str = "fail") -> dict[str, Any]:
    """Every run's failures, and each analyzed run's regression flags against its scenario's trailing
    runs in the run history (pipeline/history/trends.py; db: the history file, default paths.history_db()),
    each flag printed as one line (the DAG task's log). A UserError naming the runs that failed (with
    signature_misses "fail", a run that missed its signature is one; "flag": named, not failed) and
    every regression of a zero-loss scenario (a new loss: `fails`); a figure beyond its spread is a
    finding, named, not a failure. Returns {"failed": {}, "flags": [the lines], "regressions": [...],
    "signatures": [one line per run, misses first]}."""
    if signature_misses not in ("fail", "flag"):
        raise UserError(f"signature_misses must be 'fail' or 'flag', got {signature_misses!r}",
                        "fail: a run that missed its signature fails the verdict; flag: it is only named")
    from pipeline.history.explored import is_explored, judge as explored, lines as explore_lines
    drawn = [d for d in run_dirs if is_explored(d)]
    run_dirs = [d for d in run_dirs if d not in drawn]
    sigs = signature_lines(run_dirs)
    for line in sigs:
        print(f"verdict: signature: {line}", flush=True)
    # a drawn schedule's anomaly is a finding and its failure a flag: neither fails the matrix
    found = [explored(d) for d in drawn]
    if found:
        for line in explore_lines({"base": "", "seed": min(x["seed"] or 0 for x in found), "runs": found,
                                   "anomalies": [x for x in found if x["anomalies"]]}):
            print(f"verdict: {line.strip()}", flush=True)
    bad = {d: f for d in run_dirs if (f := failures(d, signature_misses))}
    judged = trends.judge(run_dirs, db)
    if judged["note"]:
        print(f"verdict: {judged['note']}", flush=True)
    lines = [flag_line(j, f) for j in judged["runs"] for f in j["flags"]]
    for line in lines:
        print(f"verdict: {line}", flush=True)
    if not lines and not judged["note"]:
        print(f"verdict: nothing left its range ({len(judged['runs'])} run(s) against the run history)", flush=True)
    problems = [f"{len(bad)} of {len(run_dirs)} runs failed: "
                + " | ".join(f"{as_run(d).scenario().name}: {'; '.join(f)}" for d, f in bad.items())] if bad else []
    problems += [flag_line(j, f) for j in judged["runs"] for f in j["flags"] if f["fails"]]
    if problems:
        raise UserError(" | ".join(problems), "see the combined report")
    return {"failed": bad, "flags": lines, "regressions": judged["runs"], "signatures": sigs, "explored": found}


def combined_report(reports: list[dict | None] | None, out: str | Path | None = None, part: str = "1/1") -> dict:
    """The matrix's combined HTML report from its runs' `report` results (None: a run whose report
    task did not run), with the run history's trends and the runs' regression flags; a part's report
    is named for it (runs/<time>-nightly-part-2-of-4.html). Returns {"report": the HTML (None when
    no run was analyzed), "runs": [...]}."""
    from pipeline.stages.report import combined
    from pipeline.runs import default_run_dir
    done = [r for r in (reports or []) if r]  # None altogether: the matrix never expanded
    if not done:
        raise UserError("no scenario of the matrix ran", "see the failed tasks before this one")
    analyzed = [r["run_dir"] for r in done if as_run(r["run_dir"]).summary_file.exists()]
    k, n = part_of(part)
    target = out or str(default_run_dir("nightly" if n == 1 else f"nightly-part-{k}-of-{n}")) + ".html"
    return {"report": combined(analyzed, target, history=True)["html"] if analyzed else None,
            "runs": [r["run_dir"] for r in done]}
