"""A node's own clock: libfaketime preloaded into its JVM (cluster.faketime), driven by a control file
the platform rewrites at run time (the `clock` fault). Measured here (docs/faults.md, clock):

- the file is re-read once a wall-clock second (FAKETIME_CACHE_DURATION=0: ~75 ns a call, where
  FAKETIME_NO_CACHE parses the file on every call, ~2.3 us), so a change shows within 1 s;
- a malformed line makes libfaketime exit(1), killing the node: lines are only written by `line()`,
  and replaced atomically;
- by default only the wall clock moves (as an NTP step does): FAKETIME_DONT_FAKE_MONOTONIC=1 with
  FAKETIME_FORCE_MONOTONIC_FIX=0 (without the latter, Debian's 0.9.10 on glibc >= 2.30 returns every
  timed wait at once and the JVM spins); System.nanoTime and the scheduled executors stay real.
  With `monotonic`, CLOCK_MONOTONIC moves too (needed for a drift rate): nanoTime follows the faked
  clock, a backward step stops nanoTime-based schedulers until it catches up, a forward one bursts them;
- each preloaded process leaves /dev/shm/faketime_shm_<pid> and sem.faketime_sem_<pid> when it is
  killed, which would fail a later process given the same pid: rmqchaos.machine.procs removes a node's own
  when it records its end.
The node's time is read back from the node itself: the first line of `jcmd <pid> Thread.print` is
the JVM's own local time (whole seconds)."""
from __future__ import annotations

import calendar
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Callable

from rmqchaos.errors import UserError

LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
CONTROL = "clock.rc"  # in the node's directory


def lib() -> Path:
    if not LIB.exists():
        raise UserError(f"libfaketime is not installed ({LIB} is missing), so no node can have a clock of its own",
                        "run scripts/setup.sh, or apt-get install faketime libfaketime")
    return LIB


def env(control: Path, monotonic: bool) -> dict[str, str]:
    """The environment that starts a JVM under its own clock, driven by the file `control` (a node's:
    <node dir>/clock.rc); LD_PRELOAD is the caller's to join."""
    if not control.exists():
        write(control, 0.0)
    e = {"FAKETIME_TIMESTAMP_FILE": str(control), "FAKETIME_CACHE_DURATION": "0", "FAKETIME_DONT_RESET": "1",
         "LANG": "C.UTF-8", "TZ": "UTC"}  # C locale: the rate's decimal point; UTC: the read-back's time zone
    if not monotonic:
        e.update({"FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"})
    return e


def line(offset_s: float, rate: float | None = None) -> str:
    """The control line: an offset in seconds (sub-second as a decimal), and a rate (x) if asked."""
    if not (abs(offset_s) < 10 * 365 * 86400) or (rate is not None and not 0 < rate <= 100):
        raise ValueError(f"clock offset {offset_s} / rate {rate} out of range")
    out = f"{'+' if offset_s >= 0 else '-'}{abs(offset_s):.3f}"
    return out + (f" x{rate:.6f}" if rate is not None else "")


def write(control: Path, offset_s: float, rate: float | None = None) -> str:
    """Set the clock `control` drives to the host's plus `offset_s` (atomically: a torn line would kill
    the process)."""
    text = line(offset_s, rate)
    tmp = control.with_name(control.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, control)
    return text


def offset_of(control: Path) -> float:
    """The offset (s) the control file sets now; 0 when there is none. A process started under it
    begins at this offset (a node or consumer started again keeps its clock)."""
    try:
        return float(control.read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0


def _jcmd(jcmd: str, pid: int, command: str, clock: Callable[[], float], timeout: float) -> tuple[str, float] | None:
    """`jcmd <pid> <command>`'s output and `clock` at the middle of the call; None if the JVM did not
    answer. jcmd runs without the node's preload: its own clock is the host's."""
    t0 = clock()
    try:
        out = subprocess.run([jcmd, str(pid), command], capture_output=True, text=True, timeout=timeout,
                             env={k: v for k, v in os.environ.items() if not k.startswith(("FAKETIME", "LD_PRELOAD"))})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout, (t0 + clock()) / 2) if out.returncode == 0 else None


def uptime(jcmd: str, pid: int, timeout: float = 20.0) -> tuple[float, float] | None:
    """(the JVM's uptime by its own monotonic clock, `jcmd VM.uptime`, and the host's monotonic time at
    the middle of the read) in seconds; None if it did not answer. A jump in the first that the second
    does not show is the node's monotonic clock moved (cluster.faketime_monotonic)."""
    r = _jcmd(jcmd, pid, "VM.uptime", time.monotonic, timeout)
    m = re.search(r"^(-?\d+(?:\.\d+)?) s$", r[0], re.M) if r else None
    return None if r is None or m is None else (float(m.group(1)), r[1])


_STAMP = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$", re.M)


def node_time(jcmd: str, pid: int, timeout: float = 20.0) -> tuple[float, float] | None:
    """(the node's own time, the host's time at the middle of the read) in epoch seconds, from the
    JVM's Thread.print header (whole seconds, in the node's TZ=UTC); None if the JVM did not answer."""
    r = _jcmd(jcmd, pid, "Thread.print", time.time, timeout)
    m = _STAMP.search(r[0][:400]) if r else None
    if r is None or m is None:
        return None
    node = calendar.timegm(tuple(int(x) for x in m.groups()) + (0, 0, 0))  # type: ignore[arg-type]
    return float(node), r[1]
