"""Which backend a run's cluster is on: `get_backend(run)`, the only way in, picks the implementation
the run's scenario names (`cluster.backend`); `reap_lost_runs` ends what every backend left running
for runs whose run directory is gone."""
from __future__ import annotations

from cluster.backend import ClusterBackend
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir

def get_backend(run: RunDir) -> ClusterBackend:
    """The cluster of `run`: its own, or, for a run attached to another run's cluster (state.json
    `cluster_run`: a load against a cluster that `cluster up` or a test fixture started), that one."""
    attached = run.state().get("cluster_run")
    if attached:
        run = RunDir.open(attached)
    kind = run.scenario().cluster.backend
    if kind == "local":
        from cluster.local.cluster import LocalCluster
        return LocalCluster(run)
    if kind == "docker":
        from cluster.container.cluster import DockerCluster
        return DockerCluster(run)
    raise UserError(f"cluster backend {kind!r} is not available", "use cluster.backend: local or docker")


def reap_lost_runs() -> list[str]:
    """End what registered runs whose run directory was deleted left running (every backend)."""
    from cluster.net import netrules
    from cluster.substrate import powerfs
    from cluster.container.cluster import reap_lost_containers
    from cluster.local.orphans import reap_lost_runs as local_lost
    from rmqchaos.run.rundir import lost_run_ids, registry_dir
    done = reap_lost_containers(lost_run_ids()) + local_lost()  # containers first: local_lost forgets the ids
    done += powerfs.reap_lost()  # mounts whose server died or whose run directory is gone
    from cluster.local.orphans import has_processes
    # a chain stays while its run is registered here or still has processes in its cgroups: a run of
    # another RMQCHAOS_HOME (another checkout, a concurrent test) is not ours to reap
    return done + netrules.reap_unregistered(lambda run_id: (registry_dir() / run_id).exists() or has_processes(run_id))
