"""What every stage does around its work: its status and window in state.json (under the run's
state lock) and a `stage` event in the timeline, also when it fails or is interrupted.

Statuses: running, ok, failed, interrupted (Ctrl-C / SIGTERM); a stage left "running" by a process
that was killed outright reads as "killed" (RunDir.stages).

A person who stops a DAG run (`rmqchaos airflow test`, Ctrl-C) stops the stage that runs; `dag.test`
would then go on to the next task. `request_stop` makes every later stage but `down` refuse at once,
so the DAG run ends within seconds with every cluster it started stopped."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms, starttime
from rmqchaos.run.rundir import RunDir


def error_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        return e.line()
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    if isinstance(e, SystemExit):
        return f"interrupted (exit {e.code})"
    return f"{type(e).__name__}: {e}"


_stopped: list[str] = []  # why this process was asked to stop (its first reason), if it was
STILL_RUN = ("down",)  # the stages that run after a stop: they end what was started


def request_stop(reason: str) -> None:
    if not _stopped:
        _stopped.append(reason)


def stop_requested() -> str | None:
    return _stopped[0] if _stopped else None


def reset_stop() -> None:
    _stopped.clear()


@contextmanager
def stage(run: RunDir, name: str) -> Iterator[None]:
    if _stopped and name not in STILL_RUN:
        if name == "up":  # this run will never start: the machine's cluster slot it took goes back now
            from pipeline.stages import slot
            slot.release(run)
        raise UserError(f"not starting stage {name} of {run.path.name}: {_stopped[0]}",
                        f"what its ledgers hold is kept: `rmqchaos analyze {run.path}` reads it")
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
