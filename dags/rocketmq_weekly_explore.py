"""rocketmq_weekly_explore: seeded random fault schedules over a base scenario, each on a fresh
cluster, then what they found. The DAG is the pipeline's table of contents; the work is in the
`pipeline` package (pipeline/workflows/explore.py)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task, task_group
from rmqchaos_tasks import DEFAULT_ARGS, cluster_run

DOC = """
### RocketMQ weekly exploration

`schedules` draws one fault schedule per run from the fault registry over the base scenario's
cluster and load (seed `seed + k` for run k, written as scenario files), each runs on a fresh cluster
like a nightly scenario, and `findings` judges every run: the ones whose checks flag an anomaly (lost
acknowledged messages, unexplained duplicates, two masters, stale reads, reused queue offsets,
damaged or unexpected deliveries, a node that did not start again) are kept with their seed, the
others removed (their rows stay in the run history). An anomaly is a finding, not a failure: the
DAG run succeeds; `rmqchaos history anomalies --explored` lists them, `rmqchaos shrink RUN` makes
one smaller. docs/explore.md.
"""


@dag(dag_id="rocketmq_weekly_explore", schedule="0 3 * * 6", start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["rocketmq", "explore", "weekly"], doc_md=DOC,
     params={"base": Param("scenarios/explore/controller.yaml", type="string",
                           description="the scenario whose cluster and load the schedules run on"),
             "runs": Param(12, type="integer", minimum=1, maximum=200, description="drawn schedules to run"),
             "seed": Param(None, type=["null", "integer"], minimum=0,
                           description="the first run's seed (default: from the clock)"),
             "max_faults": Param(3, type="integer", minimum=1, maximum=8, description="faults per schedule, at most")})
def rocketmq_weekly_explore() -> None:
    @task
    def schedules() -> list[str]:
        from airflow.sdk import get_current_context

        from pipeline.workflows.explore import plan_params
        return plan_params(get_current_context()["params"])

    @task
    def prepare(scenario: str) -> str:
        from pipeline.workflows.explore import prepare as make_run
        return make_run(scenario)

    @task_group
    def explored_run(scenario: str) -> Any:
        return cluster_run(prepare(scenario))

    @task(trigger_rule="all_done")
    def findings(reports: list[dict[str, Any] | None] | None) -> dict[str, Any]:
        from pipeline.workflows.explore import collect
        return collect([r["run_dir"] for r in reports or [] if r])

    findings(explored_run.expand(scenario=schedules()))

rocketmq_weekly_explore()
