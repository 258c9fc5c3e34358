"""Stage `load`: create the load's topics, start the consumers, run the Locust load in a process of
its own with the faults on its clock. The consumers go on running: `drain` stops them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from chaos.scheduler import FaultScheduler, occurrences
from cluster import get_backend
from loadgen.consumer_control import ConsumerControl
from loadgen.drain import run_loadgen, start_consumers, stop_consumers
from loadgen.serving import gate
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.machine import diskstats
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir


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
    c.create_topics(s.load.topics(), s.load.queues, attributes=s.load.topic_attributes)
    if s.consumers and (grpc_groups := sorted({i.group for i in s.consumers.instances if i.grpc is not None})):
        c.create_groups(grpc_groups)
    run.ledgers_dir.mkdir(exist_ok=True)
    consumers = start_consumers(run, c, s) if s.consumers else []
    consumers_ms = now_ms()
    faults: FaultScheduler | None = None

    def start_faults(load_running: Callable[[], bool]) -> None:
        """The faults, once every consumer group is served by every master of its topics (the serving
        gate, loadgen/serving.py; it raises and no fault is applied when that does not come in time)."""
        nonlocal faults
        delay = 0.0
        if consumers:
            first = min((o.at for o in occurrences(s.faults) if getattr(o, "after", None) is None), default=0.0)
            delay = gate(run, c, s, consumers, consumers_ms, load_running, first)
        faults = FaultScheduler(run, c, s.faults, delay_s=delay, clients=ConsumerControl(run, consumers))
        faults.start()
    disk = diskstats.sampler(run.path, run.disk_metrics_file)
    try:
        t0 = now_ms()
        run.load_dir.mkdir(exist_ok=True)
        run.load_started_file.unlink(missing_ok=True)
        try:
            run_loadgen(run, c, ledger, beside=start_faults if s.faults else None)
        finally:
            if faults is not None:
                faults.stop()
                faults.join(timeout=max(f.timeout for f in s.faults) + 60)
            run.event("load", s.load.topic, t0, now_ms(), "done", rate=s.load.rate, users=s.load.users,
                      policy=s.load.policy.kind)
        if faults is not None:
            faults.check()  # a fault that could not be applied fails the stage; `drain` still runs
    except BaseException as e:
        if not isinstance(e, UserError):  # interrupted: nothing will drain them, stop them cleanly now
            stop_consumers(consumers, run)
        raise
    finally:
        if disk is not None:
            disk.close()
    return {"faults": len(faults.results) if faults is not None else 0, "consumers": len(consumers)}

