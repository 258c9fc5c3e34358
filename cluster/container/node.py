"""A node of the `docker` backend: the local backend's node in a container (its JVM under tini, its
memory cgroup read as `local` reads one, its limit changed through the Docker API), and a noise
program as a container beside it. What a run started is labelled on its containers (LABEL_*)."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.local.cgroups import Cgroup
from cluster.local.node import CgroupMemory, LocalNode
from cluster.node import Neighbour, NodeMemory
from cluster.plan.compose import image_tag, rocketmq_home
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import send, starttime, wait_gone
from rmqchaos.machine.wait import poll_until

if TYPE_CHECKING:
    from cluster.container.cluster import DockerCluster

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
