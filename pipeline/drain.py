"""Stage `drain`: after the load, let the consumers the `load` stage started consume until every
group's lag is 0 and nothing new arrived for `settle` (at most `drain_timeout`), then stop them
cleanly (offsets persisted, receive ledgers fsync'd). Runs in any process: the consumers are found
by their records in processes.jsonl."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster import get_backend
from loadgen.drain import dead_groups, drain, group_lag, started_consumers, stop_consumers
from pipeline.runs import as_run
from pipeline.stage import stage
from rmqchaos.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir


def run(run_dir: str | Path | RunDir) -> dict[str, Any]:
    r = as_run(run_dir)
    with stage(r, "drain"):
        s = r.scenario()
        c = get_backend(r)
        consumers = started_consumers(r, c, s) if s.consumers else []
        if not consumers:
            say("drain: no consumer running")
            return {"deliveries": None, "drained": None}
        try:
            t1 = now_ms()
            n, drained, gone = drain(consumers, s.consumers.settle, s.consumers.drain_timeout,  # type: ignore[union-attr]
                                     group_lag(c, s), dead_groups(c))
            r.event("drain", "consumers", t1, now_ms(), "done" if drained else "out_of_reach" if gone else "timeout",
                    deliveries=n, drained=drained, **({"out_of_reach": gone} if gone else {}))
        finally:
            stop_consumers(consumers, r)
        return {"deliveries": n, "drained": drained}
