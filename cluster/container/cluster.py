"""The `docker` backend: the same nodes as `local`, each in a container of the image `rmqchaos image
build` makes, driven through the Docker API (docker SDK) of the engine `engine.client()` reaches.

A container runs exactly the JVM command line the local backend builds (one builder), with the
node's run directory bind-mounted at the same path: configs, stores, RocketMQ's logs and GC logs
land where every other layer (store checks, broker-log evidence, status) already reads them. Host
networking only (listeners on 127.0.0.1: bindAddress, and the image's LD_PRELOAD shim for the HA
acceptor), `init` (tini forwards SIGTERM so the JVM's shutdown hooks run), memory limit = memory+swap
limit. Faults act on the container: kill/pause/unpause/restart through the API, an OOM kill by
lowering the running container's limit (`update`) until the kernel kills it, block I/O caps and
helpers through its cgroups (cgroup v1, cgroupfs driver: /sys/fs/cgroup/<ctrl>/docker/<id>).

Client-side processes (load, consumers, tools, the noise's Redis driver) stay host processes, as
with `local`; the disk-noise programs (redis-server, fio) are containers of the same image
(`spawn_neighbour`) writing under the run directory, on the brokers' disk. What the run
started is recorded on the containers themselves (labels `rmqchaos.run_id`, `rmqchaos.run_dir`):
`down` of any backend object on the run directory, or `reap_lost_runs`, finds and removes them.
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.container import engine, image
from cluster.container.node import LABEL_DIR, LABEL_NODE, LABEL_RUN, ContainerNeighbour, DockerNode
from cluster.local.cluster import LocalCluster, reap
from cluster.node import Neighbour, NodeStatus
from cluster.plan.compose import container_plans, image_tag
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir


class DockerCluster(LocalCluster):
    def __init__(self, run: RunDir, scenario: Any = None) -> None:
        super().__init__(run, scenario)
        self.container_plans = {c.node.name: c for c in container_plans(self.scenario)}
        self._client: Any | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = engine.client()
        return self._client

    def _fail(self, node: str, waited_for: str) -> Any:
        self.node(node).save_logs()  # the container's stdout is where a JVM that cannot start says why
        return super()._fail(node, waited_for)

    def _check_alive(self, names: list[str], waited_for: str) -> None:
        for n in names:
            if not self.node(n).running():
                self.node(n).save_logs()
        super()._check_alive(names, waited_for)

    def node(self, name: str) -> DockerNode:
        if name not in self.plans:
            raise UserError(f"no node named {name!r} in this cluster", f"nodes: {', '.join(self.plans)}")
        return DockerNode(self, self.plans[name])

    def _preflight(self) -> None:
        import docker
        _ = self.client  # first: with no engine, that is the one thing to say
        super()._preflight()  # java for the clients, ports free, cgroups mounted
        tag = image_tag(self.scenario.cluster.rocketmq_version)
        try:
            image.check_current(self.client.images.get(tag))
        except docker.errors.ImageNotFound:
            raise UserError(f"image {tag} is not in the engine at {engine.docker_host()}",
                            "build it offline with `rmqchaos image build` (nothing is pulled)") from None
        left = self.containers()
        if left:
            raise UserError(f"containers of this run already exist ({', '.join(c.name for c in left)})",
                            f"rmqchaos cluster down --run-dir {self.run.path}")

    def spawn_neighbour(self, name: str, cmd: Any, *, cwd: Path, log_file: Path) -> Neighbour:
        cwd.mkdir(parents=True, exist_ok=True)
        c = self.client.containers.create(
            image_tag(self.scenario.cluster.rocketmq_version), list(cmd), detach=True,
            name=f"rmqchaos-{self.run.run_id}-{re.sub(r'[^A-Za-z0-9_.-]', '-', name)}", network_mode="host",
            init=True, working_dir=str(cwd), volumes={str(cwd): {"bind": str(cwd), "mode": "rw"}},
            labels={LABEL_RUN: self.run.run_id, LABEL_DIR: str(self.run.path), LABEL_NODE: name})
        c.start()
        return ContainerNeighbour(c, name, log_file)

    def containers(self) -> list[Any]:
        return self.client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={self.run.run_id}"})

    def down(self, grace: float | None = None) -> list[str]:
        done: list[str] = []
        grace = self.scenario.cluster.stop_timeout if grace is None else grace
        try:
            _ = self.client
        except UserError as e:  # the clients are still ours to end; the run stays registered for a later down
            reap(self.run, grace=grace)
            self.run.register()
            raise UserError(f"cannot remove this run's containers: {e.message}", e.hint) from None
        conts = self.containers()
        final: dict[str, dict[str, object]] = {}

        def stop(c: Any) -> str:
            n = c.labels.get(LABEL_NODE, "")
            if n not in self.plans:  # a neighbour (noise) a fault did not get to end: nothing to keep
                c.remove(force=True)
                return f"removed container {c.name} ({n})"
            try:
                how = self.node(n).stop(grace)
                c.reload()
            except Exception as e:  # one container's trouble must not keep the others (or reap) from running
                how = f"stop failed: {e}; removed by force"
                c.remove(force=True)
                return f"removed container {c.name} ({how})"
            st = c.attrs.get("State", {})
            final[n] = {"container": c.name, "how": how, "exit_code": st.get("ExitCode"),
                        "oom_killed": st.get("OOMKilled"), "finished_at": st.get("FinishedAt"),
                        "memory_limit": c.attrs.get("HostConfig", {}).get("Memory")}
            c.remove(force=True)
            return f"removed container {c.name} ({how})"
        # brokers together (each takes its stop_timeout at worst), then namesrv: brokers unregister cleanly
        ns = set(self.scenario.cluster.namesrv.node_names())
        for group in ([c for c in conts if c.labels.get(LABEL_NODE) not in ns],
                      [c for c in conts if c.labels.get(LABEL_NODE) in ns]):
            with ThreadPoolExecutor(max_workers=max(1, len(group))) as pool:
                done += list(pool.map(stop, group))
        if final:  # what the engine said about each container's last life, for people and tests
            f = self.run.node_dir("namesrv").parent / "containers.json"
            f.write_text(json.dumps(final, indent=2, sort_keys=True) + "\n")
        return done + reap(self.run, grace=grace)

    def status(self) -> list[NodeStatus]:
        reg = self.registered()
        out = []
        for n in self.nodes():
            c = n.container()
            st = c.attrs.get("State", {}) if c is not None else {}
            state = "not-started" if c is None else ("paused" if st.get("Paused") else
                                                     "running" if st.get("Running") else "down")
            pid = n.pid
            out.append(NodeStatus(
                name=n.name, role=n.plan.role, state=state, pid=pid, ports=n.plan.ports, addr=n.plan.addr,
                registered=n.plan.listed_in(reg) if (n.plan.is_broker and reg is not None) else None,
                memory_bytes=n.cgroup.memory_usage() if pid else None, log_file=str(n.log_file),
                broker_name=n.plan.broker_name,
                extra={"container": n.container_name, "image": c.attrs.get("Config", {}).get("Image") if c else None,
                       "oom_killed": st.get("OOMKilled"), "exit_code": st.get("ExitCode"),
                       "store_dir": str(n.dir / "store") if n.plan.is_broker else None}))
        return out


def reap_lost_containers(run_ids: list[str]) -> list[str]:
    """Remove the containers of runs whose run directory was deleted (no engine: nothing to do)."""
    if not run_ids:
        return []
    try:
        client = engine.client()
    except UserError:
        return []
    done = []
    for rid in run_ids:
        for c in client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={rid}"}):
            c.remove(force=True)
            done.append(f"run {rid} (run directory gone): removed container {c.name}")
    return done

