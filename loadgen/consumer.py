"""Run the receive witness — the real Java DefaultMQPushConsumer of io.rmqchaos.Consumer — as a process.

The platform starts it before the load and stops it after the drain. Each instance appends one JSON
line per delivery to its output file (the receive ledger's rows; schema in docs/ledgers.md). It is
recorded in the run's processes.jsonl and runs in the run's `tools` cgroup, so `down` reaps it even
after the platform itself was killed; stopping it is SIGTERM, on which the Java side shuts the
consumer down (persisting offsets) and fsyncs its output.

Its stdout and stderr go to files and it is stopped by its recorded pid, so the process that stops it
need not be the one that started it (an Airflow `drain` task stops what the `load` task started).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import Callable

from cluster.substrate import clock
from cluster.plan.jvm import classpath, grpc_classpath, jcmd, jvm_command
from rmqchaos.machine import paths
from rmqchaos.run import serving
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.machine.procs import ProcessLog, ProcRecord, alive, spawn, starttime, stop
from rmqchaos.machine.wait import poll_until

#: how a consumer process is started: (node name, cmd, cwd=, stdout=, stderr=, new_session=) -> Popen. The
#: cluster backend's `spawn_client` records it for reaping; by hand without a run, plain `spawn`.
Launcher = Callable[..., subprocess.Popen]

MAIN = "io.rmqchaos.Consumer"
GRPC_MAIN = "io.rmqchaos.GrpcConsumer"
MODES = ("all", "ack_first_of_batch")


@dataclass
class GrpcOptions:
    """Through the proxy with the 5.x Java client (io.rmqchaos.GrpcConsumer): POP."""
    endpoints: str  # the proxy's gRPC address
    kind: str = "simple"  # simple | push
    invisible_ms: int = 15_000
    await_ms: int = 5_000
    change_ms: int = 0  # changeInvisibleDuration to this before each ack (0: none)
    last_ack_delay_ms: int = 0  # the last message of each receive acked this much later (0: at once)
    client_version: str | None = None  # rocketmq-client-java; None: pom.xml's


@dataclass
class ConsumerOptions:
    group: str
    topics: list[str]
    mode: str = "all"
    listener: str = "concurrently"  # orderly: MessageListenerOrderly (an ordered load's consumers)
    batch_size: int = 1  # consumeMessageBatchMaxSize
    delay_ms: int = 0  # processing time per message
    max_reconsume_times: int = -1  # redeliveries before %DLQ%; -1: the client's default (16)
    route_refresh_ms: int = 30_000  # pollNameServerInterval (the Java client's default)
    threads: int = 8
    duration_s: float = 600.0  # hard bound on the process's life
    idle_s: float = 0.0  # stop by itself after this long without a delivery (0: never)
    consumer_id: str = "c0"
    heap_mb: int = 256
    extra_jvm: list[str] = field(default_factory=list)
    # its own loopback address (cluster/plan/nodes.py addresses): the loopback shim binds its connections
    # to it, so a network rule can name the consumer's links; None: the kernel's choice (127.0.0.1)
    address: str | None = None
    # its JVM under libfaketime, with a clock of its own the consumer_clock fault moves (wall clock only:
    # its scheduled executors keep the host's monotonic time); its ledger's times stay the host's
    faketime: bool = False
    grpc: GrpcOptions | None = None  # None: the remoting DefaultMQPushConsumer (io.rmqchaos.Consumer)


class JavaConsumer:
    """One consumer process. `start()` returns once the Java client has started."""

    def __init__(self, namesrv: str, opts: ConsumerOptions, out: Path, workdir: Path, run_id: str = "",
                 rocketmq_version: str | None = None, launcher: Launcher | None = None,
                 proc_log: ProcessLog | None = None) -> None:
        if opts.mode not in MODES:
            raise UserError(f"consumer mode {opts.mode!r} is not known", f"use one of {', '.join(MODES)}")
        self.namesrv, self.opts, self.out, self.workdir, self.run_id = namesrv, opts, Path(out), Path(workdir), run_id
        self.version = rocketmq_version or paths.pinned_rocketmq_version()
        self.launcher, self.proc_log = launcher, proc_log
        self.proc: subprocess.Popen | None = None
        self.pid: tuple[int, int | None] | None = None  # (pid, kernel start time) once started
        self.log_file = self.workdir / f"consumer-{opts.consumer_id}.log"
        self.out_file = self.workdir / f"consumer-{opts.consumer_id}.out"  # stdout: the stop summary
        # which brokers serve its pulls (or its receives through the proxy), rewritten by the Java side
        # (rmqchaos/run/serving.py reads it)
        self.serving_file = serving.status_path(self.workdir, opts.consumer_id)
        self.clock_file = self.workdir / f"consumer-{opts.consumer_id}.{clock.CONTROL}"  # opts.faketime
        self.summary: dict | None = None
        self._log_from = 0  # where in its (appended) log this process's lines begin

    def attach(self, rec: ProcRecord) -> "JavaConsumer":
        """This consumer as started earlier, maybe by another process (its processes.jsonl record),
        writing the ledger its command names (a restarted instance's is its own)."""
        self.pid = (rec.pid, rec.starttime)
        if "--out" in rec.cmd[:-1]:
            self.out = Path(rec.cmd[rec.cmd.index("--out") + 1])
        return self

    @property
    def node(self) -> str:
        return f"consumer-{self.opts.consumer_id}"

    def command(self) -> list[str]:
        o = self.opts
        if o.grpc is not None:
            return self._grpc_command(o, o.grpc)
        args = ["--namesrv", self.namesrv, "--group", o.group, "--out", str(self.out), "--mode", o.mode,
                "--listener", o.listener,
                "--batch-size", str(o.batch_size), "--delay-ms", str(o.delay_ms), "--threads", str(o.threads),
                "--max-reconsume-times", str(o.max_reconsume_times), "--poll-namesrv-ms", str(o.route_refresh_ms),
                "--duration", str(o.duration_s), "--idle", str(o.idle_s), "--consumer-id", o.consumer_id,
                "--run-id", self.run_id, "--serving", str(self.serving_file)]
        if o.faketime:  # the offset it starts at, so its ledger's times are the host's (io.rmqchaos.Consumer)
            args += ["--clock-offset-ms", str(round(clock.offset_of(self.clock_file) * 1000))]
        for t in o.topics:
            args += ["--topic", t]
        return jvm_command(MAIN, args, cp=classpath(self.version, platform_jar=True), heap_mb=o.heap_mb, version=self.version,
                           xms_mb=min(64, o.heap_mb), user_home=self.home, options=o.extra_jvm)

    def _grpc_command(self, o: ConsumerOptions, g: GrpcOptions) -> list[str]:
        args = ["--endpoints", g.endpoints, "--group", o.group, "--out", str(self.out), "--kind", g.kind,
                "--mode", o.mode, "--batch-size", str(o.batch_size), "--invisible-ms", str(g.invisible_ms),
                "--await-ms", str(g.await_ms), "--change-invisible-ms", str(g.change_ms),
                "--last-ack-delay-ms", str(g.last_ack_delay_ms), "--delay-ms", str(o.delay_ms),
                "--threads", str(o.threads), "--duration", str(o.duration_s), "--consumer-id", o.consumer_id,
                "--run-id", self.run_id, "--serving", str(self.serving_file)]
        for t in o.topics:
            args += ["--topic", t]
        return jvm_command(GRPC_MAIN, args, cp=grpc_classpath(self.version, g.client_version), heap_mb=o.heap_mb,
                           xms_mb=min(64, o.heap_mb), user_home=self.home, options=o.extra_jvm)

    @property
    def home(self) -> Path:
        """Its own user.home: the client writes its logs under it (one set per instance, not shared)."""
        return self.workdir / self.node

    def client_log(self, name: str = "remoting.log") -> Path:
        """One of the RocketMQ client's own logs of this instance."""
        return self.home / "logs" / "rocketmqlogs" / name

    def start(self, timeout: float = 60.0, attempts: int = 3) -> "JavaConsumer":
        """Start the consumer and wait until its Java client has started (`wait_started`)."""
        return self.spawn().wait_started(timeout, attempts)

    def wait_started(self, timeout: float = 60.0, attempts: int = 3) -> "JavaConsumer":
        """Wait until the spawned consumer's Java client has started; a JVM whose first route request to
        namesrv went unanswered within the client's 3 s (DefaultMQPushConsumer.start throws, the process
        exits before it consumed anything) is started again, up to `attempts` times in all (seen on a
        replicated cluster's namesrv, unexplained: docs/client.md)."""
        for attempt in range(1, attempts + 1):
            try:
                return self._wait_started(timeout)
            except UserError as e:
                if attempt == attempts or "before it started" not in e.message or not self._route_fetch_failed():
                    raise
                say(f"{self.node}: its first route request to namesrv went unanswered; starting it again "
                    f"({attempt + 1} of {attempts})")
                self.spawn()
        raise AssertionError("unreachable")

    def _route_fetch_failed(self) -> bool:
        try:
            tail = self.log_file.read_text(errors="replace")[-20000:]
        except OSError:
            return False
        return "updateTopicRouteInfoFromNameServer" in tail and "RemotingSendRequestException" in tail

    def spawn(self) -> "JavaConsumer":
        """Start the JVM, not waiting for it (`wait_started`): the consumers of a run start side by side."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        env: dict[str, str] | None = None
        preload: list[str] = []
        if self.opts.address:
            env = {**os.environ, "RMQCHAOS_NODE_ADDR": self.opts.address}
            preload.append(str(paths.loopback_shim()))
        if self.opts.faketime:
            env = {**(env or os.environ), **clock.env(self.clock_file, monotonic=False)}
            preload.append(str(clock.lib()))
        if env is not None:
            env["LD_PRELOAD"] = ":".join(preload)
        # the log is appended to: a consumer started again (consumer_kill) waits for its own start line
        self._log_from = self.log_file.stat().st_size if self.log_file.exists() else 0
        log, out = open(self.log_file, "ab"), open(self.out_file, "ab")
        try:
            if self.launcher is not None:
                self.proc = self.launcher(self.node, cmd, cwd=self.workdir, env=env, stdout=out, stderr=log,
                                          new_session=True)
            else:
                self.proc = spawn(cmd, cwd=self.workdir, env=env, stdout=out, stderr=log, new_session=True,
                                  die_with_parent=True)
        finally:
            log.close()
            out.close()
        self.pid = (self.proc.pid, starttime(self.proc.pid))
        return self

    # ------------------------------------------------------------ its own clock (opts.faketime)
    def set_clock(self, offset_s: float, rate: float | None = None) -> str:
        """Move this consumer's clock to the host's plus `offset_s` (kept if it is started again)."""
        if not self.opts.faketime:
            raise UserError(f"{self.node} was not started under libfaketime, so its clock cannot move",
                            f"set faketime: true on consumer {self.opts.consumer_id}")
        if rate is not None and rate != 1.0:
            raise UserError(f"{self.node}: a consumer's clock takes an offset, not a rate", "drop rate")
        return clock.write(self.clock_file, offset_s)

    def clock_now(self) -> tuple[float, float] | None:
        """(its own time, the host's then), read from its JVM (cluster/substrate/clock.py node_time)."""
        return None if self.pid is None else clock.node_time(jcmd(), self.pid[0])

    def uptime(self) -> tuple[float, float] | None:
        return None if self.pid is None else clock.uptime(jcmd(), self.pid[0])

    def _wait_started(self, timeout: float) -> "JavaConsumer":
        marker = f"consumer {self.opts.consumer_id} started".encode()

        def started() -> bool:
            if not self.log_file.exists():
                return False
            with open(self.log_file, "rb") as f:
                f.seek(self._log_from)
                return marker in f.read()

        def exited() -> None:
            if self.proc is not None and self.proc.poll() is not None:
                raise UserError(f"{self.node} exited with code {self.proc.returncode} before it started",
                                f"see {self.log_file}", detail=self._tail())

        def not_started() -> BaseException:
            self.kill()
            return UserError(f"{self.node} did not start within {timeout:.0f}s",
                             f"is namesrv {self.namesrv} up? see {self.log_file}", detail=self._tail())
        poll_until(started, timeout, f"{self.node} to start", interval=0.1, check=exited, error=not_started)
        return self

    def _tail(self, n: int = 10) -> str:
        try:
            return "\n".join("    " + x for x in self.log_file.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and alive(*self.pid)

    def deliveries(self) -> int:
        """Deliveries recorded so far (complete lines of the output file)."""
        try:
            with open(self.out, "rb") as f:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:
            return 0

    def wait_drained(self, expected: int | None = None, idle_s: float = 5.0, timeout: float = 120.0) -> int:
        """Wait until `expected` deliveries are recorded, or none arrived for `idle_s` (after at least
        one), or `timeout`; returns the count. The Java side fsyncs every second, so the count lags
        by up to a second: idle_s should exceed that."""
        deadline = time.monotonic() + timeout
        last, last_change = -1, time.monotonic()
        while True:
            n = self.deliveries()
            now = time.monotonic()
            if n != last:
                last, last_change = n, now
            if expected is not None and n >= expected:
                return n
            if (n > 0 or expected is None) and now - last_change >= idle_s:
                return n
            if now > deadline or not self.running():
                return n
            time.sleep(0.2)

    def stop(self, grace: float = 30.0) -> dict:
        """SIGTERM, wait for the clean shutdown (offsets persisted, output fsync'd); SIGKILL after grace."""
        if self.pid is None:
            return {}
        ended = stop(*self.pid, grace)
        if self.proc is not None:
            self.proc.wait()
        try:
            self.summary = _last_json(self.out_file.read_bytes())
        except OSError:
            self.summary = {}
        # "terminated" only when its stop hook ran: ledger flushed and fsync'd, offsets persisted (the
        # hook prints the summary line last); a consumer that died any other way may have lost the tail
        how = "terminated" if "deliveries" in self.summary else f"died ({ended})"
        if self.proc_log is not None:
            self.proc_log.record_exit(self.node, self.pid[0], how)
        self.summary["how"] = how
        return self.summary

    def kill(self) -> None:
        if self.pid is not None and alive(*self.pid):
            os.killpg(self.pid[0], signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait()


def _last_json(out: bytes) -> dict:
    for line in reversed(out.decode(errors="replace").splitlines()):
        try:
            v = json.loads(line)
            if isinstance(v, dict):
                return v
        except ValueError:
            continue
    return {}


def read_deliveries(path: Path) -> list[dict]:
    """The delivery records of one output file (a torn last line after a crash is skipped)."""
    out = []
    if not Path(path).exists():
        return out
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out

