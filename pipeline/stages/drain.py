"""Stage `drain`: after the load, let the consumers the `load` stage started consume until every
group's lag is 0 and nothing new arrived for `settle` (at most `drain_timeout`), then stop them
cleanly (offsets persisted, receive ledgers fsync'd). Runs in any process: the consumers are found
by their records in processes.jsonl."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster import get_backend
from loadgen.drain import dead_groups, drain, group_lag, settle_of, started_consumers, stop_consumers
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec.timing import max_due_after_s


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
            # a timer load: the last message made before now is due at most max_due_after_s from now
            wait = max_due_after_s(s) + s.load.timer.wait if s.load and s.load.timer else 0.0
            if wait:
                say(f"drain: a timer load: waiting at least {wait:g}s (the longest delay and load.timer.wait)")
            n, drained, gone = drain(consumers, settle_of(s), s.consumers.drain_timeout,  # type: ignore[union-attr]
                                     group_lag(c, s), dead_groups(c), not_before=time.time() + wait if wait else None)
            r.event("drain", "consumers", t1, now_ms(), "done" if drained else "out_of_reach" if gone else "timeout",
                    deliveries=n, drained=drained, **({"out_of_reach": gone} if gone else {}))
        finally:
            stop_consumers(consumers, r)
        return {"deliveries": n, "drained": drained}
