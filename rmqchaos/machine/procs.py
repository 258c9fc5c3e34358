"""Processes the platform starts: one spawn helper, pid + start time records, end by PID only.

A pid alone can be reused by an unrelated process after ours exits; a pid together with its
kernel start time (/proc/<pid>/stat field 22) cannot, so every check and every kill compares both.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


def starttime(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks, or None if there is no such (live) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()  # fields after "pid (comm)"; comm may contain spaces
    if rest[0] in ("Z", "X"):  # zombie or dead: the process has exited, only its entry remains
        return None
    return int(rest[19])


def alive(pid: int, start: int | None) -> bool:
    st = starttime(pid)
    return st is not None and (start is None or st == start)


def state_char(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


@dataclass
class ProcRecord:
    """One started process, as appended to <run>/processes.jsonl."""
    node: str
    pid: int
    starttime: int
    cmd: list[str]
    cgroup: str | None
    ports: list[int]
    started_ms: int
    event: str = "start"
    extra: dict[str, object] = field(default_factory=dict)


class ProcessLog:
    """Append-only, fsync'd record of every process and cgroup a run started (the reaping contract)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _append(self, rec: dict[str, object]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def record_start(self, rec: ProcRecord) -> None:
        self._append(asdict(rec))

    def record_cgroup(self, node: str, rel: str) -> None:
        self._append({"event": "cgroup", "node": node, "cgroup": rel, "ts_ms": now_ms()})

    def record_exit(self, node: str, pid: int, how: str) -> None:
        self._append({"event": "exit", "node": node, "pid": pid, "how": how, "ts_ms": now_ms()})
        forget_faketime(pid)

    def entries(self) -> list[dict[str, object]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn last line after a crash: the complete records before it still count
        return out

    def starts(self) -> list[ProcRecord]:
        fields = ProcRecord.__dataclass_fields__
        return [ProcRecord(**{k: v for k, v in e.items() if k in fields})  # type: ignore[arg-type]
                for e in self.entries() if e.get("event") == "start"]

    def exited(self) -> set[tuple[object, object]]:
        """(node, pid) of every process recorded as ended."""
        return {(e.get("node"), e.get("pid")) for e in self.entries() if e.get("event") == "exit"}

    def running(self) -> dict[str, tuple[int, int]]:
        """Node -> (pid, start time) of the processes started, not recorded as ended, and still alive."""
        ended = self.exited()
        return {r.node: (r.pid, r.starttime) for r in self.starts()
                if (r.node, r.pid) not in ended and alive(r.pid, r.starttime)}

    def latest(self, node: str) -> ProcRecord | None:
        recs = [r for r in self.starts() if r.node == node]
        return recs[-1] if recs else None

    def cgroups(self) -> list[str]:
        seen: list[str] = []
        for e in self.entries():
            cg = e.get("cgroup")
            if isinstance(cg, str) and cg not in seen:
                seen.append(cg)
        return seen


def now_ms() -> int:
    return int(time.time() * 1000)


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def spawn(cmd: Sequence[str], *, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
          log_file: Path | None = None, stdin: Any = subprocess.DEVNULL, stdout: Any = None, stderr: Any = None,
          join: Sequence[str] = (), new_session: bool = False, die_with_parent: bool = False,
          text: bool = False) -> subprocess.Popen:
    """The one way the platform starts a process.

    join: cgroup.procs files the child writes its pid into between fork and exec, so it is inside
    its cgroups before it runs a single instruction of its own (nothing escapes `down`).
    new_session: detached from our terminal and session (cluster nodes outlive `cluster up`).
    die_with_parent: PR_SET_PDEATHSIG=SIGKILL, so it dies with us even if we are SIGKILLed. The
    kernel fires it when the forking *thread* ends: only for processes spawned and ended by the
    same long-lived thread (never from a fault's worker thread).
    log_file: stdout and stderr appended there (overrides stdout/stderr).
    """
    procs = list(join)

    def setup() -> None:  # in the child, before exec
        if die_with_parent:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        pid = str(os.getpid())
        for f in procs:
            with open(f, "w") as fh:
                fh.write(pid)

    out = None
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(log_file, "ab")
        stdout, stderr = out, subprocess.STDOUT
    try:
        return subprocess.Popen(list(cmd), cwd=cwd, env=dict(env) if env is not None else None, stdin=stdin,
                                stdout=stdout, stderr=stderr, start_new_session=new_session, preexec_fn=setup,
                                text=text)
    finally:
        if out is not None:
            out.close()


def run_bounded(cmd: Sequence[str], timeout: float, *, cwd: Path | str | None = None,
                env: Mapping[str, str] | None = None, join: Sequence[str] = ()) -> tuple[int, str] | None:
    """`cmd` spawned in its own session (dying with us) and waited for at most `timeout` s: (exit code, its stdout
    and stderr as text), or None when it had to be killed (its whole process group) at `timeout`."""
    p = spawn(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, join=join,
              new_session=True, die_with_parent=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None
    return p.returncode, out


def record_spawn(log: ProcessLog, node: str, proc: subprocess.Popen, cmd: Sequence[str], cgroup: str | None = None,
                 ports: Sequence[int] = ()) -> ProcRecord:
    """Append the start record of a process just spawned (pid + kernel start time)."""
    rec = ProcRecord(node=node, pid=proc.pid, starttime=starttime(proc.pid) or 0, cmd=list(cmd), cgroup=cgroup,
                     ports=list(ports), started_ms=now_ms())
    log.record_start(rec)
    return rec


def wait_gone(pids: Iterable[tuple[int, int | None]], timeout: float) -> bool:
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while pending:
        _reap_children()
        pending = [(p, s) for p, s in pending if alive(p, s)]
        if not pending:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _reap_children() -> None:
    """Collect exit statuses of our own children so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def send(pid: int, start: int | None, sig: int) -> bool:
    """Signal `pid` only if it is still the process we started. True if the signal was sent."""
    if not alive(pid, start):
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def stop(pid: int, start: int | None, grace: float, sig: int = signal.SIGTERM) -> str:
    """SIGTERM (RocketMQ's shutdown hooks persist offsets and configs; `sig` for a program that ends
    cleanly on another, e.g. fio on SIGINT), then SIGKILL after `grace`."""
    if not alive(pid, start):
        return "already-exited"
    if state_char(pid) == "T":  # stopped by SIGSTOP: SIGTERM would wait forever
        send(pid, start, signal.SIGCONT)
    send(pid, start, sig)
    if wait_gone([(pid, start)], grace):
        return "terminated"
    send(pid, start, signal.SIGKILL)
    wait_gone([(pid, start)], 10)
    return "killed"


def parse_signal(name: str) -> signal.Signals:
    """'SIGKILL', 'kill', 'TERM' -> the signal; ValueError for anything else (the one parser of signal names)."""
    n = name.strip().upper()
    try:
        return signal.Signals[n if n.startswith("SIG") else "SIG" + n]
    except KeyError:
        raise ValueError(f"unknown signal {name!r}; e.g. SIGKILL, SIGTERM, SIGSTOP") from None


def forget_faketime(pid: int) -> None:
    """Remove what libfaketime left in /dev/shm for our process `pid`, now ended (cluster/substrate/clock.py): a
    later process given the same pid would fail on it ("shm_open failed: File exists")."""
    for f in (Path(f"/dev/shm/faketime_shm_{pid}"), Path(f"/dev/shm/sem.faketime_sem_{pid}")):
        try:
            f.unlink()
        except OSError:
            pass
