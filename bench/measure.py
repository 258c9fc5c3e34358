"""What one benchmark process cost: its acknowledged messages and attempts, its wall time from spawn
to exit and its CPU-seconds (wait4's rusage: user + sys), start-up included."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqchaos.errors import UserError
from rmqchaos.machine.procs import spawn


def per_s(n: int, seconds: float) -> float:
    """n per second of `seconds` (0 for none)."""
    return n / seconds if seconds else 0.0


def cpu_per_10k(cpu_s: float, acked: int) -> float:
    """CPU-seconds per 10,000 acknowledged messages (infinite for none)."""
    return cpu_s / acked * 10_000 if acked else float("inf")


@dataclass
class Sample:
    who: str  # "python" | "java"
    acked: int
    attempts: int
    wall_s: float
    cpu_s: float  # user + system
    sys_s: float = 0.0  # of which in the kernel (the Locust benchmarks only)
    minflt: int = 0  # minor page faults (the Locust benchmarks only)

    @property
    def rate(self) -> float:
        return per_s(self.acked, self.wall_s)

    @property
    def cpu_per_10k(self) -> float:
        return cpu_per_10k(self.cpu_s, self.acked)


def measure(cmd: list[str], env: dict[str, str] | None, timeout: float,
            workdir: Path) -> tuple[str, float, Any, int]:
    """Run cmd to completion: (stdout, wall s, the child's rusage, exit code)."""
    out_f = workdir / "out.txt"
    with open(out_f, "wb") as out:
        t0 = time.monotonic()
        p = spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir, die_with_parent=True)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                raise UserError(f"benchmark process {cmd[0]} did not finish within {timeout:.0f}s",
                                "is the cluster healthy? (rmqchaos cluster status)")
            time.sleep(0.01)
        wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return out_f.read_text(errors="replace"), wall, ru, p.returncode
