"""consumer_kill: end one consumer instance's process (SIGKILL by default, mid-batch as it comes),
and with `back_after` start it again: a new process of the same group, writing a receive ledger of
its own. Its group rebalances twice: the killed instance's queues go to the others, then back.

The Java consumer writes each batch to its ledger (to the OS, which keeps it past a SIGKILL) before
it acknowledges the batch, so the killed instance's ledger holds every delivery it acknowledged; a
batch in hand and unacknowledged is delivered again, to whichever instance then holds its queue.

Its intent: the process died, and (with back_after) the instance started again."""
from __future__ import annotations

import random
from typing import Annotated, Any

from pydantic import Field

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.kinds.kill import KillParams
from chaos.protocol import BackAfter, ComingBackKind, FaultError, register
from rmqchaos.machine.procs import parse_signal
from rmqchaos.spec import Fault, Scenario


class ConsumerKillParams(KillParams, BackAfter):
    consumer: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")]  # the instance's id (consumers.instances[].id)


def consumer_intent(cid: str, killed: dict[str, Any], back: dict[str, Any] | None) -> dict[str, Any]:
    gone = killed.get("gone_after_ms")
    ms = [happened("died", f"consumer {cid}", gone is not None,
                   f"consumer {cid} pid {killed.get('pid')} "
                   + (f"gone {gone} ms after {killed.get('signal')}" if gone is not None else "still alive"))]
    if back is not None:
        ms.append(happened("back", f"consumer {cid}", back.get("pid") is not None,
                           f"consumer {cid} started again (pid {back.get('pid')})" if back.get("pid")
                           else f"consumer {cid} did NOT start again: {back.get('error')}"))
    return intent(ms, f"kill of consumer {cid}")


@register
class ConsumerKill(ComingBackKind):
    name = "consumer_kill"
    Params = ConsumerKillParams
    target = "none"

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """A consumer instance killed (SIGKILL) and started again 5-30 s later; its group rebalances twice."""
        if not topo.consumers:
            return None
        cid, back = rng.choice(topo.consumers), seconds(rng, 5, 30)
        return Draw({"consumer": cid, "back_after": dur(back)}, back + 15, frozenset({f"consumer:{cid}"}))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        ids = [i.id for i in scenario.consumers.instances] if scenario.consumers else []
        if params.consumer not in ids:
            return [(("consumer",), f"no consumer instance {params.consumer!r} in this scenario"
                                    + (f"; instances: {', '.join(ids)}" if ids else "; add consumers.instances"))]
        return []

    def start(self) -> None:
        p: ConsumerKillParams = self.params  # type: ignore[assignment]
        if self.ctx.clients is None:
            raise FaultError(f"consumer_kill {p.consumer}: this run started no consumer", "run it through `rmqchaos run`")
        killed = self.ctx.clients.kill_consumer(p.consumer, int(parse_signal(p.signal)))
        self.evidence = {"intent": consumer_intent(p.consumer, killed, None), "killed": killed}

    def stop(self) -> dict[str, Any]:
        p: ConsumerKillParams = self.params  # type: ignore[assignment]
        if p.back_after is None or self.ctx.clients is None or "killed" not in self.evidence:
            return self.evidence
        try:
            back = self.ctx.clients.restart_consumer(p.consumer)
        except Exception as e:  # noqa: BLE001 - the evidence says it did not come back; the intent falls short
            back = {"pid": None, "error": str(e).splitlines()[0]}
        self.evidence["back"] = back
        self.evidence["intent"] = consumer_intent(p.consumer, self.evidence["killed"], back)
        return self.evidence
