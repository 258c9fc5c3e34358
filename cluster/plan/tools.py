"""RocketMQ's own command-line tools (mqadmin, the benchmark Producer) run from the resolved jars:
independent witnesses that the cluster is real and healthy, used by the `witness` check."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cluster.plan import logconf
from cluster.plan.jvm import classpath, jvm_command
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import run_bounded
from rmqchaos.rocketmq.dist import major

MQADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
BENCH_PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"


@dataclass
class ToolResult:
    args: list[str]
    rc: int
    out: str


def run_tool(version: str, workdir: Path, main: str, args: list[str], timeout: float,
             cgroup_procs: list[str] | None = None) -> ToolResult:
    """One bounded JVM run, inside the run's `tools` cgroup; killed when `timeout` passes or we die."""
    workdir.mkdir(parents=True, exist_ok=True)
    logconf.write(workdir, version, "tools")
    cmd = jvm_command(main, args, cp=classpath(version), heap_mb=256, xms_mb=64, client=True, version=version,
                      user_home=workdir, rocketmq_home=workdir)
    env = dict(os.environ, ROCKETMQ_HOME=str(workdir))
    done = run_bounded(cmd, timeout, cwd=workdir, env=env, join=cgroup_procs or [])
    if done is None:
        raise UserError(f"{main.rsplit('.', 1)[-1]} {' '.join(args[:2])} did not finish within {timeout:.0f}s",
                        "is the cluster healthy? (rmqchaos cluster status)")
    return ToolResult(args, *done)


# The benchmark Producer's last line. Send Total = successes + send failures; broker errors
# (MQBrokerException) count only as Response Failed.
_COMPLETE = re.compile(r"\[Complete\] Send Total: (\d+).*?Send Failed: (\d+)\s*\|?\s*Response Failed: (\d+)")


def bench_complete(out: str) -> tuple[int, int, int] | None:
    """(send total, send failed, response failed) from the benchmark Producer's output."""
    m = _COMPLETE.search(out)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


#: runs one tool against a cluster: (main class, args, timeout) -> ToolResult (ClusterBackend.run_tool
#: with the workdir bound)
Runner = Callable[[str, list[str], float], ToolResult]


def bench_args(ns: str, topic: str, count: int, size: int, threads: int) -> list[str]:
    """RocketMQ's benchmark Producer, bounded by -q (messages in total, split over the threads)."""
    return ["-n", ns, "-t", topic, "-w", str(threads), "-s", str(size), "-q", str(count), "-k", "true", "-ri", "1000"]


def bench_produce(run: Runner, ns: str, topic: str, count: int, size: int, threads: int, timeout: float) -> ToolResult:
    return run(BENCH_PRODUCER, bench_args(ns, topic, count, size, threads), timeout)


#: one line per message of `mqadmin checkMsgSendRT`: broker, queue id, whether the send succeeded, its RT
_SEND_RT = re.compile(r"^\S+\s+\d+\s+(true|false)\s+\d+\s*$", re.M)


def witness_send(run: Runner, version: str, ns: str, topic: str, count: int, size: int, threads: int,
                 timeout: float) -> tuple[str, ToolResult, tuple[int, int, int] | None]:
    """RocketMQ's own tool sends the witness messages: (its name, its run, (sent, send failed, response
    failed) or None when it did not finish). 5.x: the benchmark Producer, bounded by -q; 4.x: mqadmin
    checkMsgSendRT of the version's own tools (one thread, every queue in turn), since no 4.x benchmark
    Producer on Maven Central stops by itself (4.6.0's has no -q; rocketmq-example 4.9.7 is not there)."""
    if major(version) == 4:
        r = run(MQADMIN, ["checkMsgSendRT", "-n", ns, "-t", topic, "-a", str(count), "-s", str(size)], timeout)
        sends = _SEND_RT.findall(r.out)
        return "mqadmin checkMsgSendRT", r, ((len(sends), sends.count("false"), 0) if r.rc == 0 and sends else None)
    r = bench_produce(run, ns, topic, count, size, threads, timeout)
    return "RocketMQ's benchmark Producer", r, bench_complete(r.out)


def topic_offsets(run: Runner, ns: str, topic: str, timeout: float = 60) -> dict[str, int]:
    """`mqadmin topicStatus`: messages stored per broker group (sum of max - min offsets)."""
    r = run(MQADMIN, ["topicStatus", "-n", ns, "-t", topic], timeout)
    if r.rc != 0:
        raise UserError(f"mqadmin topicStatus -t {topic} failed (exit {r.rc})", r.out.strip().splitlines()[-1:][0]
                        if r.out.strip() else "no output")
    per: dict[str, int] = {}
    for line in r.out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1].isdigit() and f[2].isdigit() and f[3].isdigit():
            per[f[0]] = per.get(f[0], 0) + int(f[3]) - int(f[2])
    return per


# MessageExt.toString: since 4.9 it begins with brokerName; before, only storeHost says where it is stored.
# Not anchored: 4.6.0's printMsg prints each queue's "minOffset=..., MessageQueue [...]" with no newline,
# so a queue's first message line begins with it
_MSG = re.compile(r"MSGID: (\S+) MessageExt \[(?:brokerName=([^,]*), )?queueId=(\d+),.*?queueOffset=(\d+),"
                  r".*?storeHost=[^/,]*/([\d.]+:\d+)")


def read_back(run: Runner, ns: str, topic: str, timeout: float = 120,
              names: dict[str, str] | None = None) -> list[tuple[str, str, int, int]]:
    """`mqadmin printMsg`: pull every message of the topic back. (msgId, broker, queueId, queueOffset);
    the broker is named by its store host's address where the release prints no name (before 4.9),
    through `names` ({address: broker name}) when given."""
    r = run(MQADMIN, ["printMsg", "-n", ns, "-t", topic, "-d", "false"], timeout)
    if r.rc != 0:
        raise UserError(f"mqadmin printMsg -t {topic} failed (exit {r.rc})", "see the tool output in the run dir")
    out = []
    for line in r.out.splitlines():
        m = _MSG.search(line)
        if m:
            broker = m.group(2) if m.group(2) is not None else (names or {}).get(m.group(5), m.group(5))
            out.append((m.group(1), broker, int(m.group(3)), int(m.group(4))))
    return out
