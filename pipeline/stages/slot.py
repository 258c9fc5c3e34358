"""The machine's one cluster slot. Scheduled runs (the DAG tasks) take it before `up` and `down`
gives it back, so the runs of a nightly matrix, and a pre-release run triggered meanwhile, never
have two clusters on this host at once. An Airflow pool of one slot orders the cluster tasks; this
lease is what makes it hold across map indexes and under `dag.test()`, which ignores pools.

The lease is $RMQCHAOS_HOME/cluster.slot: {"run": <run dir>, "since_ms": ...}, changed under an flock.
A holder is stale (the slot is free) once its run directory is gone, its `down` stage has ended, or
nothing of it runs (no stage in progress, no cluster registered) after a stage of it ran or STALE_S
after it took the slot without starting.

A run made as one of a sequence (the pre-release test's candidate and baseline runs, alternating)
names the run before it in its state (`after`); it takes the slot only once that run has ended in
the same sense, so the sequence keeps its order whichever of its sensors pokes first."""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rmqchaos.machine import paths
from rmqchaos.machine.procs import now_ms
from rmqchaos.run.rundir import RunDir

STALE_S = 1800.0  # a run that took the slot and then never started (its DAG run was cancelled)


def _lease() -> Path:
    return paths.state_home() / "cluster.slot"


@contextmanager
def _locked() -> Iterator[None]:
    _lease().parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(_lease()) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def holder() -> dict | None:
    try:
        v = json.loads(_lease().read_text())
        return v if isinstance(v, dict) and isinstance(v.get("run"), str) else None
    except (OSError, ValueError):
        return None


def _stale(h: dict) -> bool:
    d = Path(h["run"])
    if not (d / "state.json").is_file():
        return True
    run = RunDir.open(d)
    stages = run.stages()
    if (stages.get("down") or {}).get("status") not in (None, "running"):
        return True
    if run.is_registered() or any(rec.get("status") == "running" for rec in stages.values()):
        return False  # its cluster may be up, or a stage of it is at work
    # it started and nothing of it runs now (e.g. `up` failed and cleaned up); or it never started
    return bool(stages) or now_ms() - int(h.get("since_ms", 0)) > STALE_S * 1000


def acquire(run: RunDir) -> bool:
    """Take the slot for `run` if it is free (or already `run`'s) and the run it comes after has
    ended. False: another run holds it, or `run`'s turn has not come."""
    me = str(run.path)
    st = run.state()
    if st.get("after") and not _stale({"run": st["after"], "since_ms": st.get("created_ms", 0)}):
        return False
    with _locked():
        h = holder()
        if h is not None and h["run"] != me and not _stale(h):
            return False
        if h is None or h["run"] != me:
            tmp = _lease().with_suffix(".tmp")
            tmp.write_text(json.dumps({"run": me, "since_ms": now_ms()}))
            os.replace(tmp, _lease())
        return True


def release(run: RunDir) -> None:
    with _locked():
        h = holder()
        if h is not None and h["run"] == str(run.path):
            _lease().unlink(missing_ok=True)
