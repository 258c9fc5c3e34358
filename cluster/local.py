"""The `local` backend: namesrv, brokers (and optionally slaves and the gRPC proxy) as JVMs on
this machine, started from the Maven-resolved jars, each in its own cgroup, listening on
127.0.0.1 only (bindAddress plus an LD_PRELOAD bind() shim for listeners RocketMQ does not let
us configure, such as the HA acceptor).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from cluster import cgroups
from cluster.backend import ClusterBackend, Node, NodeStatus
from cluster.cgroups import Cgroup
from cluster.java import find_java
from cluster.procs import ProcRecord, alive, now_ms, send, spawn, starttime, state_char, stop, wait_gone
from rmqchaos import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir
from rmqchaos.spec import Broker, Jvm, Scenario
from rmqclient.admin import AdminClient, RemotingError

HOST = "127.0.0.1"
READY_TOPIC = "RMQCHAOS_READY"
MAIN = {"namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
        "broker": "org.apache.rocketmq.broker.BrokerStartup",
        "proxy": "org.apache.rocketmq.proxy.ProxyStartup"}


@dataclass
class NodePlan:
    name: str
    role: str  # namesrv | master | slave | proxy
    ports: list[int]  # the main port first; every port the node listens on
    jvm: Jvm
    conf: dict[str, object]
    broker_name: str | None = None
    broker_id: int | None = None

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.ports[0]}"

    @property
    def is_broker(self) -> bool:
        return self.role in ("master", "slave")

    def listed_in(self, reg: dict[str, dict[int, str]]) -> bool:
        """Whether namesrv's registrations (`LocalCluster.registered()`) list this broker at its address."""
        return reg.get(self.broker_name or "", {}).get(self.broker_id or 0) == self.addr


class ClusterStartError(UserError):
    pass


def plan(s: Scenario) -> list[NodePlan]:
    c = s.cluster
    ns = NodePlan("namesrv", "namesrv", [c.namesrv.port], c.namesrv.jvm,
                  {"listenPort": c.namesrv.port, "bindAddress": HOST, **c.namesrv.config})
    nodes = [ns]
    for b in c.brokers:
        assert b.port is not None
        nodes.append(_broker_plan(s, b, b.name, b.port, 0))
        if b.slave is not None:
            assert b.slave.port is not None
            nodes.append(_broker_plan(s, b, f"{b.name}-s", b.slave.port, 1))
    if c.proxy.enabled:
        p = c.proxy
        nodes.append(NodePlan("proxy", "proxy", [p.grpc_port, p.remoting_port], p.jvm,
                              {"rocketMQClusterName": c.name, "namesrvAddr": f"{HOST}:{c.namesrv.port}",
                               "grpcServerPort": p.grpc_port, "remotingListenPort": p.remoting_port}))
    return nodes


def _broker_plan(s: Scenario, b: Broker, node: str, port: int, broker_id: int) -> NodePlan:
    c = s.cluster
    conf: dict[str, object] = {
        "brokerClusterName": c.name, "brokerName": b.name, "brokerId": broker_id,
        "listenPort": port, "haListenPort": port + 1,
        "namesrvAddr": f"{HOST}:{c.namesrv.port}",
        "brokerIP1": HOST, "brokerIP2": HOST, "bindAddress": HOST,
    }
    conf.update(c.broker_defaults.config)
    conf.update(b.config)
    if broker_id:
        conf["brokerRole"] = "SLAVE"
    return NodePlan(node, "slave" if broker_id else "master", [port, port - 2, port + 1],
                    b.jvm or c.broker_defaults.jvm, conf, b.name, broker_id)


def _props(conf: dict[str, object]) -> str:
    def v(x: object) -> str:
        return ("true" if x else "false") if isinstance(x, bool) else str(x)
    return "".join(f"{k}={v(x)}\n" for k, x in conf.items())


def port_in_use(port: int) -> bool:
    # SO_REUSEADDR as Netty sets it, so a socket in TIME_WAIT does not count as "in use".
    for host in (HOST, "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return True
    return False


_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d ")


def log_tail(node_dir: Path, lines: int = 10) -> str:
    """The last lines of a node's stdout, and the last records (not stack frames) of RocketMQ's own log."""
    out = []
    for f in [node_dir / "stdout.log", *sorted((node_dir / "logs" / "rocketmqlogs").glob("*.log"))]:
        if f.name not in ("stdout.log", "broker.log", "namesrv.log", "proxy.log") or not f.is_file():
            continue
        text = f.read_text(errors="replace").rstrip().splitlines()
        if f.name != "stdout.log":
            text = [t for t in text if _LOG_RECORD.match(t)]
        if text[-lines:]:
            out.append(f"--- tail of {f}")
            out += ["    " + t[:300] for t in text[-lines:]]
    return "\n".join(out)


class LocalCluster(ClusterBackend):
    def __init__(self, run: RunDir, scenario: Scenario | None = None) -> None:
        self.run = run
        self.scenario = scenario or run.scenario()
        self.plans = {p.name: p for p in plan(self.scenario)}

    # ------------------------------------------------------------ helpers
    @property
    def namesrv_addr(self) -> str:
        return self.plans["namesrv"].addr

    def admin(self, timeout: float = 3.0) -> AdminClient:
        return AdminClient(self.namesrv_addr, timeout)

    def cgroup_rel(self, node: str) -> str:
        return f"{cgroups.PREFIX}/{self.run.run_id}/{node}"

    def tools_cgroup(self) -> Cgroup:
        """Where client-side JVMs of this run (RocketMQ's tools, later consumers) run, so `down` reaps them."""
        cg = Cgroup(self.cgroup_rel("tools"))
        if not cg.exists():
            cg.create()
            self.run.processes.record_cgroup("tools", cg.rel)
        return cg

    def node(self, name: str) -> "LocalNode":
        if name not in self.plans:
            raise UserError(f"no node named {name!r} in this cluster", f"nodes: {', '.join(self.plans)}")
        return LocalNode(self, self.plans[name])

    def nodes(self) -> list["LocalNode"]:
        return [LocalNode(self, p) for p in self.plans.values()]

    # ------------------------------------------------------------ up
    def preflight(self) -> tuple[str, Path, Path]:
        java, _, _ = find_java()
        home = paths.rocketmq_home(self.scenario.cluster.rocketmq_version)
        shim = paths.loopback_shim()
        if cgroups.version() == 0:
            raise UserError("no cgroup hierarchy is mounted at /sys/fs/cgroup",
                            "mount cgroup v1 (memory, blkio, freezer) or v2; faults act through cgroups")
        for p in self.plans.values():
            for port in p.ports:
                if port_in_use(port):
                    raise UserError(f"port {port} ({p.name}) is already in use on {HOST}",
                                    f"stop what holds it (ss -ltnp 'sport = :{port}'; an earlier cluster: "
                                    f"rmqchaos cluster down --all) or choose other ports in the scenario")
        return java, home, shim

    def up(self) -> None:
        t0 = now_ms()
        java, home, shim = self.preflight()
        self.run.write_versions(self.scenario.cluster.rocketmq_version, find_java()[2])
        self.run.update_state(cluster="starting")
        self.run.register()
        try:
            say(f"starting namesrv on {self.namesrv_addr} (RocketMQ {self.scenario.cluster.rocketmq_version})")
            self.node("namesrv").start(java, home, shim)
            self._wait_namesrv()
            brokers = [n for n in self.nodes() if n.plan.is_broker]
            say(f"starting {len(brokers)} broker(s): {', '.join(n.name for n in brokers)}")
            for n in brokers:
                n.start(java, home, shim)
            self.wait_registered([n.name for n in brokers])
            self._wait_routable()
            if "proxy" in self.plans:
                say("starting proxy")
                self.node("proxy").start(java, home, shim)
                self.node("proxy").wait_port()
        except BaseException as e:
            self.run.event("cluster_up", "cluster", t0, now_ms(), "failed", error=str(e))
            say("cluster did not come up; cleaning up")
            self.down()
            self.run.update_state(cluster="failed")
            raise
        self.run.update_state(cluster="ready")
        self.run.event("cluster_up", "cluster", t0, now_ms(), "ok", nodes=list(self.plans))
        say(f"cluster ready in {(now_ms() - t0) / 1000:.1f}s: namesrv {self.namesrv_addr}, brokers "
            + ", ".join(f"{p.name}@{p.addr}" for p in self.plans.values() if p.is_broker))

    def _deadline(self) -> float:
        return time.monotonic() + self.scenario.cluster.ready_timeout

    def _fail(self, node: str, waited_for: str) -> ClusterStartError:
        return ClusterStartError(f"{node} did not become ready: {waited_for}",
                                 f"see its logs in {self.run.node_dir(node)}",
                                 detail=log_tail(self.run.node_dir(node)))

    def _check_alive(self, names: list[str], waited_for: str) -> None:
        for n in names:
            node = self.node(n)
            if not node.running():
                raise ClusterStartError(f"{n} exited while starting (waiting for {waited_for})",
                                        f"see its logs in {self.run.node_dir(n)}",
                                        detail=log_tail(self.run.node_dir(n)))

    def _wait_namesrv(self) -> None:
        deadline = self._deadline()
        while True:
            self._check_alive(["namesrv"], "its port to answer")
            try:
                self.admin(timeout=1).cluster_info()
                return
            except RemotingError:
                pass
            if time.monotonic() > deadline:
                raise self._fail("namesrv", f"an answer on {self.namesrv_addr} within "
                                            f"{self.scenario.cluster.ready_timeout:.0f}s")
            time.sleep(0.2)

    def registered(self) -> dict[str, dict[int, str]] | None:
        """brokerName -> {brokerId: addr} from namesrv, or None if namesrv does not answer."""
        try:
            return {b.name: b.addrs for b in self.admin(timeout=2).cluster_info()}
        except RemotingError:
            return None

    def wait_registered(self, names: list[str], deadline: float | None = None) -> None:
        deadline = deadline or self._deadline()
        pending = list(names)
        last_report = time.monotonic()
        while pending:
            self._check_alive(pending, "registration in namesrv")
            reg = self.registered() or {}
            pending = [n for n in pending if not self.plans[n].listed_in(reg)]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise self._fail(pending[0], f"registration in namesrv {self.namesrv_addr} within "
                                             f"{self.scenario.cluster.ready_timeout:.0f}s (never registered)")
            if time.monotonic() - last_report > 10:
                say(f"still waiting for {', '.join(pending)} to register in namesrv")
                last_report = time.monotonic()
            time.sleep(0.25)

    def _wait_routable(self) -> None:
        """A test topic must route to every broker group: proves each master serves admin requests
        and that namesrv has its topic table."""
        deadline = self._deadline()
        masters = [p for p in self.plans.values() if p.role == "master"]
        created: set[str] = set()
        while True:
            for p in masters:
                if p.name not in created:
                    try:
                        self.admin(timeout=2).create_topic(p.addr, READY_TOPIC, queues=1)
                        created.add(p.name)
                    except RemotingError:
                        pass
            try:
                route = self.admin(timeout=2).topic_route(READY_TOPIC) or {}
            except RemotingError:
                route = {}
            groups = {q["brokerName"] for q in route.get("queueDatas", [])}
            missing = [p.name for p in masters if p.broker_name not in groups]
            if not missing:
                return
            self._check_alive(missing, f"topic {READY_TOPIC} to route to it")
            if time.monotonic() > deadline:
                raise self._fail(missing[0], f"topic {READY_TOPIC} to route to it within "
                                             f"{self.scenario.cluster.ready_timeout:.0f}s")
            time.sleep(0.25)

    # ------------------------------------------------------------ down
    def down(self) -> list[str]:
        return reap(self.run, grace=self.scenario.cluster.stop_timeout)

    # ------------------------------------------------------------ status
    def status(self) -> list[NodeStatus]:
        reg = self.registered()
        out = []
        for n in self.nodes():
            rec = self.run.processes.latest(n.name)
            running = rec is not None and alive(rec.pid, rec.starttime)
            cg = n.cgroup
            state = "not-started" if rec is None else ("down" if not running else
                                                       ("paused" if (cg and cg.frozen()) else "running"))
            registered = None
            if n.plan.is_broker and reg is not None:
                registered = n.plan.listed_in(reg)
            out.append(NodeStatus(
                name=n.name, role=n.plan.role, state=state, pid=rec.pid if running and rec else None,
                ports=n.plan.ports, addr=n.plan.addr, registered=registered,
                cgroup=cg.rel if cg and cg.exists() else None,
                memory_bytes=cg.memory_usage() if cg and running else None,
                store_dir=str(n.store_dir) if n.store_dir else None, log_file=str(n.log_file),
                broker_name=n.plan.broker_name))
        return out


class LocalNode(Node):
    def __init__(self, cluster: LocalCluster, plan: NodePlan) -> None:
        self.c = cluster
        self.plan = plan
        self.name = plan.name
        self.role = plan.role
        self.dir = cluster.run.node_dir(plan.name)

    @property
    def record(self) -> ProcRecord | None:
        return self.c.run.processes.latest(self.name)

    @property
    def pid(self) -> int | None:
        r = self.record
        return r.pid if r and alive(r.pid, r.starttime) else None

    def running(self) -> bool:
        return self.pid is not None

    @property
    def cgroup(self) -> Cgroup | None:
        return Cgroup(self.c.cgroup_rel(self.name))

    @property
    def store_dir(self) -> Path | None:
        return self.dir / "store" if self.plan.is_broker else None

    @property
    def log_file(self) -> Path:
        main = {"namesrv": "namesrv.log", "proxy": "proxy.log"}.get(self.role, "broker.log")
        return self.dir / "logs" / "rocketmqlogs" / main

    # ------------------------------------------------------------ start
    def _write_conf(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.role == "proxy":
            f = self.dir / "rmq-proxy.json"
            f.write_text(json.dumps(self.plan.conf, indent=2) + "\n")
            return f
        conf = dict(self.plan.conf)
        if self.store_dir:
            conf.setdefault("storePathRootDir", str(self.store_dir))
            conf.setdefault("storePathCommitLog", str(self.store_dir / "commitlog"))
        f = self.dir / ("namesrv.properties" if self.role == "namesrv" else "broker.conf")
        f.write_text(_props(conf))
        return f

    def command(self, java: str, home: Path) -> list[str]:
        j = self.plan.jvm
        conf = self._write_conf()
        (self.dir / "logs").mkdir(exist_ok=True)
        cmd = [java, "-server", f"-Xms{j.heap_mb}m", f"-Xmx{j.heap_mb}m"]
        if j.max_direct_memory_mb:
            cmd.append(f"-XX:MaxDirectMemorySize={j.max_direct_memory_mb}m")
        if self.plan.is_broker:
            # as RocketMQ's runbroker.sh: the whole heap is touched (and charged to the broker's cgroup)
            # at start, so a memory squeeze does not stall the send path on first-touch heap faults
            cmd.append("-XX:+AlwaysPreTouch")
        cmd += ["-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
                f"-Xlog:gc*:file={self.dir / 'logs' / 'gc.log'}:time,tags:filecount=2,filesize=10M",
                "-Djava.net.preferIPv4Stack=true",  # IPv4 sockets, so the bind() shim maps 0.0.0.0 -> 127.0.0.1
                f"-Duser.home={self.dir}",  # RocketMQ writes its logs and namesrv kv config under user.home
                f"-Drocketmq.home.dir={self.dir}"]
        cmd += [f"-D{k}={('true' if v else 'false') if isinstance(v, bool) else v}"
                for k, v in j.system_properties.items()]
        cmd += list(j.options)
        cmd += ["-cp", f"{home / 'lib'}/*"]
        ns = self.c.namesrv_addr
        if self.role == "namesrv":
            cmd += [MAIN["namesrv"], "-c", str(conf)]
        elif self.role == "proxy":
            cmd += [f"-Dcom.rocketmq.proxy.configPath={conf}", MAIN["proxy"], "-pm", "cluster", "-n", ns]
        else:
            cmd += [MAIN["broker"], "-c", str(conf), "-n", ns]
        return cmd

    def start(self, java: str | None = None, home: Path | None = None, shim: Path | None = None) -> int:
        if self.running():
            raise UserError(f"{self.name} is already running (pid {self.pid})", "stop it first")
        if java is None or home is None or shim is None:
            java, home, shim = find_java()[0], paths.rocketmq_home(self.c.scenario.cluster.rocketmq_version), \
                paths.loopback_shim()
        cg = self.cgroup
        assert cg is not None
        if not cg.exists():
            cg.create()
            self.c.run.processes.record_cgroup(self.name, cg.rel)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS"))}
        env.update({"ROCKETMQ_HOME": str(self.dir), "LD_PRELOAD": str(shim)})
        cmd = self.command(java, home)
        proc = spawn(cmd, self.dir, env, self.dir / "stdout.log", cg.procs_files())
        st = starttime(proc.pid)
        self.c.run.processes.record_start(ProcRecord(
            node=self.name, pid=proc.pid, starttime=st or 0, cmd=cmd, cgroup=cg.rel,
            ports=self.plan.ports, started_ms=now_ms()))
        return proc.pid

    def wait_port(self) -> None:
        deadline = self.c._deadline()
        while True:
            self.c._check_alive([self.name], f"port {self.plan.ports[0]}")
            try:
                socket.create_connection((HOST, self.plan.ports[0]), timeout=1).close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise self.c._fail(self.name, f"port {self.plan.ports[0]} to accept connections")
            time.sleep(0.2)

    # ------------------------------------------------------------ faults
    def kill(self, sig: int = signal.SIGKILL) -> None:
        r = self.record
        if r is None or not alive(r.pid, r.starttime):
            raise UserError(f"{self.name} is not running", "start or restart it first")
        cg = self.cgroup
        send(r.pid, r.starttime, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and cg and cg.frozen():
            # A frozen task acts on a signal only once thawed; signalling first means a SIGKILLed
            # broker runs no code of its own after the thaw (it answers nothing more).
            cg.freeze(False)
        if sig == signal.SIGKILL:
            wait_gone([(r.pid, r.starttime)], 10)
            self.c.run.processes.record_exit(self.name, r.pid, "SIGKILL")

    def pause(self) -> None:
        if not self.running():
            raise UserError(f"{self.name} is not running", "cannot pause it")
        assert self.cgroup is not None
        self.cgroup.freeze(True)

    def resume(self) -> None:
        assert self.cgroup is not None
        self.cgroup.freeze(False)

    def stop(self) -> str:
        r = self.record
        if r is None:
            return "not-started"
        if self.cgroup and self.cgroup.frozen():
            self.cgroup.freeze(False)
        how = stop(r.pid, r.starttime, self.c.scenario.cluster.stop_timeout)
        if how != "already-exited":
            self.c.run.processes.record_exit(self.name, r.pid, how)
        return how

    def restart(self) -> None:
        t0 = now_ms()
        self.stop()
        if self.plan.is_broker:
            self._wait_dropped()
        say(f"restarting {self.name}")
        self.start()
        if self.plan.is_broker:
            self.c.wait_registered([self.name])
        elif self.role == "namesrv":
            self.c._wait_namesrv()
        else:
            self.wait_port()
        self.c.run.event("restart", self.name, t0, now_ms(), "ok", pid=self.pid)

    def _wait_dropped(self, timeout: float = 10.0) -> None:
        """Wait until namesrv has dropped this (stopped) broker, which it does when the connection
        closes: otherwise the restart's registration check could pass on the dead process's entry.
        Bounded: a namesrv that keeps the entry longer only costs the check its precision."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reg = self.c.registered()
            if reg is not None and not self.plan.listed_in(reg):
                return
            time.sleep(0.1)


def reap(run: RunDir, grace: float = 15.0) -> list[str]:
    """End every process `run` started (by recorded pid + start time, and anything still inside its
    cgroups), then remove its cgroups. Safe to call repeatedly, and after the platform was killed."""
    done: list[str] = []
    log = run.processes
    starts = log.starts()
    cg_rels = log.cgroups()
    for rel in cg_rels:  # thaw first: a frozen process cannot die
        cg = Cgroup(rel)
        if cg.frozen():
            try:
                cg.freeze(False)
            except (OSError, TimeoutError):
                pass
    latest: dict[str, ProcRecord] = {}
    for r in starts:
        latest[r.node] = r
    live = [r for r in starts if alive(r.pid, r.starttime)]
    # brokers before namesrv, so brokers can unregister cleanly
    live.sort(key=lambda r: r.node == "namesrv")
    for r in live:
        send(r.pid, r.starttime, signal.SIGTERM)
    if live and not wait_gone([(r.pid, r.starttime) for r in live], grace):
        for r in live:
            if send(r.pid, r.starttime, signal.SIGKILL):
                done.append(f"SIGKILL {r.node} pid {r.pid} (did not stop within {grace:.0f}s)")
        wait_gone([(r.pid, r.starttime) for r in live], 10)
    for r in live:
        done.append(f"stopped {r.node} pid {r.pid}")
        log.record_exit(r.node, r.pid, "down")
    for rel in cg_rels:
        cg = Cgroup(rel)
        for pid in cg.pids():  # anything a node forked: in our cgroup, hence ours
            if state_char(pid) in (None, "Z", "X"):
                continue  # already exiting (a node we just stopped, not yet gone from the cgroup)
            send(pid, None, signal.SIGKILL)
            done.append(f"killed pid {pid} left in cgroup {rel}")
        wait_gone([(p, None) for p in cg.pids()], 10)
        if cg.exists():
            if cg.remove():
                done.append(f"removed cgroup {rel}")
            else:
                done.append(f"could not remove cgroup {rel}")
        cgroups.remove_empty_parents(rel)
    run.update_state(cluster="down")
    run.unregister()
    return done
