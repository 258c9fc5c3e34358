"""What an explored run found (the runs `rmqchaos explore` draws: pipeline/explore.py): its seed,
schedule and anomalies (analysis/anomalies.py), whether it is worth keeping, and the lines and
report section that say so. Read by the exploration, the matrix's verdict and the combined report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from analysis.anomalies import anomalies
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


def section(run_dirs: list[str]) -> str:
    """The combined report's section on the explored runs among `run_dirs` ('' when there are none)."""
    from analysis.explore_page import render
    return render([judge(d) for d in run_dirs if is_explored(d)])


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
