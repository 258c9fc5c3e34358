"""A node of the local backend: one JVM in its own cgroup, started, signalled, paused (freezer),
throttled and stopped by its recorded pid and start time."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from cluster.substrate import clock, powerfs
from cluster.node import Node, NodeMemory
from cluster.plan import logconf
from cluster.plan import seed as seed_topics
from cluster.plan.jvm import find_java, jcmd, jvm_command
from cluster.local.cgroups import Cgroup
from cluster.substrate.powerfs import PowerFS
from cluster.plan.nodes import (NODE_SYSTEM_PROPERTIES, NodePlan, jvm_options, main_args, port_in_use, proxy_config,
                                render_config)
from cluster.plan.rmqlog import log_dir
from rmqchaos.machine import paths
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcRecord, alive, now_ms, record_spawn, send, spawn, stop, wait_gone
from rmqchaos.progress import say
from rmqchaos.machine.wait import poll_until

#: a node's JVM system properties set by a fault for its next starts (LocalNode.set_system_properties)
OVERRIDES = "jvm-overrides.json"

if TYPE_CHECKING:
    from cluster.local.cluster import LocalCluster


class CgroupMemory(NodeMemory):
    def __init__(self, cg: Cgroup) -> None:
        self.cg = cg

    def usage(self) -> int | None:
        return self.cg.memory_usage()

    def page_cache(self) -> int:
        return self.cg.file_cache()

    def oom_kills(self) -> int:
        return self.cg.oom_kills()

    def cap(self, page_cache: int | None = None) -> int:
        if not self.cg.exists():
            raise UserError(f"cgroup {self.cg.rel} does not exist", "the local backend creates one per node")
        return self.cg.cap_memory(page_cache=page_cache)

    def clear_limit(self) -> None:
        self.cg.clear_memory_limit()


class LocalNode(Node):
    def __init__(self, cluster: "LocalCluster", plan: NodePlan) -> None:
        self.c = cluster
        self.plan = plan
        self.name = plan.name
        self.role = plan.role
        self.dir = cluster.run.node_dir(plan.name)
        self.cgroup = Cgroup(cluster._cgroup_rel(plan.name))

    @property
    def record(self) -> ProcRecord | None:
        return self.c.run.processes.latest(self.name)

    @property
    def pid(self) -> int | None:
        r = self.record
        return r.pid if r and alive(r.pid, r.starttime) else None

    @property
    def memory(self) -> NodeMemory:
        return CgroupMemory(self.cgroup)

    @property
    def log_file(self) -> Path:
        main = {"namesrv": "namesrv.log", "proxy": "proxy.log", "controller": "controller.log"}.get(self.role, "broker.log")
        return log_dir(self.dir.parent, self.name) / main

    @property
    def stdout_file(self) -> Path:
        return self.dir / "stdout.log"

    # ------------------------------------------------------------ the store
    @property
    def store_path(self) -> Path:
        """Where the node keeps its store: `store`, or on the powerfs layer its mount `store.fs`, which
        shows `store` (so whatever reads a store after `down` finds it where a plain node's is)."""
        return self.dir / ("store.fs" if self.plan.powerfs else "store")

    def layer(self, mount: bool = True) -> PowerFS | None:
        """The node's powerfs mount, mounted if it is not and `mount` (None: a plain directory, or not
        mounted now)."""
        if not self.plan.powerfs:
            return None
        real, mp, sock = self.dir / "store", (self.dir / "store.fs").resolve(), self.dir / "powerfs.sock"
        name = f"powerfs-{self.name}"
        if any(m.mount_point == mp for m in powerfs.mounts()):
            return PowerFS.attach(real, mp, sock, self.c.run.processes, name=name)
        if not mount:
            return None
        real.mkdir(parents=True, exist_ok=True)
        return PowerFS.mount(real, mp, sock, self.c.run.processes, name=name, log_file=self.dir / "powerfs.log",
                             expire_s=self.plan.powerfs_expire_s)

    # ------------------------------------------------------------ start
    def command(self, java: str, home: Path) -> list[str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        name, text = render_config(self.plan, str(self.store_path))
        conf = self.dir / name
        conf.write_text(text)
        proxy_conf = None
        if (pc := proxy_config(self.plan)) is not None:
            proxy_conf = self.dir / pc[0]
            proxy_conf.write_text(pc[1])
        acl = self.dir / "conf" / "plain_acl.yml"
        if self.plan.serves_grpc and not acl.exists():
            # a proxy up to 5.3.x (a donor's too) loads the plain ACL validator at start and stops when its
            # file is missing; an empty one: the brokers here run without ACL
            acl.parent.mkdir(exist_ok=True)
            acl.write_text("globalWhiteRemoteAddresses: []\naccounts: []\n")
        seed = self.plan.is_broker and self.c.scenario.cluster.broker(self.plan.broker_name or "").seed_topics
        if seed and (n := seed_topics.write(self.dir / "store", seed, self.c.scenario.cluster.rocketmq_version)):
            say(f"{self.name}: {n:,} %RETRY% topics seeded into its topic table")
        if self.plan.role == "namesrv" or self.plan.is_broker:  # a 4.x server's logging setup (5.x: its jars')
            logconf.write(self.dir, self.c.scenario.cluster.rocketmq_version,
                          "namesrv" if self.plan.role == "namesrv" else "broker")
        j = self.plan.jvm
        opts = jvm_options(self.plan, str(self.dir / "logs" / "gc.log"))
        overrides = self.dir / OVERRIDES
        main, args, props = main_args(self.plan, str(conf), self.c.namesrv_addr,
                                      None if proxy_conf is None else str(proxy_conf))
        return jvm_command(main, args, cp=f"{home / 'lib'}/*", heap_mb=j.heap_mb, java=java, options=opts,
                           version=self.c.scenario.cluster.dist,
                           user_home=self.dir, rocketmq_home=self.dir,
                           system_properties={**NODE_SYSTEM_PROPERTIES, **j.system_properties, **props,
                                              **(json.loads(overrides.read_text()) if overrides.exists() else {})})

    def set_system_properties(self, props: Mapping[str, str]) -> None:
        """JVM system properties for this node's next starts (a restart fault's, e.g. namesrv's frame
        raised as incident 002's operators did), over the scenario's; kept in the node's directory."""
        f = self.dir / OVERRIDES
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({**(json.loads(f.read_text()) if f.exists() else {}), **props}, sort_keys=True))

    def start(self) -> None:
        if self.running():
            raise UserError(f"{self.name} is already running (pid {self.pid})", "stop it first")
        java = find_java()[0]
        home = rocketmq_dist.rocketmq_home(self.c.scenario.cluster.dist)
        shim = paths.loopback_shim()
        if not self.c.run.is_registered():
            self.c.run.register()  # a restart of a cluster that is down: `down --all` must find it
        if not self.cgroup.exists():
            self.cgroup.create()
            self.c.run.processes.record_cgroup(self.name, self.cgroup.rel)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS"))}
        # the shim binds the node's listeners and outgoing connections to its own address
        env.update({"ROCKETMQ_HOME": str(self.dir), "LD_PRELOAD": str(shim), "RMQCHAOS_NODE_ADDR": self.plan.host})
        cmd = self.command(java, home)  # makes the node's directory
        if self.plan.faketime:  # a clock of its own, at the offset its control file says (kept across restarts)
            env.update(clock.env(self.dir / clock.CONTROL, self.plan.faketime_monotonic))
            env["LD_PRELOAD"] = f"{shim}:{clock.lib()}"
        self.layer()
        proc = spawn(cmd, cwd=self.dir, env=env, log_file=self.stdout_file, join=self.cgroup.procs_files(),
                     new_session=True)
        record_spawn(self.c.run.processes, self.name, proc, cmd, cgroup=self.cgroup.rel, ports=self.plan.ports)

    def wait_port(self, port: int | None = None) -> None:
        """Until the node accepts connections on `port` (its main port by default)."""
        port = self.plan.ports[0] if port is None else port

        def accepts() -> bool:
            try:
                socket.create_connection((self.plan.host, port), timeout=1).close()
                return True
            except OSError:
                return False
        poll_until(accepts, self.c._ready_timeout(), f"port {port}", interval=0.2,
                   check=lambda: self.c._check_alive([self.name], f"port {port}"),
                   error=lambda: self.c._fail(self.name, f"port {port} to accept connections"))

    # ------------------------------------------------------------ faults
    def kill(self, sig: int = signal.SIGKILL) -> None:
        r = self.record
        if r is None or not alive(r.pid, r.starttime):
            raise UserError(f"{self.name} is not running", "start or restart it first")
        send(r.pid, r.starttime, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and self.cgroup.frozen():
            # A frozen task acts on a signal only once thawed; signalling first means a SIGKILLed
            # broker runs no code of its own after the thaw (it answers nothing more).
            self.cgroup.freeze(False)
        if sig == signal.SIGKILL:
            wait_gone([(r.pid, r.starttime)], 10)
            self.c.run.processes.record_exit(self.name, r.pid, "SIGKILL")
            self.wait_ports_closed()

    def wait_ports_closed(self) -> None:
        """After a SIGKILL: reaped is not yet closed. The kernel may release the listeners a moment
        later, and a client connecting in between is accepted and then reset. Return once they are gone."""
        poll_until(lambda: not any(port_in_use(p, self.plan.host) for p in self.plan.ports), 5, f"{self.name}'s ports",
                   interval=0.02, raise_on_timeout=False)

    def pause(self) -> None:
        if not self.running():
            raise UserError(f"{self.name} is not running", "cannot pause it")
        self.cgroup.freeze(True)

    def resume(self) -> None:
        self.cgroup.freeze(False)

    def paused(self) -> bool:
        return self.cgroup.frozen()

    def exec(self, cmd: Sequence[str]) -> subprocess.Popen:
        # Joins only the memory controller: the helper's charges count against the node's limit,
        # while freezer/blkio stay the node's own.
        p = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.cgroup.join_memory(p.pid)
        except BaseException:
            p.kill()
            p.wait()
            raise
        return p

    def throttle_io(self, majmin: str, limits: dict[str, int]) -> dict[str, int]:
        if not self.cgroup.exists():
            raise UserError(f"cgroup {self.cgroup.rel} does not exist", "the local backend creates one per node")
        self.cgroup.throttle_io(majmin, limits)
        return self.cgroup.io_throttle(majmin)

    def io_caps(self, majmin: str) -> dict[str, int]:
        return self.cgroup.io_throttle(majmin) if self.cgroup.exists() else {}

    def make_oom_victim(self) -> None:
        pid = self.pid
        if pid is None:
            raise UserError(f"{self.name} is not running", "cannot make it the OOM victim")
        Path(f"/proc/{pid}/oom_score_adj").write_text("1000")

    def set_clock(self, offset_s: float, rate: float | None = None) -> str:
        if not self.plan.faketime:
            raise UserError(f"{self.name} was not started under libfaketime, so its clock cannot move",
                            f"add {self.name} to cluster.faketime")
        return clock.write(self.dir / clock.CONTROL, offset_s, rate)

    def clock_now(self) -> tuple[float, float] | None:
        pid = self.pid
        return None if pid is None else clock.node_time(jcmd(), pid)

    def uptime(self) -> tuple[float, float] | None:
        pid = self.pid
        return None if pid is None else clock.uptime(jcmd(), pid)

    def wait_exit(self, pid: int, timeout: float) -> bool:
        r = self.record
        return wait_gone([(pid, r.starttime if r and r.pid == pid else None)], timeout)

    def mark_exited(self, pid: int, how: str) -> None:
        self.c.run.processes.record_exit(self.name, pid, how)

    def stop(self, grace: float | None = None) -> str:
        r = self.record
        if r is None:
            return "not-started"
        if self.cgroup.frozen():
            self.cgroup.freeze(False)
        how = stop(r.pid, r.starttime, self.c.scenario.cluster.stop_timeout if grace is None else grace)
        if how != "already-exited":
            self.c.run.processes.record_exit(self.name, r.pid, how)
        return how

    def restart(self) -> None:
        t0 = now_ms()
        if self.plan.is_broker and self.c.registered() is None:
            raise UserError(f"cannot restart {self.name}: namesrv {self.c.namesrv_addr} does not answer",
                            "bring the cluster up first (rmqchaos cluster up) or restart namesrv")
        self.stop()
        if self.plan.is_broker:
            self._wait_dropped()
        say(f"restarting {self.name}")
        self.start()
        if self.plan.is_broker:
            self.c.wait_registered([self.name])
        elif self.role == "namesrv":
            self.c._wait_namesrv([self.name])
        else:
            self.wait_port()
        self.c.run.event("restart", self.name, t0, now_ms(), "ok", pid=self.pid)

    def _wait_dropped(self, timeout: float = 10.0) -> None:
        """Wait until namesrv has dropped this (stopped) broker, which it does when the connection
        closes: otherwise the restart's registration check could pass on the dead process's entry.
        Bounded: a namesrv that keeps the entry longer only costs the check its precision."""
        def dropped() -> bool:
            reg = self.c.registered()
            return reg is not None and not self.plan.listed_in(reg)
        poll_until(dropped, timeout, "namesrv to drop it", interval=0.1, raise_on_timeout=False)
