"""Stage `down`: stop everything the run started, whatever happened before (safe to repeat)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster import get_backend
from pipeline import slot
from pipeline.runs import as_run
from pipeline.stage import stage
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir


def run(run_dir: str | Path | RunDir) -> dict[str, Any]:
    r = as_run(run_dir)
    with stage(r, "down"):
        say("stopping the cluster")
        done = get_backend(r).down()
        for d in done:
            say(d)
        slot.release(r)
        return {"done": done}


def all_runs() -> list[RunDir]:
    """`cluster down --all`: every registered run brought down (and what lost runs left, reaped)."""
    from cluster import reap_lost_runs
    from rmqchaos.rundir import registered_runs
    for line in reap_lost_runs():
        say(line)
    out = []
    for r in registered_runs():
        run(r)
        out.append(r)
    return out
