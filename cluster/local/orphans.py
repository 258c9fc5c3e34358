"""Last-resort cleanup for a registered run whose run directory was deleted while its cluster ran:
its cgroups (named after the run id) still hold its processes, which are ours to end."""
from __future__ import annotations

import signal

from cluster.local import cgroups
from cluster.local.cgroups import Cgroup
from rmqchaos.machine.procs import send, wait_gone
from rmqchaos.run.rundir import lost_run_ids, registry_dir


def _node_cgroups(run_id: str) -> list[Cgroup]:
    """The run's per-node cgroups (`rmqchaos/<run id>/<node>`), in whichever hierarchy holds them."""
    nodes: set[str] = set()
    for d in Cgroup(f"{cgroups.PREFIX}/{run_id}").dirs():
        if d.is_dir():
            nodes |= {p.name for p in d.iterdir() if p.is_dir()}
    return [Cgroup(f"{cgroups.PREFIX}/{run_id}/{node}") for node in sorted(nodes)]


def has_processes(run_id: str) -> bool:
    """Whether any process is left in the run's cgroups (whichever RMQCHAOS_HOME registered it)."""
    return any(cg.pids() for cg in _node_cgroups(run_id.split(":")[0]))


def reap_lost_runs() -> list[str]:
    done: list[str] = []
    for run_id in lost_run_ids():
        for cg in _node_cgroups(run_id):
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
