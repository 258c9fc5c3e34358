"""The upstream corpus's verdict (scenarios/upstream/): per known bug, the versions it reproduced on
and those it did not ("reproduced on 5.3.3 · not on 5.5.0"), and what is wrong with that. A bug that
does not reproduce on a version it was reported on is a failure of the platform (its scenario or its
signature no longer catches it), never a pass; one that reproduces on a version with the fix is a
regression upstream, named as such. Pure functions on the runs' records (pipeline/workflows/corpus.py reads
them from run directories): {issue, scenario, version, shows_on, gone_in, reproduced (True/False/None),
words, run_dir}."""
from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from analysis.judge.expect import issue_name
from analysis.report.page import page

__all__ = ["OK", "REGRESSED", "STOPPED", "UNKNOWN", "bugs", "issue_name", "line", "render", "table"]

OK, STOPPED, REGRESSED, UNKNOWN = "as expected", "stopped reproducing", "regressed upstream", "could not tell"


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")) if all(x.isdigit() for x in v.split(".")) else (10**6,)


def line(reproduced_on: list[str], not_on: list[str], unknown_on: list[str]) -> str:
    """'reproduced on 5.3.3 · not on 5.5.0' (· could not tell on X)."""
    parts = []
    if reproduced_on:
        parts.append("reproduced on " + ", ".join(reproduced_on))
    if not_on:
        parts.append(("not on " if reproduced_on else "not reproduced on ") + ", ".join(not_on))
    if unknown_on:
        parts.append("could not tell on " + ", ".join(unknown_on))
    return " · ".join(parts) or "no run"


def bugs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per bug (its issue), in the order of the records: {issue, name, scenarios, shows_on,
    gone_in, reproduced_on, not_on, unknown_on, status (OK, STOPPED, REGRESSED, UNKNOWN: the worst),
    line, problems [sentences], notes [what it did on a measure_on version]}."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["issue"], []).append(r)
    out = []
    for issue, rs in by.items():
        name = issue_name(issue)
        shows_on, gone_in = rs[0]["shows_on"], rs[0]["gone_in"]
        seen = {True: [], False: [], None: []}  # type: dict[bool | None, list[dict[str, Any]]]
        for r in sorted(rs, key=lambda r: _key(r["version"])):
            seen[r["reproduced"]].append(r)
        problems, status = [], OK
        for r in seen[None]:
            problems.append(f"{name}: could not tell whether it reproduces on {r['version']} ({r['words']})")
            status = UNKNOWN
        for r in seen[False]:
            if r["version"] in shows_on:
                problems.append(f"{name} no longer reproduces on {r['version']}, a version it was reported on: a "
                                f"failure of the platform (its scenario or signature misses it), not a pass ({r['words']})")
                status = STOPPED
        for r in seen[True]:
            if r["version"] in gone_in:
                problems.append(f"{name} reproduces on {r['version']}, a version with the fix: a regression upstream "
                                f"({r['words']})")
                status = REGRESSED
        # a version upstream reports nothing for (measure_on): what it did is news, never a problem
        notes = [f"{name} {'reproduces' if r['reproduced'] else 'does not reproduce'} on {r['version']}, a version "
                 f"upstream reports nothing for ({r['words']})" for r in seen[True] + seen[False]
                 if r["version"] in r.get("measure_on", [])]
        versions = {k: list(dict.fromkeys(r["version"] for r in v)) for k, v in seen.items()}
        out.append({"issue": issue, "name": name, "scenarios": list(dict.fromkeys(r["scenario"] for r in rs)),
                    "shows_on": shows_on, "gone_in": gone_in, "reproduced_on": versions[True],
                    "not_on": versions[False], "unknown_on": versions[None], "status": status,
                    "line": line(versions[True], versions[False], versions[None]), "problems": problems,
                    "notes": notes,
                    "runs": [{"version": r["version"], "reproduced": r["reproduced"], "run_dir": r.get("run_dir"),
                              "words": r["words"]} for r in rs]})
    return out


def table(entries: list[dict[str, Any]], title: str = "Upstream corpus") -> str:
    """The corpus's section of the report: a row per bug (data-issue, data-status for a reader and
    a test), then every problem as a warning line."""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("bug", "scenario", "reported on", "fixed in", "result", "verdict"))
    rows = "".join(
        f'<tr data-issue="{e(b["name"])}" data-status="{e(b["status"])}"><td>{e(b["name"])}</td>'
        f'<td>{e(", ".join(b["scenarios"]))}</td><td>{e(", ".join(b["shows_on"]))}</td>'
        f'<td>{e(", ".join(b["gone_in"]) or "-")}</td><td class=result>{e(b["line"])}</td>'
        f'<td{"" if b["status"] == OK else " class=warn"}>{e(b["status"])}</td></tr>' for b in entries)
    problems = [p for b in entries for p in b["problems"]]
    notes = [n for b in entries for n in b.get("notes", [])]
    warn = "<ul>" + "".join(f"<li class=warn>{e(p)}</li>" for p in problems) + \
        "".join(f"<li class=note>{e(n)}</li>" for n in notes) + "</ul>" if problems or notes else ""
    return (f"<section id=corpus><h2>{e(title)}</h2><p>Each known bug on the versions it ran on. A bug that does not "
            "reproduce on a version it was reported on is a failure of the platform; one that reproduces on a version "
            f"with the fix is a regression upstream.</p><table class=corpus><tr>{head}</tr>{rows}</table>{warn}</section>")


def render(entries: list[dict[str, Any]], out: Path, title: str = "RocketMQ upstream corpus") -> str:
    """The corpus report: the table, then each run (bug, version, its verdict clause, a link to its
    own report, relative to `out`). Cheap: the runs' plots are in their own reports."""
    e = html.escape

    def link(run_dir: str | None) -> str:
        rep = Path(run_dir or "") / "report.html"
        if not run_dir or not rep.is_file():
            return "-"
        return f'<a href="{e(os.path.relpath(rep, out.parent))}">{e(Path(run_dir).name)}</a>'
    result = {True: "reproduced", False: "not reproduced", None: "could not tell"}
    rows = "".join(f'<tr data-version="{e(r["version"])}"><td>{e(b["name"])}</td><td>{e(r["version"])}</td>'
                   f'<td>{result[r["reproduced"]]}</td><td>{e(r["words"])}</td><td>{link(r["run_dir"])}</td></tr>'
                   for b in entries for r in b["runs"])
    runs = ("<section id=runs><h2>Runs</h2><table><tr><th>bug</th><th>version</th><th>result</th><th>evidence</th>"
            f"<th>run report</th></tr>{rows}</table></section>")
    return page(title, f"<h1>{e(title)}</h1>{table(entries)}{runs}")
