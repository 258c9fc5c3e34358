"""A node of a cluster behind the backend interface (cluster/backend.py): its process, its memory
and disk, its store's powerfs layer, its logs; its status as `cluster status` prints it; and a
neighbour, a process started beside the cluster (a client, a noise driver) that a backend ends."""
from __future__ import annotations

import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cluster.plan.nodes import NodePlan
from cluster.substrate.powerfs import PowerFS
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import starttime, stop as stop_pid
from rmqchaos.run.rundir import RunDir


class ClusterStartError(UserError):
    """A node did not come up: it exited while starting, or never became ready. `cause`: the exception
    that ended it, read from its output, when it shows one."""

    def __init__(self, message: str, hint: str = "", detail: str = "", cause: str | None = None) -> None:
        super().__init__(message, hint, detail)
        self.cause = cause


@dataclass
class NodeStatus:
    name: str
    role: str  # namesrv | master | slave | proxy
    state: str  # running | paused | down | not-started
    pid: int | None
    ports: list[int]
    addr: str | None
    registered: bool | None  # brokers: present in namesrv's cluster info; None when not applicable/unknown
    memory_bytes: int | None
    log_file: str
    broker_name: str | None = None
    extra: dict[str, object] = field(default_factory=dict)  # backend-specific facts, for people


def same_value(want: object, got: str) -> bool:
    """Whether a scenario value and the broker's reported one are the same setting."""
    if isinstance(want, bool):
        return got == ("true" if want else "false")
    if isinstance(want, (int, float)):
        try:
            return float(got) == float(want)
        except ValueError:
            return False
    return str(want) == got


class NodeMemory(ABC):
    """A node's memory accounting domain (a memory cgroup, a container's limit)."""

    @abstractmethod
    def usage(self) -> int | None: ...

    @abstractmethod
    def page_cache(self) -> int:
        """Bytes of file pages charged to the node: what reclaim can take back."""

    @abstractmethod
    def oom_kills(self) -> int:
        """The kernel's OOM-kill counter for the node's domain."""

    @abstractmethod
    def cap(self, page_cache: int | None = None) -> int:
        """Set the limit (memory and memory+swap) to the current usage; returns the limit. With
        `page_cache` (bytes): to the usage without its page cache plus that much, so reclaim keeps
        the node's page cache near it."""

    @abstractmethod
    def clear_limit(self) -> None: ...


class Node(ABC):
    name: str
    role: str
    plan: NodePlan

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The running process's host pid (None when not running); for evidence."""

    def running(self) -> bool:
        return self.pid is not None

    @abstractmethod
    def start(self) -> None:
        """Start the node (on its existing store); recorded in the run before it can fail."""

    @abstractmethod
    def stop(self, grace: float | None = None) -> str:
        """SIGTERM, SIGKILL after `grace` (default the scenario's stop_timeout); returns how it ended."""

    @abstractmethod
    def kill(self, sig: int = signal.SIGKILL) -> None: ...

    @abstractmethod
    def pause(self) -> None: ...

    @abstractmethod
    def resume(self) -> None: ...

    @abstractmethod
    def paused(self) -> bool: ...

    def layer(self, mount: bool = True) -> "PowerFS | None":
        """The node's powerfs mount (docs/powerfs.md), mounted if it is not and `mount`; None: its
        store is a plain directory (or, with mount=False, not mounted now)."""
        return None

    @abstractmethod
    def restart(self) -> None:
        """Stop if running, start again on the same store, return once ready (brokers: registered)."""

    @property
    @abstractmethod
    def memory(self) -> NodeMemory: ...

    @abstractmethod
    def exec(self, cmd: Sequence[str]) -> subprocess.Popen:
        """Start a helper process inside the node's memory domain (stdin a pipe, output discarded).
        The caller ends it."""

    @abstractmethod
    def throttle_io(self, majmin: str, limits: dict[str, int]) -> dict[str, int]:
        """Cap the node's block I/O on the disk `majmin` (read_bps, write_bps, read_iops, write_iops;
        0 or absent: no cap; all 0 lifts it). Returns the caps in force as read back."""

    @abstractmethod
    def io_caps(self, majmin: str) -> dict[str, int]:
        """The caps in force on the disk `majmin`, read back without changing them ({}: none, or no cgroup)."""

    @abstractmethod
    def make_oom_victim(self) -> None:
        """Make the node's process the kernel's first choice when its domain runs out of memory."""

    def set_clock(self, offset_s: float, rate: float | None = None) -> str:
        """Move the node's own clock to the host's plus `offset_s` (running `rate` times as fast, if
        given); returns the control line written. Only a node started under libfaketime (cluster.faketime)."""
        raise UserError(f"{self.name}: a clock of its own needs the local backend", "use cluster.backend: local")

    def clock_now(self) -> tuple[float, float] | None:
        """(the node's own time, the host's time then) in epoch seconds, read from the node itself; None
        when it did not answer."""
        return None

    def uptime(self) -> tuple[float, float] | None:
        """(the node's uptime by its own monotonic clock, the host's monotonic time then) in seconds; None
        when it did not answer."""
        return None

    @abstractmethod
    def wait_exit(self, pid: int, timeout: float) -> bool:
        """Wait until the process `pid` of this node has exited; True if it did within `timeout`."""

    @abstractmethod
    def mark_exited(self, pid: int, how: str) -> None:
        """Record in the run that the node's process ended (by a fault, not by `down`)."""

    def exit_evidence(self, pid: int) -> dict[str, object]:
        """What the backend itself recorded about how the node's process `pid` ended (after
        `wait_exit`), e.g. a container engine's OOMKilled; {} where there is nothing beyond the kernel's."""
        return {}

    @property
    @abstractmethod
    def log_file(self) -> Path:
        """RocketMQ's own main log of the node, inside the run directory."""

    @property
    @abstractmethod
    def stdout_file(self) -> Path:
        """The node's stdout/stderr, inside the run directory."""


class Neighbour(ABC):
    """A program beside the cluster on its host and disk (noise: redis-server, fio), started by
    `ClusterBackend.spawn_neighbour`, or a client process of the run wrapped by `client_neighbour`."""

    name: str

    @abstractmethod
    def running(self) -> bool: ...

    @abstractmethod
    def end(self, sig: int, grace: float) -> str:
        """`sig`, SIGKILL after `grace`; the end recorded in the run. Returns how it ended
        (already-exited | terminated | killed)."""


class ProcNeighbour(Neighbour):
    """A host process of the run (recorded in processes.jsonl by the spawn that started it)."""

    def __init__(self, run: RunDir, name: str, proc: subprocess.Popen) -> None:
        self.run, self.name, self.proc = run, name, proc
        self.start = starttime(proc.pid)

    def running(self) -> bool:
        return self.proc.poll() is None

    def end(self, sig: int, grace: float) -> str:
        how = stop_pid(self.proc.pid, self.start, grace, sig) if self.proc.poll() is None else "already-exited"
        self.proc.wait()
        self.run.processes.record_exit(self.name, self.proc.pid, how)
        return how
