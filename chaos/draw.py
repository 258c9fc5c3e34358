"""What a fault kind needs to draw a random occurrence of itself for `rmqchaos explore`
(chaos/explore.py): the cluster's shape as targets (`Topology`), and what one draw returns (`Draw`).
A kind that can be explored implements `FaultKind.explore(rng, topo)`; the generator places the
draws on the load's clock and keeps overlapping ones apart where they would collide."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from rmqchaos.spec import Scenario


@dataclass(frozen=True)
class Topology:
    """A scenario's cluster as fault targets. `groups`: broker group -> its nodes; `replicated`: the
    groups whose master is elected (controller mode, DLedger), targeted by role (`master-of:<group>`)."""
    namesrv: str
    controllers: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]
    replicated: tuple[str, ...]
    local: bool  # the local backend: the powerfs layer (power_loss, disk_error, disk_slow) is there
    faketime: tuple[str, ...] = ()  # nodes with a clock of their own (cluster.faketime): `clock` faults
    consumers: tuple[str, ...] = ()  # consumer instance ids (consumers.instances): `consumer_kill`
    faketime_consumers: tuple[str, ...] = ()  # those with a clock of their own: `consumer_clock`
    # the load's queues per broker (None: no load), for `topic_queues`; whether the load's producer can
    # crash and come back (`producer_crash`: the platform's remoting producer in one process)
    load_queues: int | None = None
    producer_crash: bool = False

    @classmethod
    def of(cls, s: Scenario) -> "Topology":
        c = s.cluster
        groups: dict[str, tuple[str, ...]] = {}
        for b in c.brokers:
            groups[b.name] = tuple(n for n, _ in b.replica_nodes()) if b.replicated else \
                (b.name, *([f"{b.name}-s"] if b.slave is not None else []))
        return cls(namesrv="namesrv", controllers=tuple(c.controllers.node_names() if c.controllers else ()),
                   groups=groups, replicated=tuple(b.name for b in c.brokers if b.replicated),
                   local=c.backend == "local", faketime=tuple(c.faketime_nodes()),
                   consumers=tuple(i.id for i in s.consumers.instances) if s.consumers else (),
                   faketime_consumers=tuple(i.id for i in s.consumers.instances if i.faketime) if s.consumers else (),
                   load_queues=s.load.queues if s.load else None,
                   producer_crash=s.load is not None and s.load.workers == 0 and s.load.client == "remoting")

    @property
    def cluster_nodes(self) -> tuple[str, ...]:
        return (self.namesrv, *self.controllers, *(n for ns in self.groups.values() for n in ns))

    def broker_target(self, rng: random.Random) -> tuple[str, frozenset[str]]:
        """A broker node, or the master of a replicated group by role; with the nodes it may hit."""
        g = rng.choice(sorted(self.groups))
        if g in self.replicated and rng.random() < 0.6:
            return f"master-of:{g}", frozenset(self.groups[g])
        n = rng.choice(self.groups[g])
        return n, frozenset({n})

    def any_target(self, rng: random.Random) -> tuple[str, frozenset[str]]:
        """A broker target mostly, sometimes namesrv or a controller."""
        others = [self.namesrv, *self.controllers]
        if rng.random() < 0.25:
            n = rng.choice(others)
            return n, frozenset({n})
        return self.broker_target(rng)

    @property
    def broker_nodes(self) -> frozenset[str]:
        return frozenset(n for ns in self.groups.values() for n in ns)

    def group_of(self, node: str) -> str | None:
        return next((g for g, ns in self.groups.items() if node in ns), None)


@dataclass(frozen=True)
class Draw:
    """One drawn occurrence: the fault's keys besides `kind`, `id` and `at` (target, restart_after,
    the kind's parameters), how long after `at` it still acts on the cluster (`hold_s`, recovery
    included), the nodes it may hit, and whether it changes the network (one such fault at a time)."""
    fault: dict[str, Any]
    hold_s: float
    touches: frozenset[str]
    network: bool = False
    tags: tuple[str, ...] = field(default=())  # e.g. a partition's shape, for the report


def seconds(rng: random.Random, lo: float, hi: float) -> float:
    """A duration in [lo, hi] s, on a 0.5 s grid (a schedule reads as a person would write it)."""
    return round(rng.uniform(lo, hi) * 2) / 2


def dur(s: float) -> str:
    return f"{s:g}s"
