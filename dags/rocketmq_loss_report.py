"""rocketmq_loss_report: (re)builds the loss/duplication report of given run directories, or of the
run each analysis publishes (asset `rmqchaos_analysis`, the run directory in the event's extra)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from rmqchaos_tasks import ANALYSIS, DEFAULT_ARGS

DOC = """
### RocketMQ loss / duplication report

Triggered by hand with `run_dirs` (one or more run directories), it rebuilds each run's report and, for
several, one combined report, each with the trends of the runs' scenarios over their earlier runs (the run
history: lost, duplicated, busy rate, p99 send, longest recovery; each run's point over its trailing range)
and what left its range. It also runs whenever an analysis publishes the `rmqchaos_analysis` asset.
The report's path is the task's return value; its *rmqchaos report* link opens it.
"""


@dag(dag_id="rocketmq_loss_report", schedule=[ANALYSIS], start_date=datetime(2026, 1, 1), catchup=False,
     default_args=DEFAULT_ARGS, tags=["rocketmq", "report"], doc_md=DOC,
     params={"run_dirs": Param([], type="array", items={"type": "string"},
                               description="run directories (empty: the ones the triggering analyses published)")})
def rocketmq_loss_report() -> None:
    @task
    def build() -> dict[str, Any]:
        ctx = get_current_context()
        dirs = list(ctx["params"]["run_dirs"] or [])
        for events in (ctx.get("triggering_asset_events") or {}).values():
            dirs += [e.extra["run_dir"] for e in events if (e.extra or {}).get("run_dir")]
        from pipeline.stages.report import rebuild
        return rebuild(dirs, history=True)

    build()


rocketmq_loss_report()
