"""producer_crash: the producer application dies, and with `back_after` starts again (issue 50: a
transactional producer killed between its half messages and their ends).

In every load process (rmqchaos/run/producer_control.py carries the request): the sends stop; an
attempt in flight gets no outcome (a dead application never learns it: its key is indeterminate);
every half message not yet ended stays without an end (`abandoned`), so the broker has to ask. Its
connections close, so the broker cannot ask the dead instance. The decisions already made survive,
as an application's database does. Back after `back_after`: a new producer instance (a new client
id) of the same group, which answers the broker's check-backs from those decisions, and answers
rollback for a half message it has no decision for (its local transaction never ran).

Its intent, per load process: it went down (answered the request) and came back."""
from __future__ import annotations

import random
from typing import Any

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.protocol import BackAfter, ComingBackKind, FaultError, register
from rmqchaos.run import producer_control as pc
from rmqchaos.spec import Fault, Scenario
from rmqchaos.machine.wait import poll_until

PROCESSES = 1  # the load runs in one process (check)
ACK_TIMEOUT_S = 10.0  # a load process polls every 0.1 s; a starved one may take a while


class ProducerCrashParams(BackAfter):
    pass  # back_after: a new producer instance this long after (else it stays down)


def crash_intent(processes: int, down: list[dict[str, Any]], up: list[dict[str, Any]] | None) -> dict[str, Any]:
    ms = [happened("died", "producers", len(down) >= processes,
                   f"{len(down)} of {processes} load process(es) crashed their producer, "
                   f"{sum(a.get('abandoned_ends', 0) for a in down):,} half message(s) left without an end")]
    if up is not None:
        ms.append(happened("back", "producers", len(up) >= processes,
                           f"{len(up)} of {processes} started a new producer instance"))
    return intent(ms, "producer crash")


@register
class ProducerCrash(ComingBackKind):
    name = "producer_crash"
    Params = ProducerCrashParams
    target = "none"

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """The producer application down and back 3-20 s later (the load's own producer only)."""
        if not topo.producer_crash:
            return None
        back = seconds(rng, 3, 20)
        return Draw({"back_after": dur(back)}, back + 5, frozenset({"producers"}))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        if scenario.load is not None and scenario.load.client != "remoting":
            return [((), "producer_crash crashes the platform's own producer (load.client: remoting); the gRPC "
                         "load's Java producer has no such control")]
        if scenario.load is not None and scenario.load.workers > 0:
            return [((), "producer_crash needs the load in one process (load.workers: 0): a Locust master's "
                         "workers would each answer for their own keys only after a restart")]
        return []

    def _wait(self, action: pc.Action) -> list[dict[str, Any]]:
        n = PROCESSES
        got = poll_until(lambda: (a if len(a := pc.acks(self.ctx.run.path, self.occurrence, action)) >= n else None),
                         ACK_TIMEOUT_S, f"the load to answer {self.occurrence}.{action}", interval=0.1,
                         raise_on_timeout=False)
        return got or pc.acks(self.ctx.run.path, self.occurrence, action)

    def start(self) -> None:
        pc.request(self.ctx.run.path, self.occurrence, "down")
        down = self._wait("down")
        if not down:
            raise FaultError(f"producer_crash {self.occurrence}: no load process answered within {ACK_TIMEOUT_S:g}s",
                             "is the load running? see load/control/ in the run directory")
        self.evidence = {"intent": crash_intent(PROCESSES, down, None), "down": down}

    def stop(self) -> dict[str, Any]:
        p: ProducerCrashParams = self.params  # type: ignore[assignment]
        if p.back_after is None or "down" not in self.evidence:
            return self.evidence
        pc.request(self.ctx.run.path, self.occurrence, "up")
        up = self._wait("up")
        self.evidence["up"] = up
        self.evidence["intent"] = crash_intent(PROCESSES, self.evidence["down"], up)
        return self.evidence
