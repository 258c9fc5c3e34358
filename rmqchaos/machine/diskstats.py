"""The block device under a path and its kernel I/O counters (/proc/diskstats), so disk noise and
disk pressure are measured on the device the broker's store is on, not assumed.

Field meanings: Documentation/admin-guide/iostats.rst. Flush requests (fields 16-17 after the name, kernels >= 5.5)
are what fsync/fdatasync turn into on a device with a volatile write cache.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rmqchaos.errors import UserError
from rmqchaos.progress import say

SECTOR = 512


@dataclass(frozen=True)
class Device:
    name: str  # e.g. vda
    major: int
    minor: int

    @property
    def majmin(self) -> str:
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True)
class Counters:
    writes: int  # write requests completed
    write_bytes: int
    write_ms: int  # time spent by write requests (sum over requests)
    flushes: int  # flush requests completed (fsync on a device with a write cache)
    flush_ms: int
    io_ms: int  # time the device had I/O in flight

    def minus(self, o: "Counters") -> "Counters":
        return Counters(*(a - b for a, b in zip(asdict(self).values(), asdict(o).values())))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def rates(self, secs: float) -> dict[str, float]:
        """This difference over `secs` seconds: MB/s and writes/s written, flushes/s, mean ms per
        completed write, and the fraction of the time with I/O in flight."""
        return {"write_mb_s": round(self.write_bytes / secs / 1e6, 3), "writes_s": round(self.writes / secs, 1),
                "flushes_s": round(self.flushes / secs, 1),
                "await_ms": round(self.write_ms / self.writes, 2) if self.writes else 0.0,
                "util": round(min(1.0, self.io_ms / 1000 / secs), 3)}


def device_of(path: str | Path) -> Device:
    """The whole disk holding `path` (a partition resolves to its disk: blkio throttles whole disks)."""
    p = Path(path)
    while not p.exists():
        p = p.parent
    st = os.stat(p)
    sys_dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not sys_dev.exists():
        raise UserError(f"{path} is not on a block device (device {os.major(st.st_dev)}:{os.minor(st.st_dev)})",
                        "put the run directory (--out / RMQCHAOS_RUNS) on a local disk")
    real = sys_dev.resolve()
    if (real / "partition").exists():
        real = real.parent
    major, minor = (int(x) for x in (real / "dev").read_text().split(":"))
    return Device(real.name, major, minor)


def read(dev: Device) -> Counters:
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == dev.name:
            v = [int(x) for x in f[3:]]
            flushes, flush_ms = (v[15], v[16]) if len(v) >= 17 else (0, 0)
            return Counters(writes=v[4], write_bytes=v[6] * SECTOR, write_ms=v[7], flushes=flushes,
                            flush_ms=flush_ms, io_ms=v[9])
    raise UserError(f"device {dev.name} is not in /proc/diskstats", "is /proc mounted?")


class Sampler:
    """Once a second, the device's rates over that second on the run's clock (epoch ms), appended to
    a JSON-lines file: write_mb_s, writes_s, flushes_s, await_ms (mean ms per completed write),
    util (fraction of the second with I/O in flight). A daemon thread; `close()` ends it."""

    def __init__(self, dev: Device, out: Path, interval: float = 1.0) -> None:
        self.dev, self.out, self.interval = dev, out, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rmqchaos-diskstats", daemon=True)

    def start(self) -> "Sampler":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        prev, t_prev = read(self.dev), time.monotonic()
        with open(self.out, "a") as fh:
            while not self._stop.wait(self.interval - (time.monotonic() - t_prev) % self.interval):
                cur, t = read(self.dev), time.monotonic()
                fh.write(json.dumps({"ts_ms": int(time.time() * 1000), "device": self.dev.name,
                                     **cur.minus(prev).rates(t - t_prev)}) + "\n")
                fh.flush()
                prev, t_prev = cur, t

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def sampler(path: Path, out: Path) -> Sampler | None:
    """A started Sampler of the disk under `path`; None (and a note) when it is not on a block device."""
    try:
        return Sampler(device_of(path), out).start()
    except UserError as e:
        say(f"no disk metrics: {e.line()}")
        return None


# RocketMQ's own disk thresholds (DefaultMessageStore, system properties rocketmq.broker.*, defaults
# in 5.x): above diskSpaceCleanForciblyRatio a broker deletes its oldest commit log files at once,
# expired or not; above diskSpaceWarningLevelRatio it refuses every write. Usage is theirs:
# UtilAll.getDiskPartitionSpaceUsedPercent, used / (used + usable), used = total - free.
CLEAN_FORCIBLY_RATIO, WARNING_LEVEL_RATIO = 0.85, 0.90


def used_ratio(path: str | Path) -> float:
    """The share of the file system under `path` in use, as a broker computes it."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / (used + st.f_bavail) if used + st.f_bavail else 0.0


def full_disk_error(path: str | Path, used: float) -> UserError | None:
    """The one line that refuses a cluster whose stores would sit on a disk `used` full (None: room)."""
    if used < CLEAN_FORCIBLY_RATIO:
        return None
    what = "refuse every write" if used >= WARNING_LEVEL_RATIO else "delete their oldest commit log files at once"
    return UserError(f"the disk under {path} is {used:.0%} full: RocketMQ's brokers {what} above "
                     f"{WARNING_LEVEL_RATIO if used >= WARNING_LEVEL_RATIO else CLEAN_FORCIBLY_RATIO:.0%}, so no "
                     f"run on it could tell loss from a full disk",
                     "free space below 85% (old runs: rm -rf runs/<old>; rmqchaos cluster down --all) and run again")
