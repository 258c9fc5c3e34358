"""Fault injectors. Each acts on one named node of the running cluster and returns its evidence;
a fault that cannot be applied raises FaultError (the run then fails: never a silent no-op).

- oom_kill: a real kernel OOM kill. The node's memory cgroup limit (and memory+swap) is set to its
  usage, and a small "balloon" process that we start in that cgroup allocates past the page cache
  there: the kernel reclaims the cache, then its OOM killer SIGKILLs the broker, exactly as when a
  container's memory limit is reached. The broker's oom_score_adj is raised to 1000 first so that
  it, not the balloon, is the victim (lowering the balloon's would need CAP_SYS_RESOURCE, which
  these machines' root lacks). We wait on the cgroup's oom_kill counter and the process's exit,
  then end the balloon and lift the limit. Why a balloon: lowering the limit step by step until the kernel refuses (the
  first design) left the broker thrashing on its own evicted code pages for up to 19 s before the
  kill; acks stopped and its commit thread sometimes caught up first, so what died depended on that
  stall, not on the broker's configuration. The balloon ends it within a fraction of a second.
- jvm_oom: an OutOfMemoryError inside the broker JVM: io.rmqchaos.OomAgent is loaded through the
  Attach API and fills the heap; with -XX:+ExitOnOutOfMemoryError (required by the spec) the JVM
  exits at once.
- kill (any signal), pause (cgroup freezer, for `duration`), restart (stop, start on the same
  store, wait until registered).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster.cgroups import Cgroup
from cluster.java import find_java
from cluster.local import LocalCluster, LocalNode
from cluster.procs import alive, wait_gone
from rmqchaos import paths
from rmqchaos.errors import UserError


class FaultError(UserError):
    pass


def _running(node: LocalNode, kind: str) -> tuple[int, int]:
    r = node.record
    if r is None or not alive(r.pid, r.starttime):
        raise FaultError(f"{kind} {node.name}: the node is not running", "check the fault schedule")
    return r.pid, r.starttime


def _exit_evidence(pid: int, start: int, timeout: float) -> bool:
    return wait_gone([(pid, start)], timeout)


def _dmesg_line(pid: int) -> str | None:
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [x for x in out.splitlines() if f"Killed process {pid} " in x]
    return lines[-1].strip() if lines else None


# The balloon: waits for its go (after being moved into the cgroup), then maps and touches memory in
# 8 MiB steps up to its cap; bounded in size and time, and ended by us as soon as the kill is counted.
_BALLOON = """
import mmap, sys, time
cap, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
sys.stdin.readline()
held, step = [], 8 << 20
flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
while len(held) * step < cap and time.monotonic() < until:
    m = mmap.mmap(-1, step, flags=flags)
    m[::4096] = b"x" * (step // 4096)
    held.append(m)
time.sleep(max(0.0, until - time.monotonic()))
"""


def _start_balloon(cg: Cgroup, cap: int, timeout: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _BALLOON, str(cap), str(timeout)], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cg.join_memory(p.pid)
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.close()
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p


def oom_kill(c: LocalCluster, node: LocalNode, timeout: float) -> dict[str, Any]:
    pid, start = _running(node, "oom_kill")
    cg = node.cgroup
    if cg is None or not cg.exists():
        raise FaultError(f"oom_kill {node.name}: it has no memory cgroup", "the local backend creates one per node")
    before = cg.oom_kills()
    usage = cg.memory_usage()
    cache = cg.file_cache()
    t0 = time.monotonic()
    balloon: subprocess.Popen | None = None
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text("1000")  # the victim is the broker, never the balloon
        limit = cg.cap_memory()
        # past the cache (reclaimable) by 256 MiB; the broker's heap and direct memory are larger, so
        # once it is dead the balloon fits and cannot cause a second kill
        balloon = _start_balloon(cg, cache + (256 << 20), timeout)
        deadline = t0 + timeout
        while cg.oom_kills() == before:
            if time.monotonic() > deadline:
                raise FaultError(f"oom_kill {node.name}: no OOM kill within {timeout:g}s (limit {limit} bytes)",
                                 "raise faults[].timeout or put load on the broker")
            time.sleep(0.005)
        killed_after = time.monotonic() - t0
        gone = _exit_evidence(pid, start, 30)
    finally:
        if balloon is not None:
            balloon.kill()  # ours, by PID
            balloon.wait()
        cg.clear_memory_limit()
    if not gone:
        raise FaultError(f"oom_kill {node.name}: the kernel counted an OOM kill but pid {pid} is still alive",
                         "see dmesg")
    c.run.processes.record_exit(node.name, pid, "oom-kill")
    return {"pid": pid, "usage_before": usage, "page_cache_before": cache, "limit": limit,
            "oom_kill_counter": [before, cg.oom_kills()], "kill_after_s": round(killed_after, 3),
            "dmesg": _dmesg_line(pid)}


def jvm_oom(c: LocalCluster, node: LocalNode, timeout: float) -> dict[str, Any]:
    pid, start = _running(node, "jvm_oom")
    home = paths.rocketmq_home(c.scenario.cluster.rocketmq_version)
    t0 = time.monotonic()
    r = subprocess.run([find_java()[0], "-cp", str(home / "rmqchaos-java.jar"), "io.rmqchaos.OomAgent", str(pid)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise FaultError(f"jvm_oom {node.name}: could not load the OOM agent (exit {r.returncode})",
                         (r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else "")
    if not _exit_evidence(pid, start, timeout):
        raise FaultError(f"jvm_oom {node.name}: the JVM did not exit within {timeout:g}s",
                         "is -XX:+ExitOnOutOfMemoryError in its jvm.options?")
    c.run.processes.record_exit(node.name, pid, "jvm-oom")
    log = node.dir / "stdout.log"
    line = next((x for x in reversed(log.read_text(errors="replace").splitlines())
                 if "OutOfMemoryError" in x), None) if log.exists() else None
    return {"pid": pid, "exit_after_s": round(time.monotonic() - t0, 3), "stdout": line}


def kill(c: LocalCluster, node: LocalNode, sig_name: str) -> dict[str, Any]:
    pid, _ = _running(node, "kill")
    name = sig_name.upper() if sig_name.upper().startswith("SIG") else "SIG" + sig_name.upper()
    node.kill(signal.Signals[name])
    return {"pid": pid, "signal": name}


def pause(c: LocalCluster, node: LocalNode, duration: float) -> dict[str, Any]:
    pid, _ = _running(node, "pause")
    node.pause()
    t0 = time.monotonic()
    try:
        time.sleep(duration)
    finally:
        node.resume()
    return {"pid": pid, "frozen_s": round(time.monotonic() - t0, 3)}


def restart(c: LocalCluster, node: LocalNode) -> dict[str, Any]:
    old = node.pid
    node.restart()
    return {"old_pid": old, "pid": node.pid}


def apply(c: LocalCluster, kind: str, target: str, duration: float | None, sig: str, timeout: float) -> dict[str, Any]:
    node = c.node(target)
    if kind == "oom_kill":
        return oom_kill(c, node, timeout)
    if kind == "jvm_oom":
        return jvm_oom(c, node, timeout)
    if kind == "kill":
        return kill(c, node, sig)
    if kind == "pause":
        return pause(c, node, duration or 5.0)
    if kind == "restart":
        return restart(c, node)
    raise FaultError(f"unknown fault kind {kind!r}")

