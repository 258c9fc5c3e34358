"""RocketMQ's own command-line tools (mqadmin, the benchmark Producer) run from the resolved jars:
independent witnesses that the cluster is real and healthy, used by the `witness` check."""
from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cluster.java import find_java
from rmqchaos import paths
from rmqchaos.errors import UserError

MQADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
BENCH_PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"


@dataclass
class ToolResult:
    args: list[str]
    rc: int
    out: str


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _child_setup(cgroup_procs: list[str]) -> Callable[[], None]:
    def setup() -> None:  # in the child, before exec
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with us, even if we are SIGKILLed
        for f in cgroup_procs:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))
    return setup


def run_tool(version: str, workdir: Path, main: str, args: list[str], timeout: float,
             cgroup_procs: list[str] | None = None) -> ToolResult:
    """One bounded JVM run, inside the run's `tools` cgroup; killed when `timeout` passes or we die."""
    java = find_java()[0]
    home = paths.rocketmq_home(version)
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [java, "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Djava.net.preferIPv4Stack=true", f"-Duser.home={workdir}", f"-Drocketmq.home.dir={workdir}",
           "-cp", f"{home / 'lib'}/*", main, *args]
    env = dict(os.environ, ROCKETMQ_HOME=str(workdir))
    p = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                         preexec_fn=_child_setup(cgroup_procs or []))
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise UserError(f"{main.rsplit('.', 1)[-1]} {' '.join(args[:2])} did not finish within {timeout:.0f}s",
                        "is the cluster healthy? (rmqchaos cluster status)") from None
    return ToolResult(args, p.returncode, out)


# The benchmark Producer's last line. Send Total = successes + send failures; broker errors
# (MQBrokerException) count only as Response Failed.
_COMPLETE = re.compile(r"\[Complete\] Send Total: (\d+).*?Send Failed: (\d+)\s*\|?\s*Response Failed: (\d+)")


def bench_complete(out: str) -> tuple[int, int, int] | None:
    """(send total, send failed, response failed) from the benchmark Producer's output."""
    m = _COMPLETE.search(out)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def bench_produce(version: str, workdir: Path, ns: str, topic: str, count: int, size: int, threads: int,
                  timeout: float, cgroup_procs: list[str] | None = None) -> ToolResult:
    """RocketMQ's benchmark Producer, bounded by -q (messages in total, split over the threads)."""
    return run_tool(version, workdir, BENCH_PRODUCER,
                    ["-n", ns, "-t", topic, "-w", str(threads), "-s", str(size), "-q", str(count), "-k", "true",
                     "-ri", "1000"], timeout, cgroup_procs)


def topic_offsets(version: str, workdir: Path, ns: str, topic: str, timeout: float = 60,
                  cgroup_procs: list[str] | None = None) -> dict[str, int]:
    """`mqadmin topicStatus`: messages stored per broker group (sum of max - min offsets)."""
    r = run_tool(version, workdir, MQADMIN, ["topicStatus", "-n", ns, "-t", topic], timeout, cgroup_procs)
    if r.rc != 0:
        raise UserError(f"mqadmin topicStatus -t {topic} failed (exit {r.rc})", r.out.strip().splitlines()[-1:][0]
                        if r.out.strip() else "no output")
    per: dict[str, int] = {}
    for line in r.out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1].isdigit() and f[2].isdigit() and f[3].isdigit():
            per[f[0]] = per.get(f[0], 0) + int(f[3]) - int(f[2])
    return per


_MSG = re.compile(r"^MSGID: (\S+) MessageExt \[brokerName=([^,]*), queueId=(\d+),.*?queueOffset=(\d+),")


def read_back(version: str, workdir: Path, ns: str, topic: str, timeout: float = 120,
              cgroup_procs: list[str] | None = None) -> list[tuple[str, str, int, int]]:
    """`mqadmin printMsg`: pull every message of the topic back. (msgId, broker, queueId, queueOffset)."""
    r = run_tool(version, workdir, MQADMIN, ["printMsg", "-n", ns, "-t", topic, "-d", "false"], timeout,
                 cgroup_procs)
    if r.rc != 0:
        raise UserError(f"mqadmin printMsg -t {topic} failed (exit {r.rc})", "see the tool output in the run dir")
    out = []
    for line in r.out.splitlines():
        m = _MSG.match(line)
        if m:
            out.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4))))
    return out
