"""The upstream corpus's runs as tasks, shared by rocketmq_upstream_corpus and the pre-release DAG:
each (scenario, version) entry through the same cluster path as a nightly scenario (cluster_run: one
cluster at a time, pool and slot). Not a DAG file (listed in .airflowignore)."""
from __future__ import annotations

from typing import Any

from airflow.sdk import task, task_group
from rmqchaos_tasks import cluster_run


def corpus_runs(entries: Any) -> Any:
    """One mapped run per entry ({scenario, version}); returns the runs' report outputs. The task group
    is made afresh for each DAG (a decorated group is bound to the DAG it is first called in)."""
    @task
    def prepare(entry: dict[str, str]) -> str:
        from pipeline.workflows.corpus import prepare as make_run
        return make_run(entry)

    @task_group
    def corpus_run(entry: dict[str, str]) -> Any:
        return cluster_run(prepare(entry))

    return corpus_run.expand(entry=entries)


@task(trigger_rule="all_done")
def corpus_report(reports: list[dict[str, Any] | None] | None) -> dict[str, Any]:
    """The corpus table ('reproduced on X · not on Y' per bug) and the runs' sections in one HTML
    report (its path is the return value), corpus.json beside it."""
    from pipeline.workflows.corpus import report
    return report(reports)
