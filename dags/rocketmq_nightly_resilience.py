"""rocketmq_nightly_resilience: every scenario of the nightly matrix on a fresh cluster, then one
combined report. The DAG is the pipeline's table of contents; the work is in the `pipeline` package."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task, task_group
from rmqchaos_tasks import DEFAULT_ARGS, cluster_run

DOC = """
### RocketMQ nightly resilience matrix

Each scenario listed in the matrix file (`scenarios/nightly.yaml`: at least `control`, `oom-tsp-on`,
`oom-tsp-off`) runs on a fresh cluster of this machine, one cluster at a time (pool `rmqchaos_cluster`,
one slot):

`wait_for_cluster_slot` → **up** (setup) → check → load with faults → drain → **down** (teardown: runs
whatever failed in between) → analyze → report

The analyses run in parallel; then `combined_report` writes one HTML report across the matrix (its path is
the task's return value, and the task's *rmqchaos report* link opens it), with each scenario's trend
over its earlier runs (the run history), and `verdict` fails the DAG run when a run failed, its loss
could not be verified, a run missed its scenario's signature (NOT reproduced: the Param
`signature_misses: flag` only names those), or a scenario that never lost in its trailing runs lost
(a regression). The Param `part` (k/n) runs every n-th scenario from the k-th, so that n DAG runs
cover a matrix too long for one (`make nightly PART=2/4`). The Param `explore_runs` adds that many
fault schedules drawn at random over `explore_base` (rmqchaos explore; with parts, in the last):
their anomalies get a section of the report and lines in `verdict`'s log, and never fail the DAG
run. Each figure that left its trailing range is named in the report and in `verdict`'s log; a
scenario that keeps losing messages is a finding, not a failure.
"""


@dag(dag_id="rocketmq_nightly_resilience", schedule="0 2 * * *", start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["rocketmq", "resilience", "nightly"], doc_md=DOC,
     params={"matrix": Param("scenarios/nightly.yaml", type="string",
                             description="the matrix file: `scenarios:` lists the scenario files"),
             "part": Param("1/1", type="string", pattern=r"^[1-9][0-9]*/[1-9][0-9]*$",
                           description="k/n: every n-th scenario of the matrix from the k-th, so that n "
                                       "runs cover it once (a CI job under a time cap); 1/1: all"),
             "signature_misses": Param("fail", enum=["fail", "flag"],
                                       description="a run that did not reach its scenario's signature: fail "
                                                   "the DAG run, or only name it (flag)"),
             "explore_runs": Param(1, type="integer", minimum=0, maximum=20,
                                   description="fault schedules drawn at random over explore_base and run "
                                               "after the matrix (rmqchaos explore; 0: none)"),
             "explore_base": Param("scenarios/explore/controller.yaml", type="string",
                                   description="the scenario whose cluster and load the drawn schedules run on")})
def rocketmq_nightly_resilience() -> None:
    @task
    def matrix() -> list[str]:
        from airflow.sdk import get_current_context

        from pipeline.workflows.explore import plan_params
        from pipeline.workflows.matrix import part_of, scenarios
        p = get_current_context()["params"]
        k, n = part_of(p["part"])
        drawn = plan_params({"base": p["explore_base"], "runs": p["explore_runs"], "seed": None}) \
            if p["explore_runs"] and k == n else []  # the drawn schedules once over the parts: in the last
        return scenarios(p["matrix"], p["part"]) + drawn

    @task
    def prepare(scenario: str) -> str:
        from pipeline.workflows.matrix import prepare as make_run
        return make_run(scenario)

    @task_group
    def scenario_run(scenario: str) -> Any:
        return cluster_run(prepare(scenario))

    @task(trigger_rule="all_done")
    def combined_report(reports: list[dict[str, Any] | None] | None) -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from pipeline.workflows.matrix import combined_report as write
        return write(reports, part=get_current_context()["params"]["part"])

    @task(retries=0)
    def verdict(rep: dict[str, Any]) -> dict[str, Any]:
        """Fails the DAG run if a run failed, could not verify its loss, or a zero-loss scenario lost
        (against its trailing runs in the run history); logs each figure that left its range."""
        from airflow.sdk import get_current_context

        from pipeline.workflows.matrix import verdict as judge
        return judge(rep["runs"], signature_misses=get_current_context()["params"]["signature_misses"])

    verdict(combined_report(scenario_run.expand(scenario=matrix())))

rocketmq_nightly_resilience()
