"""Stage `load`: create the load's topics, start the consumers, run the Locust load in a process of
its own with the faults on its clock, drain the consumers until every group's lag is 0 and nothing
new arrives for `settle`, stop them."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.scheduler import FaultScheduler
from cluster import get_backend
from loadgen.drain import drain, group_lag, run_loadgen, start_consumers, stop_consumers
from pipeline.runs import as_run
from pipeline.stage import stage
from rmqchaos.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir


def run(run_dir: str | Path | RunDir, ledger: bool | None = None) -> dict[str, Any]:
    """ledger: override the scenario's load.ledger (benchmarks)."""
    r = as_run(run_dir)
    with stage(r, "load"):
        return _load(r, ledger)


def _load(run: RunDir, ledger: bool | None) -> dict[str, Any]:
    s = run.scenario()
    if s.load is None:
        say("no load configured")
        return {"load": None}
    c = get_backend(run)
    c.create_topics(s.load.topics(), s.load.queues)
    run.ledgers_dir.mkdir(exist_ok=True)
    consumers = start_consumers(run, c, s) if s.consumers else []
    faults: FaultScheduler | None = None
    result: dict[str, Any] = {"faults": 0, "deliveries": None, "drained": None}
    try:
        t0 = now_ms()
        run.load_dir.mkdir(exist_ok=True)
        run.load_started_file.unlink(missing_ok=True)
        if s.faults:
            faults = FaultScheduler(run, c, s.faults)
            faults.start()
        try:
            run_loadgen(run, c, ledger)
        finally:
            if faults is not None:
                faults.stop()
                faults.join(timeout=max(f.timeout for f in s.faults) + 60)
            run.event("load", s.load.topic, t0, now_ms(), "done", rate=s.load.rate, users=s.load.users,
                      policy=s.load.policy.kind)
        if consumers:
            t1 = now_ms()
            n, drained = drain(consumers, s.consumers.settle, s.consumers.drain_timeout,  # type: ignore[union-attr]
                               group_lag(c, s))
            run.event("drain", "consumers", t1, now_ms(), "done" if drained else "timeout", deliveries=n,
                      drained=drained)
            result.update(deliveries=n, drained=drained)
    finally:
        stop_consumers(consumers, run)
    if faults is not None:
        result["faults"] = len(faults.results)
        faults.check()  # after the drain: what the ledgers hold is complete either way
    return result
