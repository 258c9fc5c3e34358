"""One cgroup per node (memory, blkio/io, freezer, cpu), so a fault acts on exactly that process.

cgroup v1 (what these machines mount: one hierarchy per controller under /sys/fs/cgroup/<ctrl>)
and cgroup v2 (a unified hierarchy at /sys/fs/cgroup) are both supported; v1 wins when the
per-controller hierarchies exist, since the v2 mount beside them has no controllers.
"""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

ROOT = Path(os.environ.get("RMQCHAOS_CGROUP_ROOT", "/sys/fs/cgroup"))
PREFIX = "rmqchaos"
V1_CONTROLLERS = ("memory", "blkio", "freezer", "cpu")


def version() -> int:
    if all((ROOT / c / "cgroup.procs").exists() for c in ("memory", "freezer")):
        return 1
    if (ROOT / "cgroup.controllers").exists():
        return 2
    return 0


class Cgroup:
    """A node's cgroup, identified by its relative path `rmqchaos/<run_id>/<node>`."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.v = version()

    def dirs(self) -> list[Path]:
        if self.v == 1:
            return [ROOT / c / self.rel for c in V1_CONTROLLERS if (ROOT / c).is_dir()]
        if self.v == 2:
            return [ROOT / self.rel]
        return []

    def create(self) -> None:
        if self.v == 2:
            _enable_v2_controllers(self.rel)
        for d in self.dirs():
            d.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        return any(d.is_dir() for d in self.dirs())

    def procs_files(self) -> list[str]:
        """Files a child writes its pid into (from preexec_fn) to join this cgroup before exec."""
        return [str(d / "cgroup.procs") for d in self.dirs()]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs():
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    # ------------------------------------------------------------ memory
    def _mem(self) -> Path:
        return ROOT / "memory" / self.rel if self.v == 1 else ROOT / self.rel

    def memory_usage(self) -> int | None:
        f = self._mem() / ("memory.usage_in_bytes" if self.v == 1 else "memory.current")
        try:
            return int(f.read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """The kernel's OOM-kill counter for this cgroup (v1 memory.oom_control, v2 memory.events)."""
        f = self._mem() / ("memory.oom_control" if self.v == 1 else "memory.events")
        try:
            for line in f.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except OSError:
            pass
        return 0

    def _write(self, name: str, value: str) -> None:
        fd = os.open(self._mem() / name, os.O_WRONLY)  # unbuffered: the kernel's EBUSY reaches us
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def file_cache(self) -> int:
        """Bytes of file pages (page cache) charged to this cgroup: what reclaim can take back."""
        names = ("total_active_file", "total_inactive_file") if self.v == 1 else ("active_file", "inactive_file")
        try:
            stat = dict(line.split() for line in (self._mem() / "memory.stat").read_text().splitlines())
        except (OSError, ValueError):
            return 0
        return sum(int(stat.get(n, 0)) for n in names)

    def cap_memory(self, attempts: int = 20, page_cache: int | None = None) -> int:
        """Set the memory limit (and memory+swap, so nothing escapes to swap) to the current usage:
        no slack left, so the cgroup's next charges reclaim its page cache and, once that is gone,
        end in the kernel's OOM killer. With `page_cache` (bytes): to the usage less its page cache
        plus that many bytes (the kernel reclaims the page cache down to it). Returns the limit set."""
        for _ in range(attempts):
            usage = self.memory_usage()
            if usage is None:
                raise OSError(f"no memory controller for cgroup {self.rel}")
            if page_cache is not None:
                usage = usage - self.file_cache() + page_cache
            try:
                if self.v == 1:  # memory must stay <= memory+swap: lower memory first, raise it last
                    names = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                    if usage > int((self._mem() / names[0]).read_text()):
                        names.reverse()
                    for n in names:
                        self._write(n, str(usage))
                else:
                    self._write("memory.swap.max", "0")
                    self._write("memory.max", str(usage))
                return usage
            except OSError as e:
                if e.errno != errno.EBUSY:  # EBUSY: usage grew past it and could not be reclaimed; re-read
                    raise
        raise OSError(f"cgroup {self.rel}: could not set its memory limit to its usage")

    def join_memory(self, pid: int) -> None:
        """Move a process into this cgroup's memory controller only (its later charges count here)."""
        self._write("cgroup.procs", str(pid))

    def clear_memory_limit(self) -> None:
        if self.v == 1:
            self._write("memory.memsw.limit_in_bytes", "-1")  # memsw first: it must stay >= memory
            self._write("memory.limit_in_bytes", "-1")
        elif self.v == 2:
            self._write("memory.max", "max")
            self._write("memory.swap.max", "max")

    # ------------------------------------------------------------ block I/O
    def throttle_io(self, majmin: str, limits: dict[str, int]) -> None:
        """Cap this cgroup's I/O on one whole disk: read_bps, write_bps, read_iops, write_iops (0: no
        cap). v1 throttles what the cgroup's tasks submit themselves (direct I/O, fsync/msync of
        their own dirty pages), not the kernel's background writeback."""
        if self.v == 1:
            d = ROOT / "blkio" / self.rel
            for key in ("read_bps", "write_bps", "read_iops", "write_iops"):
                (d / f"blkio.throttle.{key}_device").write_text(f"{majmin} {limits.get(key, 0)}")
        elif self.v == 2:
            names = {"read_bps": "rbps", "write_bps": "wbps", "read_iops": "riops", "write_iops": "wiops"}
            vals = " ".join(f"{n}={limits.get(k) or 'max'}" for k, n in names.items())
            (ROOT / self.rel / "io.max").write_text(f"{majmin} {vals}")
        else:
            raise OSError("no cgroup hierarchy with blkio/io is mounted")

    def io_throttle(self, majmin: str) -> dict[str, int]:
        """The caps in force on one disk (what the kernel reads back)."""
        out: dict[str, int] = {}
        if self.v == 1:
            for key in ("read_bps", "write_bps", "read_iops", "write_iops"):
                for line in (ROOT / "blkio" / self.rel / f"blkio.throttle.{key}_device").read_text().splitlines():
                    dev, val = line.split()
                    if dev == majmin:
                        out[key] = int(val)
        elif self.v == 2:
            names = {"rbps": "read_bps", "wbps": "write_bps", "riops": "read_iops", "wiops": "write_iops"}
            for line in (ROOT / self.rel / "io.max").read_text().splitlines():
                dev, *kv = line.split()
                if dev == majmin:
                    out = {names[k]: int(v) for k, v in (x.split("=") for x in kv) if v != "max"}
        return out

    # ------------------------------------------------------------ freezer
    def freeze(self, frozen: bool, timeout: float = 10.0) -> None:
        self.freeze_start(frozen)
        self.wait_frozen(frozen, timeout)

    def freeze_start(self, frozen: bool) -> None:
        """Ask the kernel to freeze (or thaw) every task, without waiting: a task stops at once unless
        it is inside a call that must return first (a FUSE request)."""
        if self.v == 1:
            (ROOT / "freezer" / self.rel / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
        elif self.v == 2:
            (ROOT / self.rel / "cgroup.freeze").write_text("1" if frozen else "0")
        else:
            raise OSError("no cgroup hierarchy with a freezer is mounted")

    def wait_frozen(self, frozen: bool, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        if self.v == 1:
            f, want = ROOT / "freezer" / self.rel / "freezer.state", "FROZEN" if frozen else "THAWED"
            done = lambda: f.read_text().strip() == want  # noqa: E731
        else:
            want = f"frozen {1 if frozen else 0}"
            done = lambda: want in (ROOT / self.rel / "cgroup.events").read_text()  # noqa: E731
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"cgroup {self.rel} did not reach {want}")
            time.sleep(0.002)

    def frozen(self) -> bool:
        try:
            if self.v == 1:
                return (ROOT / "freezer" / self.rel / "freezer.state").read_text().strip() != "THAWED"
            if self.v == 2:
                return "frozen 1" in (ROOT / self.rel / "cgroup.events").read_text()
        except OSError:
            pass
        return False

    def remove(self, timeout: float = 5.0) -> bool:
        """rmdir every controller's directory (they must be empty of tasks). True when all gone."""
        if self.frozen():
            try:
                self.freeze(False, timeout=2)
            except (OSError, TimeoutError):
                pass
        ok = True
        deadline = time.monotonic() + timeout
        for d in self.dirs():
            while d.is_dir():
                try:
                    d.rmdir()
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        break
                    if time.monotonic() > deadline:
                        ok = False
                        break
                    time.sleep(0.05)
        return ok


def _enable_v2_controllers(rel: str) -> None:
    """v2 needs each controller enabled in every ancestor's cgroup.subtree_control."""
    cur = ROOT
    for part in Path(rel).parts[:-1]:
        avail = (cur / "cgroup.controllers").read_text().split()
        want = [c for c in ("memory", "io", "cpu") if c in avail]
        if want:
            try:
                (cur / "cgroup.subtree_control").write_text(" ".join("+" + c for c in want))
            except OSError:
                pass
        cur = cur / part
        cur.mkdir(exist_ok=True)


def remove_empty_parents(rel: str) -> None:
    """Drop rmqchaos/<run_id> once its node groups are gone (never the shared rmqchaos/ root)."""
    parent = str(Path(rel).parent)
    if parent in (PREFIX, ".", ""):
        return
    for d in Cgroup(parent).dirs():
        try:
            d.rmdir()
        except OSError:
            pass
