"""The cluster backend interface. `local` (JVMs from the Maven jars) is the first implementation."""
from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from cluster.cgroups import Cgroup


@dataclass
class NodeStatus:
    name: str
    role: str  # namesrv | master | slave | proxy
    state: str  # running | paused | down | not-started
    pid: int | None
    ports: list[int]
    addr: str | None
    registered: bool | None  # brokers: present in namesrv's cluster info; None when not applicable/unknown
    cgroup: str | None
    memory_bytes: int | None
    store_dir: str | None
    log_file: str
    broker_name: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


class Node(ABC):
    name: str
    role: str

    @property
    @abstractmethod
    def pid(self) -> int | None: ...

    @abstractmethod
    def kill(self, sig: int = signal.SIGKILL) -> None: ...

    @abstractmethod
    def pause(self) -> None: ...

    @abstractmethod
    def resume(self) -> None: ...

    @abstractmethod
    def restart(self) -> None:
        """Stop if running, start again on the same store, return once re-registered (brokers)."""

    @property
    @abstractmethod
    def cgroup(self) -> Cgroup | None: ...

    @property
    @abstractmethod
    def store_dir(self) -> Path | None: ...

    @property
    @abstractmethod
    def log_file(self) -> Path: ...


class ClusterBackend(ABC):
    @abstractmethod
    def up(self) -> None:
        """Start every node; return only when every broker is registered and routable."""

    @abstractmethod
    def down(self) -> list[str]:
        """Stop every process and remove every cgroup this run started; returns what was done."""

    @abstractmethod
    def status(self) -> list[NodeStatus]: ...

    @abstractmethod
    def node(self, name: str) -> Node: ...

    @property
    @abstractmethod
    def namesrv_addr(self) -> str: ...
