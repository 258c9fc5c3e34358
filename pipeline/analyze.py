"""Stage `analyze`: the PySpark reconciliation of the run's ledgers -> analysis/summary.json."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cluster.jvm import find_java, java_home
from pipeline.runs import as_run
from pipeline.stage import stage
from rmqchaos.ledgers import ledger_files
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir


def run(run_dir: str | Path | RunDir, master: str | None = None) -> dict[str, Any]:
    """master: a Spark master URL (default local[*] or $RMQCHAOS_SPARK_MASTER). Returns the counts
    (None without ledgers) and where the summary is."""
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
                "counts": summ["counts"], "summary": str(r.summary_file), "warnings": summ["warnings"]}
