"""Last-resort cleanup for a registered run whose run directory was deleted while its cluster ran:
its cgroups (named after the run id) still hold its processes, which are ours to end."""
from __future__ import annotations

import signal

from cluster.local import cgroups
from cluster.local.cgroups import Cgroup
from rmqchaos.procs import send, wait_gone
from rmqchaos.rundir import lost_run_ids, registry_dir


def has_processes(run_id: str) -> bool:
    """Whether any process is left in the run's cgroups (whichever RMQCHAOS_HOME registered it)."""
    for d in Cgroup(f"{cgroups.PREFIX}/{run_id.split(':')[0]}").dirs():
        if d.is_dir() and any(Cgroup(f"{cgroups.PREFIX}/{run_id.split(':')[0]}/{n.name}").pids()
                              for n in d.iterdir() if n.is_dir()):
            return True
    return False


def reap_lost_runs() -> list[str]:
    done: list[str] = []
    for run_id in lost_run_ids():
        nodes: set[str] = set()
        for d in Cgroup(f"{cgroups.PREFIX}/{run_id}").dirs():
            if d.is_dir():
                nodes |= {p.name for p in d.iterdir() if p.is_dir()}
        for node in sorted(nodes):
            cg = Cgroup(f"{cgroups.PREFIX}/{run_id}/{node}")
            if cg.frozen():
                cg.freeze(False)
            pids = cg.pids()
            for pid in pids:
                send(pid, None, signal.SIGKILL)
            wait_gone([(p, None) for p in pids], 10)
            cg.remove()
            done.append(f"run {run_id} (run directory gone): killed {len(pids)} process(es) in cgroup {cg.rel}")
        cgroups.remove_empty_parents(f"{cgroups.PREFIX}/{run_id}/x")
        (registry_dir() / run_id).unlink(missing_ok=True)
    return done
