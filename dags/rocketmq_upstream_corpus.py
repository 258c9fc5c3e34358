"""rocketmq_upstream_corpus: known upstream RocketMQ bugs (scenarios/upstream/corpus.yaml), each on
the version it was reported on and on one with the fix, then the corpus report and its verdict. The
work is in the `pipeline` package (pipeline/workflows/corpus.py)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from corpus_tasks import corpus_report, corpus_runs
from rmqchaos_tasks import DEFAULT_ARGS

DOC = """
### RocketMQ upstream corpus

Each known bug of the corpus file (`scenarios/upstream/corpus.yaml`) runs on the version it was reported
on (the last of its scenario's `expect.shows_on`) and on one with the fix (the pinned version when it is
among `expect.gone_in`), or on the versions its entry names, each on a fresh cluster, one cluster at a
time (pool `rmqchaos_cluster`, one slot), like a nightly scenario.

`corpus_report` writes one HTML report whose table says per bug *reproduced on X · not on Y* (its path
is the task's return value; `corpus.json` beside it). `verdict` fails the DAG run when a bug does not
reproduce on a version it was reported on (a failure of the platform, never a pass), reproduces on a
version with the fix (a regression upstream, named as such), or could not be told on a version.
"""


@dag(dag_id="rocketmq_upstream_corpus", schedule="0 4 * * 0", start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["rocketmq", "upstream", "weekly"], doc_md=DOC,
     params={"corpus": Param("scenarios/upstream/corpus.yaml", type="string",
                             description="the corpus file: `entries:` lists the bugs' scenario files")})
def rocketmq_upstream_corpus() -> None:
    @task
    def entries() -> list[dict[str, str]]:
        from pipeline.workflows.corpus import entries as listed
        return listed(get_current_context()["params"]["corpus"])

    @task(retries=0)
    def verdict(rep: dict[str, Any]) -> dict[str, Any]:
        """Fails the DAG run naming each bug that stopped reproducing, came back, or could not be told."""
        from pipeline.workflows.corpus import verdict as judge
        return judge(rep)

    verdict(corpus_report(corpus_runs(entries())))


rocketmq_upstream_corpus()
