"""Stage `up`: start the run's cluster; returns once every broker is registered and routable."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster import get_backend
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.run.rundir import RunDir


def run(run_dir: str | Path | RunDir) -> dict[str, Any]:
    r = as_run(run_dir)
    # the process bringing it up owns it until it is ready (one killed mid-`up` leaves an orphan that
    # the next run reaps); a DAG's `up` task is not the process that created the run directory
    r.take_ownership(r.state().get("mode", "owned"))
    with stage(r, "up"):
        c = get_backend(r)
        c.up()
        return {"namesrv": c.namesrv_addr, "nodes": list(c.plans)}
