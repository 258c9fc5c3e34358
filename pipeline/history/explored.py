"""What an explored run found (the runs `rmqchaos explore` draws: pipeline/workflows/explore.py): its seed,
schedule and anomalies (analysis/judge/anomalies.py), whether it is worth keeping, and the lines and
report section that say so. Read by the exploration, the matrix's verdict and the combined report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from analysis.judge.anomalies import anomalies
from chaos.explore import words
from pipeline.runs import as_run


def judge(run_dir: str | Path) -> dict[str, Any]:
    """What the explorer records of one run: {run_dir, seed, schedule, complete, anomalies [{check,
    condition, seen}], failure}. A run that did not finish is never an anomaly: its reasons instead."""
    r = as_run(run_dir)
    doc = yaml.safe_load((r.path / "scenario.yaml").read_text()) or {}
    s = json.loads(r.summary_file.read_text()) if r.summary_file.is_file() else None
    failed = [f"{n} {rec.get('status')}" + (f": {rec['error']}" if rec.get("error") else "")
              for n, rec in r.stages().items() if rec.get("status") not in ("ok", None) and n != "report"]
    return {"run_dir": str(r.path), "seed": (doc.get("explore") or {}).get("seed"),
            "schedule": words(doc.get("faults") or []), "complete": bool(s and s.get("complete")),
            "anomalies": anomalies(s) if s and s.get("counts") else [],
            "incomplete_reasons": (s or {}).get("incomplete_reasons") or ([] if s else ["not analyzed"]),
            "failures": failed}


def kept(rec: dict[str, Any]) -> bool:
    """A run worth keeping: an anomaly, or a run that did not finish (its reason may be one)."""
    return bool(rec["anomalies"]) or not rec["complete"] or bool(rec["failures"])


def is_explored(run_dir: str | Path) -> bool:
    """Whether the run's scenario is one `explore` drew (its scenario.yaml names an explore origin)."""
    f = Path(run_dir) / "scenario.yaml"
    doc = yaml.safe_load(f.read_text()) if f.is_file() else None
    return isinstance(doc, dict) and bool(doc.get("explore"))


def section(run_dirs: list[str], db: str | Path | None = None) -> str:
    """The combined report's section on the explored runs among `run_dirs` ('' when there are none),
    each anomaly marked new when no earlier explored run of the same base showed that check."""
    from analysis.report.explore_page import render
    recs = [judge(d) for d in run_dirs if is_explored(d)]
    return render(mark_new(recs, db))


def mark_new(recs: list[dict[str, Any]], db: str | Path | None = None) -> list[dict[str, Any]]:
    """Each record with `new`: its anomalies' checks that no explored run of its base recorded in the
    run history before it showed (None: the run, or the history, is not there to tell)."""
    from analysis.history import history
    from rmqchaos.errors import UserError
    try:
        rows = history.runs(db)
    except UserError:  # no history yet: nothing to compare with
        return [{**r, "new": None} for r in recs]
    by_dir = {row["run_dir"]: row for row in rows if row.get("run_dir")}
    out = []
    for r in recs:
        me = by_dir.get(str(Path(r["run_dir"]).resolve()))
        if me is None or me.get("started_ms") is None:
            out.append({**r, "new": None})
            continue
        known = {c for row in rows if row.get("explore_base") == me.get("explore_base") and row.get("explore_seed") is not None
                 and (row.get("started_ms") or 0) < me["started_ms"] for c in row.get("anomalies") or []}
        out.append({**r, "new": [a["check"] for a in r["anomalies"] if a["check"] not in known]})
    return out


def lines(rec: dict[str, Any]) -> list[str]:
    """The exploration in lines a person reads: one per run, anomalies first."""
    rows = sorted(rec["runs"], key=lambda x: (not x["anomalies"], x["complete"]))
    out = [f"explore{' ' + rec['base'] if rec.get('base') else ''} from seed {rec['seed']}: {len(rec['runs'])} run(s), "
           f"{len(rec['anomalies'])} with an anomaly"]
    for x in rows:
        what = ("ANOMALY " + "; ".join(a["seen"] for a in x["anomalies"]) if x["anomalies"] else
                "nothing found" if x["complete"] else "did not finish: " + "; ".join(x["incomplete_reasons"] or x["failures"]))
        out.append(f"  seed {x['seed']}: {what} | {x['schedule']}" + (f" | {x['run_dir']}" if x["run_dir"] else ""))
    return out
