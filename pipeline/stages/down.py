"""Stage `down`: stop everything the run started, whatever happened before (safe to repeat)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection

from cluster import get_backend
from cluster.backend import ClusterBackend
from pipeline.stages import slot
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir


#: SIGTERM, then SIGKILL after this long. Past the drain nothing the analysis reads needs a broker's
#: shutdown hooks (5-15 s here: offsets persisted, unregistering): the consumers have already stopped
#: cleanly, and the commit logs the store check reads are in the page cache, which outlives the JVM
#: (a TSP broker commits its buffer every 200 ms; the drain waited for lag 0). A person's
#: `cluster down` (graceful=True) keeps the scenario's stop_timeout.
GRACE_S = 2.0


def run(run_dir: str | Path | RunDir, graceful: bool = False) -> dict[str, Any]:
    r = as_run(run_dir)
    with stage(r, "down"):
        c = get_backend(r)
        _probe(r, c)
        say("stopping the cluster")
        done = c.down(None if graceful else min(GRACE_S, r.scenario().cluster.stop_timeout))
        for d in done:
            say(d)
        slot.release(r)
        return {"done": done}


def _probe(r: RunDir, c: ClusterBackend) -> None:
    """The scenario's `expect:` probes, read while the nodes still run (once per run: a second
    `down` finds them stopped). A probe that cannot be read is recorded so, never a failed `down`."""
    if r.probes_file.exists() or not r.stages().get("up", {}).get("status") == "ok":
        return
    from cluster.watch.end_probes import take
    try:
        got = take(r, c)
    except Exception as e:  # noqa: BLE001 - stopping the cluster matters more than any probe
        say(f"expect: warning: probes not taken: {e}")
        return
    for p in got or []:
        say(f"expect: {p['words']}: {'holds' if p['holds'] else 'does not hold' if p['holds'] is False else p.get('error')}")


def all_runs() -> list[RunDir]:
    """`cluster down --all`: every registered run brought down (and what lost runs left, reaped)."""
    from cluster import reap_lost_runs
    from rmqchaos.run.rundir import registered_runs
    for line in reap_lost_runs():
        say(line)
    out = []
    for r in registered_runs():
        run(r)
        out.append(r)
    return out


def registered() -> set[Path]:
    from rmqchaos.run.rundir import registered_runs
    return {r.path for r in registered_runs()}


def owned(but: Collection[Path] = ()) -> list[RunDir]:
    """Every registered run this process owns (but those in `but`), brought down: a DAG run stopped
    before its `down` tasks ran (`dag.test` runs every task in this process, and a run's cluster
    outlives its `up` task)."""
    from rmqchaos.run.rundir import registered_runs
    out = []
    for r in registered_runs():
        try:
            mine = int((r.state().get("owner") or {}).get("pid", 0)) == os.getpid()
        except (OSError, ValueError):
            continue
        if mine and r.path not in but:
            say(f"stopping the cluster of {r.path}: its DAG run was stopped")
            run(r)
            out.append(r)
    return out
