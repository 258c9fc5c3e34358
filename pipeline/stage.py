"""What every stage does around its work: its status and window in state.json (under the run's
state lock) and a `stage` event in the timeline, also when it fails or is interrupted.

Statuses: running, ok, failed, interrupted (Ctrl-C / SIGTERM); a stage left "running" by a process
that was killed outright reads as "killed" (RunDir.stages)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from rmqchaos.errors import UserError
from rmqchaos.procs import now_ms, starttime
from rmqchaos.rundir import RunDir


def error_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        return e.line()
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    if isinstance(e, SystemExit):
        return f"interrupted (exit {e.code})"
    return f"{type(e).__name__}: {e}"


@contextmanager
def stage(run: RunDir, name: str) -> Iterator[None]:
    t0 = now_ms()
    # who runs it: a stage still "running" whose process is gone was killed outright (RunDir.stages)
    me = {"pid": os.getpid(), "starttime": starttime(os.getpid())}
    run.set_stage(name, {"status": "running", "start_ms": t0, **me})
    outcome, err = "ok", None
    try:
        yield
    except BaseException as e:
        outcome = "interrupted" if isinstance(e, (KeyboardInterrupt, SystemExit)) else "failed"
        err = error_line(e)
        raise
    finally:
        run.set_stage(name, {"status": outcome, "start_ms": t0, "end_ms": now_ms(), "error": err})
        run.event("stage", name, t0, now_ms(), outcome, **({"error": err} if err else {}))
