"""powerfs: a node's store on a FUSE layer that can forget every write never fsynced (docs/powerfs.md).

The layer is the Go binary scripts/setup.sh builds from powerfs/ into .cache/powerfs/bin/powerfs.
One `PowerFS` is one mount: its server process (started with the one spawn helper and recorded in
the run's processes.jsonl), its control socket (one command a line, JSON back) and its FUSE
connection. A power loss is `abort()` (the kernel's dirty pages never reach the layer), `drop()`
(every file back to its synced bytes), `unmount()`, and a new mount.

Every mount's source in /proc/self/mountinfo is `rmqchaos-powerfs:<server pid>:<its start time>`,
so `reap_under` and `reap_lost` find the platform's mounts, and their servers, without any file.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqchaos.errors import UserError
from rmqchaos.machine.paths import CACHE
from rmqchaos.machine.procs import ProcessLog, ProcRecord, alive, record_spawn, spawn, starttime, stop, wait_gone
from rmqchaos.machine.wait import poll_until

BINARY = CACHE / "powerfs" / "bin" / "powerfs"
FSNAME = "rmqchaos-powerfs"  # powerfs/main.go FsName
FUSE_DEV = Path("/dev/fuse")
CONNECTIONS = Path("/sys/fs/fuse/connections")  # fusectl: <conn>/abort
MOUNTINFO = Path("/proc/self/mountinfo")
SOCK_MAX = 107  # sun_path is 108 bytes with its NUL

_libc = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2


@dataclass(frozen=True)
class Mount:
    """One of our mounts as /proc/self/mountinfo shows it."""
    mount_point: Path
    conn: int  # the minor of its st_dev: /sys/fs/fuse/connections/<conn>
    pid: int
    start: int


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[Mount]:
    """Every powerfs mount of the platform's in this mount namespace."""
    out = []
    for line in MOUNTINFO.read_text().splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(r) < 2 or not r[1].startswith(FSNAME + ":"):
            continue
        try:
            _, pid, start = r[1].split(":")
            out.append(Mount(Path(_unescape(f[4])), int(f[2].split(":")[1]), int(pid), int(start)))
        except ValueError:
            continue
    return out


def _is_mount_point(p: Path) -> bool:
    return os.path.ismount(p) or any(m.mount_point == p for m in mounts())


def _ensure_fusectl() -> None:
    """fusectl holds each connection's abort file; systemd mounts it at boot, a bare VM may not."""
    if CONNECTIONS.is_dir() and any(CONNECTIONS.iterdir()):
        return
    if "fusectl" in MOUNTINFO.read_text():
        return
    if _libc.mount(b"fusectl", str(CONNECTIONS).encode(), b"fusectl", 0, None) != 0:
        e = ctypes.get_errno()
        raise UserError(f"cannot mount fusectl at {CONNECTIONS}: {os.strerror(e)}",
                        "an abort needs it: mount -t fusectl fusectl /sys/fs/fuse/connections (as root)")


def _lazy_unmount(p: Path) -> bool:
    """umount -l: gone from the namespace now; processes still inside keep their files. True if it was mounted."""
    if _libc.umount2(str(p).encode(), _MNT_DETACH) == 0:
        return True
    e = ctypes.get_errno()
    if e in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
        return False
    raise UserError(f"cannot unmount {p}: {os.strerror(e)}", "unmount it by hand: umount -l " + str(p))


def _abort_conn(conn: int) -> bool:
    f = CONNECTIONS / str(conn) / "abort"
    try:
        f.write_text("1")
        return True
    except OSError:
        return False  # the connection is already gone


class PowerFS:
    """One mount of the layer: `mount_point` shows `real_dir`; `control_sock` drives the server."""

    def __init__(self, real_dir: Path, mount_point: Path, control_sock: Path, pid: int, start: int | None,
                 conn: int, log: ProcessLog | None = None, name: str = "powerfs",
                 proc: subprocess.Popen | None = None) -> None:
        self.real_dir, self.mount_point, self.control_sock = real_dir, mount_point, control_sock
        self.pid, self.start, self.conn, self.log, self.name, self._proc = pid, start, conn, log, name, proc

    @classmethod
    def mount(cls, real_dir: Path, mount_point: Path, control_sock: Path, log: ProcessLog, *,
              name: str = "powerfs", log_file: Path | None = None, writeback: bool = True,
              auto_da_alloc: bool = True, expire_s: float | None = None, timeout: float = 10,
              binary: Path = BINARY) -> "PowerFS":
        """Start a server that mounts `real_dir` at `mount_point`, recorded in `log` (the run's
        processes.jsonl) as `name`; return once the mount is in mountinfo. The mount point must lie
        inside the run directory (the directory holding `log`) and must not be a mount point already.
        `expire_s`: durable by age, the kernel's dirty_expire (docs/powerfs.md); None: only a sync."""
        real_dir, mount_point, control_sock = (Path(p).resolve() for p in (real_dir, mount_point, control_sock))
        run_dir = log.path.parent.resolve()
        if not binary.is_file():
            raise UserError(f"{binary} is not built (power loss needs the powerfs layer)",
                            "run scripts/setup.sh with Go installed (apt-get install golang-go)")
        if not FUSE_DEV.exists():
            raise UserError(f"{FUSE_DEV} is missing (power loss needs FUSE)",
                            "load the fuse module (modprobe fuse) or run on a host that has it")
        if mount_point == run_dir or not mount_point.is_relative_to(run_dir):
            raise UserError(f"refusing to mount powerfs at {mount_point}: outside the run directory {run_dir}",
                            "mount points must lie inside the run directory")
        if _is_mount_point(mount_point):
            raise UserError(f"refusing to mount powerfs at {mount_point}: it is a mount point already",
                            "unmount it first (umount -l) or choose another directory")
        if not real_dir.is_dir():
            raise UserError(f"{real_dir} is not a directory", "create the real directory first")
        if len(str(control_sock)) > SOCK_MAX:
            raise UserError(f"control socket path {control_sock} is longer than {SOCK_MAX} bytes",
                            "choose a shorter run directory")
        _ensure_fusectl()
        mount_point.mkdir(parents=True, exist_ok=True)
        log_file = log_file or control_sock.with_suffix(".log")
        cmd = [str(binary), "-root", str(real_dir), "-mount", str(mount_point), "-control", str(control_sock),
               f"-writeback={str(writeback).lower()}", f"-auto-da-alloc={str(auto_da_alloc).lower()}"]
        if expire_s:
            cmd.append(f"-expire={int(expire_s * 1000)}ms")
        # its own session and no death signal: the mount outlives the CLI that made it (`cluster up`),
        # and `down` or orphan reaping ends it by PID
        proc = spawn(cmd, log_file=log_file, new_session=True)
        record_spawn(log, name, proc, cmd)

        def exited() -> None:
            if proc.poll() is not None:
                raise UserError(f"powerfs exited with {proc.returncode} before {mount_point} was mounted",
                                f"see {log_file}", detail=_tail(log_file))

        def mounted() -> Mount | None:
            """In mountinfo, and the server says it serves: its mount call has returned (go-fuse's
            poll-hack open on the mount done), so a quit cannot catch it halfway."""
            m = next((m for m in mounts() if m.mount_point == mount_point and m.pid == proc.pid), None)
            if m is None:
                return None
            try:
                return m if PowerFS(real_dir, mount_point, control_sock, proc.pid, m.start, m.conn).stats()["serving"] else None
            except UserError:
                return None
        try:
            m = poll_until(mounted, timeout, f"powerfs to mount {mount_point}", interval=0.05, check=exited,
                           hint=f"see {log_file}")
        except BaseException:
            stop(proc.pid, starttime(proc.pid), 2)
            proc.poll()
            raise
        assert m is not None
        return cls(real_dir, mount_point, control_sock, proc.pid, m.start, m.conn, log, name, proc)

    @classmethod
    def attach(cls, real_dir: Path, mount_point: Path, control_sock: Path, log: ProcessLog | None = None,
               name: str = "powerfs") -> "PowerFS":
        """The mount another process made (a fault acting on a mount `up` made), found in mountinfo."""
        mp = Path(mount_point).resolve()
        m = next((m for m in mounts() if m.mount_point == mp), None)
        if m is None:
            raise UserError(f"no powerfs mount at {mp}", "mount it first")
        return cls(Path(real_dir).resolve(), mp, Path(control_sock).resolve(), m.pid, m.start, m.conn, log, name)

    # --- the control socket ---------------------------------------------------------------------

    def command(self, line: str, timeout: float = 30) -> dict[str, Any]:
        """One command, its JSON answer; a refusal by the server is a UserError."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(self.control_sock))
                s.sendall(line.encode() + b"\n")
                with s.makefile("rb") as f:
                    raw = f.readline()
        except OSError as e:
            raise UserError(f"powerfs control socket {self.control_sock}: {e.strerror or e}",
                            f"is its server (pid {self.pid}) still running?") from None
        if not raw:
            raise UserError(f"powerfs at {self.mount_point} closed its control socket on {line.split()[0]!r}",
                            f"see its log beside {self.control_sock}")
        r = json.loads(raw)
        if not r.get("ok"):
            raise UserError(f"powerfs at {self.mount_point} refused {line.split()[0]!r}: {r.get('error')}",
                            "see docs/powerfs.md")
        return r

    def stats(self) -> dict[str, Any]:
        """Per file: writes, bytes_written, syncs, auto_syncs, last_sync_ms, unsynced_bytes; totals;
        serving (the kernel still talks to it), ops_after_fence, failures injected."""
        return self.command("stats")

    def fence(self) -> int:
        """From now on the layer makes nothing durable: every later write or sync (one in flight too)
        fails EIO and is counted (`ops_after_fence`). Returns the fence's time (unix ms); idempotent."""
        return int(self.command("fence")["fenced_ms"])

    def abort(self, timeout: float = 10) -> dict[str, Any]:
        """Cut the kernel off: fence the layer (any later write or sync is refused and counted),
        then abort the FUSE connection, so no dirty page of the kernel's reaches the layer again.
        Returns the stats once the server saw the connection end."""
        self.command("fence")
        _ensure_fusectl()
        _abort_conn(self.conn)
        return poll_until(lambda: (lambda s: s if not s["serving"] else None)(self.stats()), timeout,
                          f"powerfs at {self.mount_point} to see its connection {self.conn} end", interval=0.05)

    def drop(self) -> dict[str, Any]:
        """Every file back to its bytes and size at its last sync (after `abort`). Evidence per file:
        path, bytes, ranges [start, end), synced_size, size_before, last_sync_ms, syncs, auto_syncs."""
        return self.command("drop", timeout=300)

    def fail(self, op: str, err: str, glob: str, until_ms: int | None = None) -> dict[str, Any]:
        """Answer `op` (fsync or write) on files matching `glob` (relative to the mount root, `*` stops
        at `/`) with `err` (EIO or ENOSPC), until `until_ms` (unix ms) if given."""
        for word in (op, err, glob):
            if not word or any(c.isspace() for c in word):
                raise UserError(f"powerfs fail: {word!r} must be one word", "e.g. fail('fsync', 'EIO', 'commitlog/*')")
        return self.command(f"fail {op} {err} {glob}" + (f" {int(until_ms)}" if until_ms else ""))

    def slow(self, op: str, ms: int, glob: str, until_ms: int | None = None) -> dict[str, Any]:
        """Hold `op` (fsync or write) on files matching `glob` `ms` milliseconds before doing it (a
        slow disk), until `until_ms` (unix ms) if given. What it held: `stats()["delays"]`."""
        if not glob or any(c.isspace() for c in glob):
            raise UserError(f"powerfs slow: {glob!r} must be one word", "e.g. slow('fsync', 200, 'commitlog/*')")
        return self.command(f"slow {op} {int(ms)} {glob}" + (f" {int(until_ms)}" if until_ms else ""))

    def full(self, pct: int, until_ms: int | None = None) -> dict[str, Any]:
        """Answer statfs as if the file system were `pct` % used (0: its real figures again), until
        `until_ms` (unix ms) if given: a disk that fills without the bytes to fill it."""
        if not 0 <= int(pct) <= 100:
            raise UserError(f"powerfs full: {pct} is not a percentage", "e.g. full(95)")
        return self.command(f"full {int(pct)}" + (f" {int(until_ms)}" if until_ms else ""))

    def clear(self) -> dict[str, Any]:
        """Remove every fail and slow rule, and a full one."""
        return self.command("clear")

    # --- the end --------------------------------------------------------------------------------

    def alive(self) -> bool:
        return alive(self.pid, self.start)

    def unmount(self, timeout: float = 10) -> str:
        """Lazy unmount, then `quit` the server and wait for it (SIGTERM, SIGKILL if it will not go)."""
        _lazy_unmount(self.mount_point)
        if self.alive():
            try:
                self.command("quit", timeout=5)
            except UserError:
                pass  # not answering: stopped by PID below
        how = "quit" if wait_gone([(self.pid, self.start)], timeout) else stop(self.pid, self.start, 2)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)  # no zombie of ours left behind
            except subprocess.TimeoutExpired:
                pass
        if self.log is not None:
            self.log.record_exit(self.name, self.pid, "unmount")
        return how


def _tail(f: Path, n: int = 10) -> str:
    try:
        return "\n".join(f.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# --- reaping ---------------------------------------------------------------------------------------

def is_server(rec: ProcRecord) -> bool:
    """A processes.jsonl record of a powerfs server (ended after the processes that use its mount)."""
    return bool(rec.cmd) and Path(rec.cmd[0]).name == BINARY.name


def _answers(m: Mount) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(_control_of(m))
            s.sendall(b"stats\n")
            return s.recv(1) != b""
    except (OSError, ValueError):
        return False


def _control_of(m: Mount) -> str:
    """The server's control socket, from its command line (/proc/<pid>/cmdline: `-control <path>`)."""
    args = Path(f"/proc/{m.pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return args[args.index("-control") + 1]


def _reap(m: Mount, why: str, abort: bool) -> str:
    """abort: cut the connection first (nothing more reaches the layer, no process hangs on it). A
    clean unmount instead lets the kernel write its dirty pages back: a run's store keeps what its
    brokers wrote, as on a plain directory, for the checks that read it after `down`."""
    if abort or not alive(m.pid, m.start) or not _answers(m):
        abort = _abort_conn(m.conn)
    _lazy_unmount(m.mount_point)
    how = stop(m.pid, m.start, 2)
    return f"powerfs at {m.mount_point} ({why}): {'aborted, ' if abort else ''}unmounted, server pid {m.pid} {how}"


def reap_under(root: Path) -> list[str]:
    """Every mount of ours at or under `root` (a run directory): unmounted (aborted if its server is
    dead or does not answer), server ended."""
    root = Path(root).resolve()
    return [_reap(m, "run down", abort=False) for m in mounts() if m.mount_point.is_relative_to(root)]


def reap_run(run_dir: Path, log: ProcessLog) -> list[str]:
    """A run's `down`: its mounts, then any server it recorded that is still running (its mount
    already gone, e.g. waiting for `quit` after a drop)."""
    done = reap_under(run_dir)
    ended = log.exited()
    for r in log.starts():
        if is_server(r) and (r.node, r.pid) not in ended and alive(r.pid, r.starttime):
            done.append(f"stopped {r.node} pid {r.pid}: {stop(r.pid, r.starttime, 2)}")
            log.record_exit(r.node, r.pid, "down")
    return done


def _run_dir_of(p: Path) -> Path | None:
    for d in p.parents:
        if (d / "state.json").is_file():
            return d
    return None


def reap_lost() -> list[str]:
    """Mounts nobody can bring down: whose server is dead (every access fails with ENOTCONN), or
    whose run directory is gone. A live mount inside an existing run is its run's to end."""
    done = []
    for m in mounts():
        if not alive(m.pid, m.start):
            done.append(_reap(m, "its server is gone", abort=True))
        elif _run_dir_of(m.mount_point) is None:
            done.append(_reap(m, "its run directory is gone", abort=True))
    return done
