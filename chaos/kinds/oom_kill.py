"""oom_kill: a real kernel OOM kill of a node, as when a container's memory limit is reached.

The node's memory limit (and memory+swap) is set to its usage, and a small "balloon" process
started inside the node's memory domain allocates past the page cache there: the kernel reclaims
the cache, then its OOM killer SIGKILLs the node. The node is made the preferred victim first
(oom_score_adj 1000; lowering the balloon's instead would need CAP_SYS_RESOURCE, which these
machines' root lacks). We wait on the domain's oom_kill counter and the process's exit, then end
the balloon and lift the limit. Its intent: the pid gone, and the domain's OOM-kill counter risen
(memory.oom_control / memory.events: the kernel's OOM killer did it, not something else), and a
container engine's own OOMKilled where there is one. Why a balloon: lowering the limit step by step until the kernel
refuses (the first design) left the broker thrashing on its own evicted code pages for up to 19 s
before the kill; acks stopped and its commit thread sometimes caught up first, so what died
depended on that stall, not on the broker's configuration. The balloon ends it within a second.
"""
from __future__ import annotations

import random
import subprocess
import sys
import time
from typing import Any

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.protocol import FaultError, FaultKind, register

# Waits for its go (after being moved into the memory domain), then maps and touches memory in
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


def dmesg_line(pid: int) -> str | None:
    """The kernel's "Killed process PID" line, if dmesg can be read."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [x for x in out.splitlines() if f"Killed process {pid} " in x]
    return lines[-1].strip() if lines else None


def oom_intent(node: str, pid: int, gone: bool, kill_after_s: float, counter: tuple[int, int],
               engine_oom: bool | None) -> dict[str, Any]:
    """From what was read: the pid `gone`, the domain's OOM-kill counter before and after, the engine's
    OOMKilled (None: no engine)."""
    ms = [happened("died", f"pid {pid}", gone, f"pid {pid} gone, killed {kill_after_s:.2f} s after the squeeze began"
                   if gone else f"pid {pid} still alive"),
          happened("OOM killer", node, counter[1] > counter[0], f"the kernel's OOM-kill count went {counter[0]} -> "
                   f"{counter[1]}")]
    if engine_oom is not None:
        ms.append(happened("engine OOMKilled", node, engine_oom, "the engine records OOMKilled" if engine_oom else
                           "the engine records no OOM kill"))
    return intent(ms, f"kernel OOM kill of {node}")


@register
class OomKill(FaultKind):
    name = "oom_kill"
    ends_node = True
    roles = True

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        target, hit = topo.broker_target(rng)
        back = seconds(rng, 5, 30)
        return Draw({"target": target, "restart_after": dur(back)}, back + 20, hit)

    def start(self) -> None:
        node, timeout = self.node, self.fault.timeout
        pid = self.running_pid()
        mem = node.memory
        before, usage, cache = mem.oom_kills(), mem.usage(), mem.page_cache()
        t0 = time.monotonic()
        balloon: subprocess.Popen | None = None
        try:
            node.make_oom_victim()
            limit = mem.cap()
            # past the cache (reclaimable) by 256 MiB; the broker's heap and direct memory are larger,
            # so once it is dead the balloon fits and cannot cause a second kill
            balloon = node.exec([sys.executable, "-c", _BALLOON, str(cache + (256 << 20)), str(timeout)])
            assert balloon.stdin is not None
            balloon.stdin.write(b"go\n")
            balloon.stdin.close()
            deadline = t0 + timeout
            while (after := mem.oom_kills()) == before:  # read here: a container's cgroup goes when it stops
                if time.monotonic() > deadline:
                    raise FaultError(f"oom_kill {node.name}: no OOM kill within {timeout:g}s (limit {limit} bytes)",
                                     "raise faults[].timeout or put load on the broker")
                time.sleep(0.005)
            killed_after = time.monotonic() - t0
            gone = node.wait_exit(pid, 30)
        finally:
            if balloon is not None:
                balloon.kill()  # ours, by PID
                balloon.wait()
            mem.clear_limit()
        if not gone:
            raise FaultError(f"oom_kill {node.name}: the kernel counted an OOM kill but pid {pid} is still alive",
                             "see dmesg")
        node.mark_exited(pid, "oom-kill")
        confirmed = node.exit_evidence(pid)  # a container engine's own verdict (OOMKilled), where there is one
        if confirmed.get("oom_killed") is False:
            raise FaultError(f"oom_kill {node.name}: pid {pid} was killed but the engine does not record an OOM kill "
                             f"({confirmed})", "see dmesg and the engine's log")
        oom = confirmed.get("oom_killed")
        self.evidence = {"intent": oom_intent(node.name, pid, gone, killed_after, (before, after),
                                              oom if isinstance(oom, bool) else None),
                         **confirmed, "pid": pid, "usage_before": usage, "page_cache_before": cache, "limit": limit,
                         "oom_kill_counter": [before, after], "kill_after_s": round(killed_after, 3),
                         "dmesg": dmesg_line(pid)}
