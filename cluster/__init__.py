"""Cluster backends: stand up, inspect, break and tear down a real RocketMQ cluster.

`get_backend(run)` is the only way in: it picks the implementation the run's scenario names
(`cluster.backend`). Everything above this package sees only `cluster.backend`'s interface.
"""
from __future__ import annotations

from cluster.backend import ClusterBackend
from cluster.node import Node, NodeStatus
from rmqchaos.errors import UserError
from rmqchaos.rundir import RunDir

__all__ = ["ClusterBackend", "Node", "NodeStatus", "get_backend", "reap_lost_runs"]


def get_backend(run: RunDir) -> ClusterBackend:
    """The cluster of `run`: its own, or, for a run attached to another run's cluster (state.json
    `cluster_run`: a load against a cluster that `cluster up` or a test fixture started), that one."""
    attached = run.state().get("cluster_run")
    if attached:
        run = RunDir.open(attached)
    kind = run.scenario().cluster.backend
    if kind == "local":
        from cluster.local import LocalCluster
        return LocalCluster(run)
    if kind == "docker":
        from cluster.container import DockerCluster
        return DockerCluster(run)
    raise UserError(f"cluster backend {kind!r} is not available", "use cluster.backend: local or docker")


def reap_lost_runs() -> list[str]:
    """End what registered runs whose run directory was deleted left running (every backend)."""
    from cluster import netrules, powerfs
    from cluster.container import reap_lost_containers
    from cluster.local.orphans import reap_lost_runs as local_lost
    from rmqchaos.rundir import lost_run_ids, registry_dir
    done = reap_lost_containers(lost_run_ids()) + local_lost()  # containers first: local_lost forgets the ids
    done += powerfs.reap_lost()  # mounts whose server died or whose run directory is gone
    from cluster.local.orphans import has_processes
    # a chain stays while its run is registered here or still has processes in its cgroups: a run of
    # another RMQCHAOS_HOME (another checkout, a concurrent test) is not ours to reap
    return done + netrules.reap_unregistered(lambda run_id: (registry_dir() / run_id).exists() or has_processes(run_id))
