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
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.node import Neighbour, NodeMemory, NodeStatus
from cluster.plan.compose import container_plans, image_tag, rocketmq_home
from cluster.container import engine, image
from cluster.local.cluster import LocalCluster, reap
from cluster.local.node import CgroupMemory, LocalNode
from cluster.local.cgroups import Cgroup
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import send, starttime, wait_gone
from rmqchaos.run.rundir import RunDir
from rmqchaos.machine.wait import poll_until

LABEL_RUN, LABEL_DIR, LABEL_NODE = "rmqchaos.run_id", "rmqchaos.run_dir", "rmqchaos.node"


def _java_pid(init_pid: int) -> int | None:
    """The JVM under the container's init (tini): the host pid faults and evidence use."""
    try:
        kids = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def _cgroup_rel(pid: int) -> str | None:
    """A process's cgroup path (the memory controller's on v1, the unified one on v2), without the leading /."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for ln in lines:
        _, ctrls, path = ln.split(":", 2)
        if "memory" in ctrls.split(","):
            return path.lstrip("/") or None
        if ctrls == "":
            unified = path.lstrip("/") or None
    return unified


class ContainerMemory(CgroupMemory):
    """The container's memory cgroup for reading (as `local`); its limit changed through the Docker API."""

    def __init__(self, node: "DockerNode") -> None:
        super().__init__(node.cgroup)
        self.node = node
        self._first: int | None = None
        self._last = 0

    def oom_kills(self) -> int:
        """The cgroup's counter while it exists; a container that stopped took its cgroup with it, so
        then the engine's OOMKilled flag says whether one more kill ended it (a fault's evidence reads
        this before and after)."""
        if self.cg.exists():
            self._last = self.cg.oom_kills()
            self._first = self._last if self._first is None else self._first
            return self._last
        first = self._first or 0  # never read while it existed: no kill counted yet
        return max(self._last, first + int(bool(self.node._state().get("OOMKilled"))))

    def cap(self, page_cache: int | None = None) -> int:
        c = self.node.container()
        if c is None:
            raise UserError(f"{self.node.name} has no container", "start the cluster first")
        import docker
        for _ in range(20):
            usage = self.usage()
            if usage is None:
                raise UserError(f"{self.node.name}: no memory cgroup for its container", "is it running?")
            limit = (usage - self.page_cache() + page_cache) if page_cache is not None else usage
            limit = (limit + 4095) // 4096 * 4096  # just above the usage, on a page
            try:  # both, or the engine refuses: memory+swap must stay >= memory
                c.update(mem_limit=limit, memswap_limit=limit)
                return limit
            except docker.errors.APIError as e:  # usage grew past it and could not be reclaimed: re-read
                last = e
        raise UserError(f"{self.node.name}: the engine refused every memory limit near its usage: {last}",
                        "see the engine's log")

    def clear_limit(self) -> None:
        """Back to the container's own limit, which a restart then starts with (the engine keeps an
        update in the container's config). A container whose JVM was just killed may be between
        running and stopped, where the engine refuses; once stopped, the update is config only."""
        import docker
        c = self.node.container()
        if c is None:
            return
        mb = self.node.mem_limit_mb
        try:
            c.update(mem_limit=f"{mb}m", memswap_limit=f"{mb}m")
        except docker.errors.APIError:
            poll_until(lambda: not self.node._state().get("Running"), 15, f"{self.node.name}'s container to stop",
                       interval=0.05)
            c.update(mem_limit=f"{mb}m", memswap_limit=f"{mb}m")


class DockerNode(LocalNode):
    def __init__(self, cluster: "DockerCluster", plan: Any) -> None:
        super().__init__(cluster, plan)
        self.c: DockerCluster = cluster
        self.container_name = f"rmqchaos-{cluster.run.run_id}-{plan.name}"
        self.mem_limit_mb = cluster.container_plans[plan.name].mem_limit_mb

    def container(self) -> Any | None:
        import docker
        try:
            return self.c.client.containers.get(self.container_name)
        except docker.errors.NotFound:
            return None

    def _state(self) -> dict[str, Any]:
        c = self.container()
        return c.attrs.get("State", {}) if c is not None else {}

    @property
    def cgroup(self) -> Cgroup:  # type: ignore[override]
        """The container's cgroup as the kernel names it for its init (cgroupfs driver: docker/<id>;
        systemd driver: system.slice/docker-<id>.scope), read while it runs."""
        st = self._state()
        rel = _cgroup_rel(st["Pid"]) if st.get("Running") and st.get("Pid") else None
        c = self.container() if rel is None else None
        return Cgroup(rel or (f"docker/{c.id}" if c is not None else f"docker/none-{self.container_name}"))

    @cgroup.setter
    def cgroup(self, _: Cgroup) -> None:  # LocalNode.__init__ sets its own; a container has docker's
        pass

    def running(self) -> bool:  # the container's state: its JVM may not be forked yet (pid None)
        return bool(self._state().get("Running"))

    @property
    def pid(self) -> int | None:
        st = self._state()
        return _java_pid(st["Pid"]) if st.get("Running") and st.get("Pid") else None

    @property
    def memory(self) -> NodeMemory:
        return ContainerMemory(self)

    def start(self) -> None:
        if self.running():
            raise UserError(f"{self.name} is already running (pid {self.pid})", "stop it first")
        if not self.c.run.is_registered():
            self.c.run.register()
        c = self.container()
        if c is not None:  # a restart: the same container, on the same store
            c.start()
            return
        cmd = self.command("java", Path(rocketmq_home(self.c.scenario.cluster.rocketmq_version)))
        mb = self.mem_limit_mb
        # create + start rather than run(): run() pulls a missing image, and nothing is ever pulled here
        self.c.client.containers.create(
            image_tag(self.c.scenario.cluster.rocketmq_version), cmd, name=self.container_name, detach=True,
            network_mode="host", init=True, stop_signal="SIGTERM", mem_limit=f"{mb}m", memswap_limit=f"{mb}m",
            working_dir=str(self.dir), environment={"ROCKETMQ_HOME": str(self.dir), "RMQCHAOS_NODE_ADDR": self.plan.host},
            volumes={str(self.dir): {"bind": str(self.dir), "mode": "rw"}},
            labels={LABEL_RUN: self.c.run.run_id, LABEL_DIR: str(self.c.run.path), LABEL_NODE: self.name}).start()

    def save_logs(self) -> None:
        """The container's stdout/stderr into the node's stdout.log (where `local` writes it)."""
        c = self.container()
        if c is not None:
            self.stdout_file.write_bytes(c.logs(stdout=True, stderr=True))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        c, pid = self.container(), self.pid
        if c is None or pid is None:
            raise UserError(f"{self.name} is not running", "start or restart it first")
        if sig == signal.SIGKILL:
            c.kill(signal="SIGKILL")  # tini, PID 1: the kernel ends everything in the container (paused too)
            wait_gone([(pid, None)], 10)
            self.wait_ports_closed()
        else:  # to the JVM itself, as `local` does (tini would take SIGSTOP/SIGCONT for itself)
            send(pid, starttime(pid), sig)

    def pause(self) -> None:
        c = self.container()
        if c is None or not self.running():
            raise UserError(f"{self.name} is not running", "cannot pause it")
        c.pause()

    def resume(self) -> None:
        c = self.container()
        if c is not None and self._state().get("Paused"):
            c.unpause()

    def paused(self) -> bool:
        return bool(self._state().get("Paused"))

    def wait_exit(self, pid: int, timeout: float) -> bool:
        return wait_gone([(pid, None)], timeout)

    def mark_exited(self, pid: int, how: str) -> None:
        pass  # the container's state is the record; `down` removes it whatever it holds

    def exit_evidence(self, pid: int) -> dict[str, object]:
        """The engine's verdict once the container has stopped (its init exits after the JVM): the
        OOMKilled flag is reset by the next start, so it is read here, before any restart."""
        st = poll_until(lambda: (s := self._state()) and not s.get("Running") and s, 15, f"{self.name}'s container "
                        "to stop", interval=0.05, raise_on_timeout=False) or self._state()
        return {"container": self.container_name, "oom_killed": bool(st.get("OOMKilled")),
                "exit_code": st.get("ExitCode")}

    def stop(self, grace: float | None = None) -> str:
        c = self.container()
        if c is None:
            return "not-started"
        st = c.attrs.get("State", {})
        if not st.get("Running"):
            self.save_logs()
            return "already-exited"
        if st.get("Paused"):
            c.unpause()
        t = self.c.scenario.cluster.stop_timeout if grace is None else grace
        c.stop(timeout=int(t))
        code = c.wait(timeout=t + 30).get("StatusCode")
        self.save_logs()
        return "killed" if code == 137 else "terminated"


class ContainerNeighbour(Neighbour):
    """A noise program as a container of the platform's image beside the nodes' containers: host
    network, its directory (inside the run directory, on the brokers' disk) bind-mounted at the same
    path, labelled with the run so `down` removes it if we die."""

    def __init__(self, container: Any, name: str, log_file: Path) -> None:
        self.c, self.name, self.log_file = container, name, log_file

    def running(self) -> bool:
        self.c.reload()
        return bool(self.c.attrs.get("State", {}).get("Running"))

    def end(self, sig: int, grace: float) -> str:
        import requests
        how = "already-exited"
        if self.running():
            self.c.kill(signal=signal.Signals(sig).name)  # tini, its init, forwards it to the program
            try:
                self.c.wait(timeout=grace)
                how = "terminated"
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):  # still running
                self.c.kill()
                self.c.wait(timeout=30)
                how = "killed"
        self.log_file.write_bytes(self.c.logs(stdout=True, stderr=True))
        self.c.remove(force=True)
        return how


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
        for group in ([c for c in conts if c.labels.get(LABEL_NODE) != "namesrv"],
                      [c for c in conts if c.labels.get(LABEL_NODE) == "namesrv"]):
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

