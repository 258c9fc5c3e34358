"""The fault protocol (Jepsen's nemesis, one small object per kind) and its registry.

A kind declares its parameters as a pydantic model (validated when the scenario loads, with the
spec's line-precise errors), what it targets (a node, a broker, or nothing: admin-level faults),
how long an occurrence lasts (`span`), and extra checks against the whole scenario. An occurrence
is `start()` (inject) then, `span` seconds later or when the load ends, `stop()` (undo, the
Chaos Toolkit "rollback") which returns the evidence recorded in the timeline.

A new kind is one module in chaos/kinds/ that subclasses FaultKind and decorates itself with
@register (chaos/registry.py imports every module of chaos/kinds/): the spec, the scheduler and the
report need no edit. A kind that `explore` should draw implements `explore` (chaos/draw.py).
"""
from __future__ import annotations

import math
import random
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from chaos.draw import Draw, Topology
from cluster.backend import ClusterBackend
from cluster.node import Node
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import Duration, Fault, Scenario, Strict


class FaultError(UserError):
    """A fault that could not be applied: the run fails (never a silent no-op)."""


class NoParams(Strict):
    pass


class Lasting(Strict):
    """Parameters of a kind that holds until `duration` has passed, or by default until the load ends."""
    duration: Duration | None = None


def lasting_span(params: Lasting) -> float:
    return math.inf if params.duration is None else float(params.duration)


class Clients(Protocol):
    """The run's consumer processes, for the faults that end and start them again (consumer_kill).
    The stage that started them supplies it (pipeline/stages/load.py, with loadgen/consumers.py's)."""

    def kill_consumer(self, consumer_id: str, sig: int) -> dict[str, Any]:
        """Signal the instance's process; {pid, signal, gone_after_ms (None: still alive), deliveries}."""
        ...

    def restart_consumer(self, consumer_id: str) -> dict[str, Any]:
        """Start the instance again, a new process of the same group; {pid, ledger, started_ms}."""
        ...

    def consumer_clock(self, consumer_id: str) -> "Clocked":
        """The instance's own clock (started under libfaketime: consumers.instances[].faketime)."""
        ...

    def consumer_log(self, consumer_id: str, name: str) -> Path:
        """One of the instance's RocketMQ client logs (e.g. remoting.log)."""
        ...


class Clocked(Protocol):
    """A process with a clock of its own (libfaketime), as the clock faults move and read it: a node
    (cluster/node.py) or a consumer (loadgen/consumer.py)."""

    @property
    def pid(self) -> int | None: ...

    def set_clock(self, offset_s: float, rate: float | None = None) -> str: ...

    def clock_now(self) -> tuple[float, float] | None: ...

    def uptime(self) -> tuple[float, float] | None: ...


@dataclass
class FaultContext:
    run: RunDir
    cluster: ClusterBackend
    halt: threading.Event = field(default_factory=threading.Event)  # set when the load has ended
    clients: Clients | None = None  # None: no consumer this run started (a fault on one fails)


class FaultKind(ABC):
    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    target: ClassVar[str] = "node"  # node | broker | none
    ends_node: ClassVar[bool] = False  # its occurrences end the node: `restart_after` is allowed
    roles: ClassVar[bool] = False  # `target:` may be a role (master-of:<group>, controller-leader): chaos/targets.py
    powerfs: ClassVar[bool] = False  # the nodes it may hit get their store on the powerfs layer (cluster.powerfs)
    tick_s: ClassVar[float | None] = None  # a lasting fault that must follow the node: `tick` this often

    def __init__(self, ctx: FaultContext, fault: Fault, params: BaseModel, occurrence: str = "") -> None:
        self.ctx, self.fault, self.params = ctx, fault, params
        self.occurrence = occurrence or fault.id or self.name  # e.g. noise-a#2: names its files
        self.evidence: dict[str, Any] = {}

    # ------------------------------------------------------------ declared (checked at load time)
    @classmethod
    def span(cls, params: Any) -> float:
        """Seconds between start and stop of one occurrence (0: the fault acts at once; math.inf:
        until the load ends)."""
        return 0.0

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        """Checks against the whole scenario: (location under faults[i], message) pairs."""
        return []

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """A random occurrence of this kind on `topo` for `rmqchaos explore` (chaos/explore.py), drawn
        from `rng` only (the same seed, the same schedule); None: the kind is not explored (noise,
        admin-level floods) or cannot act on this topology."""
        return None

    # ------------------------------------------------------------ one occurrence
    @abstractmethod
    def start(self) -> None:
        """Inject. Raise FaultError when it cannot be applied."""

    def tick(self) -> None:
        """Called every `tick_s` between start and stop (kinds that declare tick_s)."""

    def stop(self) -> dict[str, Any]:
        """Undo what start left in place (if anything); return the evidence."""
        return self.evidence

    # ------------------------------------------------------------ helpers for kinds
    @property
    def node(self) -> Node:
        """The target node (a role target is resolved before the occurrence is built: chaos/scheduler.py)."""
        assert self.fault.target is not None
        return self.ctx.cluster.node(self.fault.target)

    def running_pid(self) -> int:
        pid = self.node.pid
        if pid is None:
            raise FaultError(f"{self.name} {self.node.name}: the node is not running", "check the fault schedule")
        return pid


class BackAfter(Strict):
    """Parameters of a kind that ends something and, with `back_after`, brings it back."""
    back_after: Duration | None = None  # back this long after (else it stays down)


class ComingBackKind(FaultKind):
    """A kind whose occurrence ends something at start and, with `back_after`, brings it back at stop
    (Params extend BackAfter)."""

    @classmethod
    def span(cls, params: Any) -> float:
        return 0.0 if params.back_after is None else float(params.back_after)


class LastingKind(FaultKind):
    """A kind whose occurrence holds for its `duration`, or until the load ends (Params extend Lasting)."""

    @classmethod
    def span(cls, params: Any) -> float:
        return lasting_span(params)


KINDS: dict[str, type[FaultKind]] = {}


def register(cls: type[FaultKind]) -> type[FaultKind]:
    if cls.name in KINDS and KINDS[cls.name] is not cls:
        raise ValueError(f"fault kind {cls.name!r} registered twice")
    KINDS[cls.name] = cls
    return cls
