"""What the run history says about some analyzed runs: each one's regression flags against its
scenario's trailing runs (analysis/history/regress.py), for the nightly verdict, and the report's trend
section (analysis/history/trends.py). A run not (yet) in the history is judged from its own summary."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.history import history
from analysis.history.regress import Rule, regressions
from pipeline.runs import as_run
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir


def _history(run_dirs: list[str | Path | RunDir], db: str | Path | None
             ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], str | None]:
    """The analyzed runs' rows, each scenario's rows in the history (the runs' own among them), and
    why the history could not be read (None: it was)."""
    cur = []
    for d in run_dirs:
        r = as_run(d)
        if r.summary_file.exists():
            cur.append(history.row(json.loads(r.summary_file.read_text()), r.path))
    by: dict[str, list[dict[str, Any]]] = {}
    note = None
    for name in dict.fromkeys(r["scenario"] for r in cur):
        try:
            rows = history.runs(db, scenario=name)
        except UserError as e:  # no history yet (a first night), or one that cannot be read
            note = f"the run history could not be read, so these runs are judged against nothing: {e.line()}"
            rows = []
        known = {r["run_id"]: r for r in rows}
        known.update({r["run_id"]: r for r in cur if r["scenario"] == name})
        by[name] = sorted(known.values(), key=lambda r: (r.get("started_ms") or 0, r["run_id"]))
    return cur, by, note


def judge(run_dirs: list[str | Path | RunDir], db: str | Path | None = None, rule: Rule = Rule()) -> dict[str, Any]:
    """{"runs": [regress result per analyzed run], "note": why the history was not read, or None}."""
    try:
        cur, by, note = _history(run_dirs, db)
    except (OSError, ValueError, KeyError, TypeError) as e:  # a summary the history cannot read: the verdict stands
        return {"runs": [], "note": f"the runs could not be judged against the run history: {type(e).__name__}: {e}"}
    return {"runs": [regressions(r, by[r["scenario"]], rule) for r in cur], "note": note}


def section(run_dirs: list[str | Path | RunDir], db: str | Path | None = None, rule: Rule = Rule()) -> str:
    """The report's "Against the run history" section: the runs' flags and each scenario's trend."""
    from analysis.history.trends import render  # matplotlib: only when a report is written
    cur, by, note = _history(run_dirs, db)
    if note and "no run history at" in note:
        note = f"no run history at {db or paths.history_db()} yet: only these runs are shown"
    return render([regressions(r, by[r["scenario"]], rule) for r in cur], by, rule, note)
