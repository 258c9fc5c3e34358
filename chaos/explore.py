"""Seeded random fault schedules (Jepsen's generators): `rmqchaos explore` draws one per run from
the fault registry, each kind drawing its own occurrence (`FaultKind.explore`, chaos/draw.py).

The same seed and base scenario give the same schedule (one `random.Random(seed)`, the kinds taken
in name order). Faults are placed on the load's clock after a warm-up and end (recovery included)
before the load's last seconds, so the drain sees a settled cluster. Overlap is allowed where it is
safe: two faults at the same time never touch the same node, and only one changes the network."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from chaos.draw import Draw, Topology, seconds
from chaos.protocol import FaultKind
from rmqchaos.spec import Scenario

WARMUP_S = 10.0  # the consumers read before the first fault (the serving gate waits for that too)
SETTLE_S = 5.0  # the last fault's recovery ends this long before the load does
TRIES = 40  # draws per fault before the schedule makes do with fewer faults


@dataclass(frozen=True)
class Placed:
    kind: str
    at_s: float
    draw: Draw

    @property
    def until_s(self) -> float:
        return self.at_s + self.draw.hold_s

    def clashes(self, other: "Placed") -> bool:
        """Both act on the cluster at some instant, and on a common node or both on the network."""
        overlap = self.at_s < other.until_s and other.at_s < self.until_s
        return overlap and (bool(self.draw.touches & other.draw.touches) or (self.draw.network and other.draw.network))


def explorable(kinds: dict[str, type[FaultKind]], topo: Topology, only: list[str] | None = None) -> list[str]:
    """The kinds that draw an occurrence on this topology, in name order (`only`: a subset asked for)."""
    probe = random.Random(0)
    return [k for k in sorted(kinds) if (only is None or k in only) and kinds[k].explore(probe, topo) is not None]


def schedule(scenario: Scenario, kinds: dict[str, type[FaultKind]], seed: int, max_faults: int = 3,
             only: list[str] | None = None) -> list[dict[str, Any]]:
    """The faults of one explored run: 1..max_faults occurrences of explorable kinds, as `faults:`
    entries of the spec (ids `<kind>-<n>`), sorted by `at`. Deterministic in (scenario, seed)."""
    rng = random.Random(seed)
    topo = Topology.of(scenario)
    names = explorable(kinds, topo, only)
    if not names:
        return []
    duration = float(scenario.load.duration) if scenario.load else 60.0
    placed: list[Placed] = []
    for _ in range(rng.randint(1, max_faults)):
        for _ in range(TRIES):
            kind = rng.choice(names)
            draw = kinds[kind].explore(rng, topo)
            assert draw is not None  # explorable() kept only kinds that draw here
            latest = duration - SETTLE_S - draw.hold_s
            if latest < WARMUP_S:
                continue
            p = Placed(kind, seconds(rng, WARMUP_S, latest), draw)
            if not any(p.clashes(q) for q in placed):
                placed.append(p)
                break
    placed.sort(key=lambda p: p.at_s)
    return [{"id": f"{p.kind.replace('_', '-')}-{i}", "kind": p.kind, "at": f"{p.at_s:g}s", **p.draw.fault}
            for i, p in enumerate(placed, 1)]


def words(faults: list[dict[str, Any]]) -> str:
    """A schedule in one line, e.g. 'kill master-of:broker-a at 20s (back 12s); partition (one) at 40s'."""
    def t(v: Any) -> str:  # as drawn ('20s'), or as a resolved scenario holds it (20.0)
        return f"{v:g}s" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
    out = []
    for f in faults:
        what = f["kind"] + (f" {f['target']}" if f.get("target") else "")
        if f["kind"] == "partition":
            what += " " + " | ".join(",".join(g) for g in f["groups"])
        if f["kind"] in ("consumer_kill", "consumer_clock"):
            what += f" {f['consumer']}"
        if f["kind"] == "topic_queues":
            what += f" to {f['queues']} queue(s)"
        if f["kind"] == "link":
            what += f" {f['from']}->{f['to']}" + (" blackhole" if f.get("blackhole") else f" {t(f.get('latency'))}")
        extra = [f"{k.replace('_', ' ')} {t(f[k])}" for k in ("duration", "restart_after", "back_after") if f.get(k)]
        out.append(f"{what} at {t(f['at'])}" + (f" ({', '.join(extra)})" if extra else ""))
    return "; ".join(out) or "no fault"
