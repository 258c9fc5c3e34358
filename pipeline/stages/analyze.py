"""Stage `analyze`: the PySpark reconciliation of the run's ledgers -> analysis/summary.json."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cluster.plan.jvm import find_java, java_home
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.machine import paths
from rmqchaos.ledger.schema import ledger_files
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir


def run(run_dir: str | Path | RunDir, master: str | None = None) -> dict[str, Any]:
    """master: a Spark master URL (default local[*] or $RMQCHAOS_SPARK_MASTER). Returns the counts
    (None without ledgers), where the summary is, and the run history it was recorded in (None: not
    recorded, with a warning line)."""
    r = as_run(run_dir)
    with stage(r, "analyze"):
        if not ledger_files(r.path, "send") and not ledger_files(r.path, "receive"):
            say("analyze: no ledgers in this run (no load ran)")
            return {"counts": None, "summary": None}
        # Spark needs a JVM: the same java every other part uses, or one clear line (never a Py4J traceback)
        find_java()
        os.environ.setdefault("JAVA_HOME", java_home())
        from analysis.job import analyze  # PySpark: imported only when there is something to analyze
        summ = analyze(r.path, master)
        return {"complete": summ["complete"], "incomplete_reasons": summ["incomplete_reasons"],
                "counts": summ["counts"], "summary": str(r.summary_file), "warnings": summ["warnings"],
                "history": _remember(r, summ)}


def _remember(r: RunDir, summ: dict[str, Any]) -> str | None:
    """The run's row in the run history (analysis/history/history.py), replacing an earlier analysis's; the
    history's file when written. A history that cannot be written costs one warning line, never the
    analysis."""
    db = paths.history_db()
    try:
        from analysis.history.history import record
        record(summ, r.path, db)
    except Exception as e:  # noqa: BLE001 (a locked, full or damaged file: the summary stands on its own)
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        say(f"analyze: warning: not recorded in the run history {db}: {why} (later: rmqchaos history import {r.path})")
        return None
    return str(db)
