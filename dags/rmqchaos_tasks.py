"""The tasks the rmqchaos DAGs are made of. Each calls one function of the `pipeline` package and
nothing else (all logic lives there, importable and testable without Airflow); pipeline modules are
imported inside the task bodies so parsing a DAG file stays cheap.

Not a DAG file (listed in .airflowignore): the DAG files import it.

Cluster tasks (up, check, load, drain, down) run in the pool POOL of one slot, ordered depth-first
(weight rule "upstream") and never retried: a retried load would double the messages. Before `up`
a run takes the machine's one cluster slot (pipeline/stages/slot.py), which also holds under `dag.test()`,
which ignores pools. The JVMs a task starts outlive it (own session, output in files); `down`, a
teardown, ends them whatever failed in between."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import (Asset, BaseSensorOperator, ExceptionRetryPolicy, RetryAction, RetryRule, get_current_context,
                         setup, task, teardown)

POOL = "rmqchaos_cluster"
#: published by every analysis, with the run directory in the event's extra (rocketmq_loss_report listens)
ANALYSIS = Asset(name="rmqchaos_analysis", uri="rmqchaos://analysis")
#: retry a task once after an unexpected error (a crashed worker, a timed-out call), never after a
#: user-level error (bad input, a failed check, a crossed gate): a second try would say the same
RETRY_POLICY = ExceptionRetryPolicy(rules=[RetryRule(exception="rmqchaos.errors.UserError", action=RetryAction.FAIL,
                                                     reason="a user-level error: retrying would not change it")])
DEFAULT_ARGS: dict[str, Any] = {"owner": "rmqchaos", "retries": 1, "retry_delay": timedelta(seconds=30),
                                "retry_policy": RETRY_POLICY}
_CLUSTER: dict[str, Any] = {"pool": POOL, "retries": 0, "weight_rule": "upstream"}


class ClusterSlotSensor(BaseSensorOperator):
    """Waits until no other run's cluster is on this machine; then this run holds the slot until
    `down`. (A sensor class of the Task SDK: the standard provider's @task.sensor imports a deprecated
    Airflow path.)"""
    template_fields = ("run_dir",)

    def __init__(self, *, run_dir: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_dir = run_dir

    def poke(self, context: Any) -> bool:
        from pipeline.stages import slot
        from pipeline.runs import as_run
        return slot.acquire(as_run(self.run_dir))


@setup
@task(**_CLUSTER)
def up(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import up as stage
    return stage.run(run_dir)


@task(**_CLUSTER)
def check(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import check as stage
    return stage.run(run_dir)


@task(**_CLUSTER)
def load(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import load as stage
    return stage.run(run_dir)


@task(trigger_rule="all_done", **_CLUSTER)  # after a failed load too: its consumers still stop cleanly
def drain(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import drain as stage
    return stage.run(run_dir)


def _down(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import down as stage
    return stage.run(run_dir)


def down() -> Any:
    """The teardown task, made afresh for each DAG: a @teardown task called a second time in one
    process raises "Trigger rule not configurable" (the decorator stores its trigger rule in itself)."""
    return teardown(task(_down, task_id="down", pool=POOL, retries=2, weight_rule="upstream"))


@task(trigger_rule="all_done", outlets=[ANALYSIS])  # on whatever the ledgers hold after a failed stage
def analyze(run_dir: str) -> dict[str, Any]:
    from pipeline.stages import analyze as stage
    res = stage.run(run_dir)
    if res.get("summary"):
        get_current_context()["outlet_events"][ANALYSIS].extra = {"run_dir": run_dir}
    return res


@task(trigger_rule="all_done")
def report(run_dir: str) -> dict[str, Any]:
    """The run's report; its path in the return value (and behind the task's "rmqchaos report" link)."""
    from pipeline.stages import report as stage
    res = stage.run(run_dir)
    return {"run_dir": run_dir, "report": res["html"] or res["txt"], **res}


def cluster_run(run_dir: Any) -> Any:
    """One run through the cluster and the analysis: slot → up (setup) → check → load with faults →
    drain → down (teardown) → analyze → report. Returns the report task's output."""
    # poke every 15 s: with a shorter interval than a poke takes end to end here (~6 s under load), the
    # scheduler re-queues the rescheduled sensor before it has seen the last poke end, and fails it
    slot = ClusterSlotSensor(task_id="wait_for_cluster_slot", run_dir=run_dir, poke_interval=15,
                             timeout=6 * 3600, mode="reschedule", retries=0)
    run_dir >> slot
    u = up(run_dir)
    c, ld, dr = check(run_dir), load(run_dir), drain(run_dir)
    dn = down()(run_dir)
    a, r = analyze(run_dir), report(run_dir)
    slot >> u >> c >> ld >> dr >> dn >> a >> r
    u >> dn  # the teardown's own setup: tasks after `down` are out of the setup's scope (they run if `up` failed)
    return r


@task(**_CLUSTER)
def max_rate(run_dir: str) -> dict[str, Any]:
    """The maximum-rate search's steps on the cluster `up` started (pipeline/workflows/maxrate.py)."""
    from pipeline.workflows import maxrate
    return maxrate.run(run_dir)


def search_run(run_dir: Any) -> Any:
    """One side's maximum-rate search: slot → up (setup) → max_rate → down (teardown)."""
    slot = ClusterSlotSensor(task_id="wait_for_cluster_slot", run_dir=run_dir, poke_interval=15,
                             timeout=6 * 3600, mode="reschedule", retries=0)
    run_dir >> slot
    u, m, dn = up(run_dir), max_rate(run_dir), down()(run_dir)
    slot >> u >> m >> dn
    u >> dn
    return dn
