"""The `local` backend: namesrv, brokers (and optionally slaves and the gRPC proxy) as JVMs on
this machine, started from the Maven-resolved jars, each in its own cgroup, listening on
127.0.0.1 only (bindAddress plus an LD_PRELOAD bind() shim for listeners RocketMQ does not let
us configure, such as the HA acceptor).

Its resource records are the run's processes.jsonl (pid + kernel start time, cgroup) and the
cgroups `rmqchaos/<run id>/<node>`; `reap` ends exactly those.
"""
from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from cluster.net import netrules
from cluster.substrate import powerfs
from cluster.plan import tools
from cluster.backend import ClusterBackend
from cluster.node import ClusterStartError, NodeStatus
from cluster.plan.jvm import find_java
from cluster.local import cgroups, power
from cluster.local.cgroups import Cgroup
from cluster.local.node import LocalNode
from cluster.plan.nodes import READY_TOPIC, port_in_use
from cluster.plan.rmqlog import log_dir
from rmqchaos.machine import diskstats, paths
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.rocketmq import patched
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import alive, now_ms, record_spawn, send, spawn, state_char, wait_gone
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import RemotingError


_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d ")


_TOP_EXCEPTION = re.compile(r'^(?:Exception in thread "[^"]*" )?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b.*)$')
_ROCKETMQ_FRAME = re.compile(r"^\s+at org\.apache\.rocketmq\.[\w.$]*?([A-Z][\w$]*\.[\w$<>]+\([\w.]+:\d+\))")
# MappedFileQueue.load's refusal, with no exception anywhere: a store file of another size than the
# configured one (4.x and 5.1 also for an empty last commit-log file, which 5.2+ deletes: "size is 0,
# auto delete"), e.g. '…/store.fs/commitlog/00000000000067108864\t0 length not matched …'
_STORE_REFUSAL = re.compile(r"^\S+ \S+ WARN main - .*?/((?:commitlog|consumequeue|dledger)[^\t]*)\t(\d+) length not matched "
                            r"message store config value, please check it manually")


def exit_cause(node_dir: Path) -> str | None:
    """The last top-level exception in a node's stdout (the one that ended its last start) and the first
    RocketMQ frame under it, e.g. 'java.lang.NumberFormatException: Cannot parse null string at
    CheckpointFile.read(CheckpointFile.java:107)'; else the store's own refusal in its store.log (a
    4.9.7 broker after a power loss says nothing on stdout: 'commitlog/00000000000067108864 is 0 bytes,
    not the configured size: the store refused to load it'); None when neither shows one."""
    f = node_dir / "stdout.log"
    lines = f.read_text(errors="replace").splitlines() if f.is_file() else []
    for i in range(len(lines) - 1, -1, -1):
        if (m := _TOP_EXCEPTION.match(lines[i])):
            frame = next((f.group(1) for ln in lines[i + 1:i + 40] if (f := _ROCKETMQ_FRAME.match(ln))), None)
            return m.group(1)[:200] + (f" at {frame}" if frame else "")
    store_log = log_dir(node_dir.parent, node_dir.name) / "store.log"
    refusals = [m for ln in (store_log.read_text(errors="replace").splitlines() if store_log.is_file() else [])
                if (m := _STORE_REFUSAL.match(ln))]
    if refusals:
        path, size = refusals[-1].groups()
        return f"{path} is {size} bytes, not the configured size: the store refused to load it"
    return None


def log_tail(node_dir: Path, lines: int = 10) -> str:
    """The last lines of a node's stdout, and the last records (not stack frames) of RocketMQ's own log."""
    out = []
    for f in [node_dir / "stdout.log", *sorted(log_dir(node_dir.parent, node_dir.name).glob("*.log"))]:
        if f.name not in ("stdout.log", "broker.log", "namesrv.log", "proxy.log", "controller.log") or not f.is_file():
            continue
        text = f.read_text(errors="replace").rstrip().splitlines()
        if f.name != "stdout.log":
            text = [t for t in text if _LOG_RECORD.match(t)]
        if text[-lines:]:
            out.append(f"--- tail of {f}")
            out += ["    " + t[:300] for t in text[-lines:]]
    return "\n".join(out)


class LocalCluster(ClusterBackend):
    # ------------------------------------------------------------ helpers
    def _cgroup_rel(self, node: str) -> str:
        return f"{cgroups.PREFIX}/{self.run.run_id}/{node}"

    def _tools_cgroup(self) -> Cgroup:
        """Where client-side processes of this run (tools, consumers, the load) run, so `down` reaps them."""
        cg = Cgroup(self._cgroup_rel("tools"))
        if not cg.exists():
            cg.create()
            self.run.processes.record_cgroup("tools", cg.rel)
        return cg

    def node(self, name: str) -> "LocalNode":
        if name not in self.plans:
            raise UserError(f"no node named {name!r} in this cluster", f"nodes: {', '.join(self.plans)}")
        return LocalNode(self, self.plans[name])

    def power_loss(self, names: list[str]) -> dict[str, dict[str, object]]:
        return power.power_loss(self, names)

    def spawn_client(self, name: str, cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                     log_file: Path | None = None, stdout: object = None, stderr: object = None,
                     new_session: bool = False, outlive: bool = False) -> subprocess.Popen:
        cg = self._tools_cgroup()
        p = spawn(cmd, cwd=cwd, env=env, log_file=log_file, stdout=stdout, stderr=stderr, join=cg.procs_files(),
                  new_session=new_session, die_with_parent=not outlive)
        record_spawn(self.run.processes, name, p, cmd, cgroup=cg.rel)
        return p

    def run_tool(self, main: str, args: list[str], timeout: float, workdir: Path) -> tools.ToolResult:
        return tools.run_tool(self.scenario.cluster.dist, workdir, main, args, timeout,
                              self._tools_cgroup().procs_files())

    # ------------------------------------------------------------ up
    def _preflight(self) -> None:
        find_java()
        rocketmq_dist.rocketmq_home(self.scenario.cluster.dist)
        paths.loopback_shim()
        if (full := diskstats.full_disk_error(self.run.path, diskstats.used_ratio(self.run.path))) is not None:
            raise full  # the stores go under the run directory
        if cgroups.version() == 0:
            raise UserError("no cgroup hierarchy is mounted at /sys/fs/cgroup",
                            "mount cgroup v1 (memory, blkio, freezer) or v2; faults act through cgroups")
        for p in self.plans.values():
            for port in p.ports:
                if port_in_use(port, p.host):
                    raise UserError(f"port {port} ({p.name}) is already in use on {p.host} or the whole loopback",
                                    f"stop what holds it (ss -ltnp 'sport = :{port}'; an earlier cluster: "
                                    f"rmqchaos cluster down --all) or choose other ports in the scenario")

    def up(self) -> None:
        t0 = now_ms()
        self._preflight()
        v, label = self.scenario.cluster.rocketmq_version, self.scenario.cluster.version_label
        mixed = rocketmq_dist.substituted(v)
        if mixed:
            say(f"RocketMQ {v} runs mixed: " + ", ".join(f"{a} {d}" for a, d in sorted(mixed.items()))
                + f" (not on Maven Central at {v})")
        built = patched.describe(self.scenario.cluster.dist)
        if built:
            say(f"RocketMQ {label}: {', '.join(built['modules'].values())} rebuilt with the patches")
        self.run.write_versions(label, find_java()[2], mixed, built.get("patches"))
        self.run.update_state(cluster="starting")
        self.run.register()
        try:
            ns = self.namesrv_nodes()
            say(f"starting {'namesrv' if len(ns) == 1 else f'{len(ns)} namesrvs'} on {self.namesrv_addr} "
                f"(RocketMQ {label})")
            for p in ns:
                self.node(p.name).start()
            # the brokers start beside namesrv, not after it: a broker's JVM takes longer to boot than
            # namesrv's (its first registration comes ~10 s after start here, namesrv answers after ~5),
            # and a registration that found no namesrv is repeated 10 s after the broker's start
            controllers = [n for n in self.nodes() if n.role == "controller"]
            if controllers:  # beside namesrv too: a controller-mode broker retries its controllers
                say(f"starting {len(controllers)} controller(s): {', '.join(n.name for n in controllers)}")
                for n in controllers:
                    n.start()
            brokers = [n for n in self.nodes() if n.plan.is_broker]
            say(f"starting {len(brokers)} broker(s): {', '.join(n.name for n in brokers)}")
            for n in brokers:
                n.start()
            self._wait_namesrv()
            self.wait_registered([n.name for n in brokers])
            self._wait_replicated()
            self._wait_routable()
            self.verify_broker_configs()
            if "proxy" in self.plans:
                say("starting proxy")
                self.node("proxy").start()
                self.node("proxy").wait_port()
            for n in brokers:  # the proxy inside a broker (proxy.mode local) opens its gRPC port after the broker's
                if n.plan.serves_grpc:
                    n.wait_port(self.scenario.cluster.proxy.grpc_port)
            self.start_monitor()
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

    def _fail(self, node: str, waited_for: str) -> ClusterStartError:
        return ClusterStartError(f"{node} did not become ready: {waited_for}",
                                 f"see its logs in {self.run.node_dir(node)}",
                                 detail=log_tail(self.run.node_dir(node)))

    def _check_alive(self, names: list[str], waited_for: str) -> None:
        for n in names:
            if not self.node(n).running():
                raise ClusterStartError(f"{n} exited while starting (waiting for {waited_for})",
                                        f"see its logs in {self.run.node_dir(n)}",
                                        detail=log_tail(self.run.node_dir(n)), cause=exit_cause(self.run.node_dir(n)))

    def _ready_timeout(self) -> float:
        return self.scenario.cluster.ready_timeout

    def _wait_namesrv(self, names: list[str] | None = None) -> None:
        """Every namesrv (or those named) answers."""
        pending = names or [p.name for p in self.namesrv_nodes()]

        def answers() -> bool:
            nonlocal pending
            pending = [n for n in pending if self.registered(n) is None]
            return not pending
        t = self._ready_timeout()
        poll_until(answers, t, "namesrv", interval=0.2, check=lambda: self._check_alive(pending, "its port to answer"),
                   error=lambda: self._fail(pending[0], f"an answer on {self.plans[pending[0]].addr} within {t:.0f}s"))

    def wait_registered(self, names: list[str]) -> None:
        pending = list(names)

        def all_listed() -> bool:  # by every namesrv: each takes its own registration
            nonlocal pending
            regs = [r or {} for r in self.registered_in_each().values()]
            pending = [n for n in pending if not all(self.plans[n].listed_in(r) for r in regs)]
            return not pending
        t = self._ready_timeout()
        poll_until(all_listed, t, "registration", check=lambda: self._check_alive(pending, "registration in namesrv"),
                   error=lambda: self._fail(pending[0], f"registration in namesrv {self.namesrv_addr} within "
                                                        f"{t:.0f}s (never registered)"),
                   progress_every=10, progress=lambda: f"still waiting for {', '.join(pending)} to register in namesrv")

    def _wait_replicated(self) -> None:
        """Replicated groups: ready in the steady state a failover starts from (`replicated`):
        controller mode: an elected master listed as id 0 in namesrv, every replica in the SyncStateSet;
        DLedger: a leader listed as id 0, every replica registered."""
        groups = self.replica_groups()
        if not groups:
            return
        lacking: dict[str, str] = {}
        ctl = [p.name for p in self.plans.values() if p.role == "controller"]

        def steady() -> bool:
            nonlocal lacking
            lacking = self.replicated()
            if lacking:
                self._check_alive(ctl + [p.name for g in lacking for p in groups[g]], "replication")
            return not lacking
        t = self._ready_timeout()
        poll_until(steady, t, "replication", interval=0.5,
                   error=lambda: self._fail(groups[next(iter(lacking))][0].name,
                                            f"{next(iter(lacking))}: {next(iter(lacking.values()))} within {t:.0f}s"),
                   progress_every=10, progress=lambda: "still waiting for " + "; ".join(f"{g}: {w}" for g, w in lacking.items()))

    def _wait_routable(self) -> None:
        """A test topic must route to every broker group: proves each master serves admin requests
        and that namesrv has its topic table."""
        masters = self.masters()
        created: set[str] = set()
        missing: list[str] = []

        def routed() -> bool:
            nonlocal missing
            for p in masters:
                if p.name not in created:
                    try:
                        self.admin(timeout=2).create_topic(p.addr, READY_TOPIC, queues=1)
                        created.add(p.name)
                    except RemotingError:
                        pass
            groups = self.routed_groups(READY_TOPIC)
            missing = [p.name for p in masters if p.broker_name not in groups]
            if missing:
                self._check_alive(missing, f"topic {READY_TOPIC} to route to it")
            return not missing
        t = self._ready_timeout()
        poll_until(routed, t, "routes",
                   error=lambda: self._fail(missing[0], f"topic {READY_TOPIC} to route to it within {t:.0f}s"))

    # ------------------------------------------------------------ down
    def down(self, grace: float | None = None) -> list[str]:
        return reap(self.run, grace=self.scenario.cluster.stop_timeout if grace is None else grace)

    # ------------------------------------------------------------ status
    def status(self) -> list[NodeStatus]:
        reg = self.registered()
        out = []
        for n in self.nodes():
            rec = n.record
            running = rec is not None and alive(rec.pid, rec.starttime)
            cg = n.cgroup
            state = "not-started" if rec is None else ("down" if not running else
                                                       ("paused" if cg.frozen() else "running"))
            registered = n.plan.listed_in(reg) if (n.plan.is_broker and reg is not None) else None
            out.append(NodeStatus(
                name=n.name, role=n.plan.role, state=state, pid=rec.pid if running and rec else None,
                ports=n.plan.ports, addr=n.plan.addr, registered=registered,
                memory_bytes=cg.memory_usage() if running else None, log_file=str(n.log_file),
                broker_name=n.plan.broker_name,
                extra={"cgroup": cg.rel if cg.exists() else None,
                       "store_dir": str(n.store_path) if n.plan.is_broker else None,
                       **({"powerfs": True} if n.plan.powerfs else {})}))
        return out


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
    # powerfs servers last (powerfs.reap_run below): a broker's shutdown still writes through its mount
    live = [r for r in starts if alive(r.pid, r.starttime) and not powerfs.is_server(r)]
    # brokers before namesrv and the controllers, so brokers can unregister cleanly
    live.sort(key=lambda r: r.node.startswith(("namesrv", "controller-")))
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
    done += powerfs.reap_run(run.path, log)  # its mounts: aborted, unmounted, servers ended
    done += netrules.remove_run(run.run_id)  # a partition's rules, if a fault left any
    run.update_state(cluster="down")
    run.unregister()
    return done
