"""rocketmq_prerelease_load_test: a load test a release manager triggers with Params; the candidate
runs alternately with a baseline, and pass gates (absolute and relative to the baseline) decide the
DAG run's state. The work is in the `pipeline` package."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task, task_group
from corpus_tasks import corpus_runs
from rmqchaos_tasks import DEFAULT_ARGS, cluster_run, search_run

DOC = """
### RocketMQ pre-release load test

Trigger it with the release's choices (*Trigger DAG* shows the form): RocketMQ version, broker.conf
overrides, rate, duration, message size, producer policy, fault set, and the pass gates. They are laid
over the base scenario (`scenarios/prerelease.yaml`) and validated like any scenario file: the
**candidate**. The **baseline** is the same test on `baseline_version` (empty: the pinned version) and
no broker.conf overrides; `baseline_version` 4.9.7 with `rocketmq_version` 5.5.0 asks the upgrade
question under the same load, faults and gates. A base-scenario key RocketMQ renamed between the
majors is mapped to each side's name (haSlaveFallbehindMax / haMaxGapNotInSync); a key only one of the
two versions has is refused in one line before anything starts. With `baseline` on (the default) the
two run alternately, `rounds` times each (candidate, baseline, candidate, baseline ...), one cluster at
a time on this machine.

`prepare` → for each run, in order: `side` → `wait_for_cluster_slot` → **up** (setup) → check → load →
drain → **down** (teardown) → analyze → report → then **gates**

With `max_rate_search` set (true, or an object of its settings), each side then gets a maximum-rate
search on a cluster of its own (`side_search`: slot → up → **max_rate** → down): load steps at rising
rates, stopping at the first whose p99 send latency or error rate breaks its bound, or whose achieved
rate falls below 90 % of the asked; the last rate that held is shown on the compare page
(informational, not a gate).

`gates` fails the DAG run naming each failed run and each crossed gate with its limit and the measured
value; a run whose loss could not be verified never passes. Absolute gates apply to every candidate
round (leave one empty to not apply it); the relative gates compare the candidate's worst round with
the baseline's worst: lost no more, p99 send latency within +`max_p99_increase_pct` %, busy rate not
above (+0.001). `gates` writes `*-compare.html` beside the runs: the sides side by side.

With `corpus` set (and a `rocketmq_version`), the upstream corpus (`scenarios/upstream/corpus.yaml`) also
runs on the candidate and on the pinned version, side by side in one report; **corpus_gate** fails the
DAG run naming each known bug that reproduces on the candidate.
"""

POLICIES = ["no_retry", "retry", "java_default", "resend_to_backup_topic", "ignore_send_status"]
FAULT_SETS = ["base", "none", "oom_kill_broker_a", "kill_broker_a", "pause_broker_a"]
PARAMS = {
    "scenario": Param("scenarios/prerelease.yaml", type="string", description="base scenario file"),
    "rocketmq_version": Param(None, type=["null", "string"], pattern=r"^\d+\.\d+\.\d+$",
                              description="RocketMQ version (empty: the pinned one; it must be set up)"),
    "broker_config": Param({}, type="object", description="broker.conf overrides, e.g. {\"flushDiskType\": \"SYNC_FLUSH\"}"),
    "rate": Param(500, type="number", exclusiveMinimum=0, maximum=200000, description="messages/s, all producers"),
    "duration": Param(30, type="number", exclusiveMinimum=0, maximum=21600, description="load duration, s"),
    "message_size": Param(1024, type="integer", minimum=1, maximum=4194304, description="bytes"),
    "policy": Param("retry", type="string", enum=POLICIES, description="what the producer does after an attempt"),
    "fault_set": Param("none", type="string", enum=FAULT_SETS, description="faults during the load"),
    "baseline": Param(True, type="boolean", description="also run the baseline (baseline_version, no overrides)"),
    "baseline_version": Param(None, type=["null", "string"], pattern=r"^\d+\.\d+\.\d+$",
                              description="the baseline's RocketMQ version, e.g. 4.9.7 (empty: the pinned one)"),
    "rounds": Param(1, type="integer", minimum=1, maximum=5, description="candidate/baseline alternations"),
    "max_lost": Param(0, type=["null", "integer"], minimum=0, description="gate: acknowledged keys never delivered"),
    "max_duplicated": Param(None, type=["null", "integer"], minimum=0, description="gate: keys delivered twice or more"),
    "max_p99_send_ms": Param(1000, type=["null", "number"], minimum=0, description="gate: p99 send latency, ms"),
    "max_busy_error_rate": Param(0.01, type=["null", "number"], minimum=0, maximum=1,
                                 description="gate: busy answers per attempt"),
    "corpus": Param(False, type="boolean", description="gate: the upstream corpus on rocketmq_version and the "
                                                       "pinned one; a known bug reproducing on the candidate fails"),
    "relative_gates": Param(True, type="boolean", description="gate the candidate against the baseline"),
    "max_p99_increase_pct": Param(50, type=["null", "number"], minimum=0,
                                  description="relative gate: candidate p99 over the baseline's worst, %"),
    "max_rate_search": Param(None, type=["null", "boolean", "object"],
                             description="after the rounds, per side: raise the rate until p99 or the error rate "
                                         "breaks a bound; true, or {start, factor, steps, step_duration, "
                                         "max_p99_send_ms, max_error_rate} (informational)"),
}


@dag(dag_id="rocketmq_prerelease_load_test", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     default_args=DEFAULT_ARGS, tags=["rocketmq", "load-test", "pre-release"], doc_md=DOC, params=PARAMS)
def rocketmq_prerelease_load_test() -> None:
    @task
    def prepare() -> list[str]:
        from pipeline.workflows import compare
        from pipeline.runs import reap_orphans
        reap_orphans()
        return compare.prepare(dict(get_current_context()["params"]))

    @task
    def side(run_dir: str) -> str:
        """Names the run (candidate or baseline, which round) in the log; hands its directory on."""
        from pipeline.workflows.compare import label
        print(f"{label(run_dir)}: {run_dir}", flush=True)
        return run_dir

    @task_group
    def side_run(run_dir: str) -> Any:
        return cluster_run(side(run_dir))

    @task
    def search_sides(runs: list[str]) -> list[str]:  # none unless `max_rate_search` is set
        from pipeline.workflows import maxrate
        return maxrate.prepare(dict(get_current_context()["params"]), runs[-1] if runs else None)

    @task_group
    def side_search(run_dir: str) -> Any:
        return search_run(side(run_dir))

    @task(retries=0, trigger_rule="all_done")  # after a failed run too: it names what failed
    def gates(runs: list[str], searches: list[str] | None) -> dict[str, Any]:
        from pipeline.workflows.compare import judge
        return judge(runs, dict(get_current_context()["params"]), searches or [])

    runs = prepare()
    searches = search_sides(runs)
    [side_run.expand(run_dir=runs), side_search.expand(run_dir=searches)] >> gates(runs, searches)

    @task
    def corpus_entries() -> list[dict[str, str]]:  # none unless `corpus` is set: the runs below are skipped
        from pipeline.workflows.corpus import candidate_entries
        p = get_current_context()["params"]
        return candidate_entries(p.get("rocketmq_version")) if p.get("corpus") else []

    @task(trigger_rule="all_done", retries=0)
    def corpus_gate(reports: list[dict[str, Any] | None] | None) -> dict[str, Any]:
        from pipeline.workflows.corpus import gate
        p = get_current_context()["params"]
        return gate(reports, p["rocketmq_version"]) if p.get("corpus") else {"corpus": "not run (param corpus)"}

    corpus_gate(corpus_runs(corpus_entries()))


rocketmq_prerelease_load_test()
