"""topic_queues: change a topic's queue count on every master while the load runs (`mqadmin
updateTopic -r N -w N`), and with `back_after` set it back. A key that an ordered load hashes over
the route's queues moves to another queue when their number changes (issue 50), as it does for an
application: the order a key had on its old queue is not the order on its new one.

Its intent: every master's topic table holds the asked count, and namesrv's route has as many write
queues per master (the broker registers at once on UPDATE_AND_CREATE_TOPIC; asked until it shows)."""
from __future__ import annotations

import random
from typing import Annotated, Any

from pydantic import Field, StrictInt

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import measure, intent
from chaos.protocol import BackAfter, ComingBackKind, FaultError, register
from rmqchaos.spec import Fault, Scenario, TopicName
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import RemotingError

ROUTE_WAIT_S = 10.0


class TopicQueuesParams(BackAfter):
    queues: Annotated[StrictInt, Field(ge=1, le=64)]  # per master
    topic: TopicName | None = None  # default: the load's topic (back_after: each master's count set again)


@register
class TopicQueues(ComingBackKind):
    name = "topic_queues"
    Params = TopicQueuesParams
    target = "none"

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """The load topic's queue count changed on every master and set back 10-30 s later. It asks every
        master and namesrv, so it touches every node they run on: no node fault overlaps it."""
        if topo.load_queues is None:
            return None
        queues = rng.choice([q for q in (1, 2, 3, 6, 8) if q != topo.load_queues])
        back = seconds(rng, 10, 30)
        return Draw({"queues": queues, "back_after": dur(back)}, back + 10, topo.broker_nodes | {topo.namesrv})

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        if scenario.load is not None and params.topic is None and params.queues == scenario.load.queues:
            return [(("queues",), f"the load's topic already has {params.queues} queue(s) per broker (load.queues): "
                                  "ask for another count")]
        return []

    def _topic(self) -> str:
        p: TopicQueuesParams = self.params  # type: ignore[assignment]
        load = self.ctx.run.scenario().load
        return p.topic or (load.topic if load is not None else "")

    def _set(self, queues: int | dict[str, int]) -> dict[str, Any]:
        """Set the count on every master (one count, or each master's own); what each holds after, and
        namesrv's write queues per broker once they show the count (or as they were at the bound)."""
        topic = self._topic()
        load = self.ctx.run.scenario().load
        admin = self.ctx.cluster.admin(timeout=10)
        try:
            masters = admin.master_addrs()
            before = {b: int((admin.topic_configs(a).get(topic) or {}).get("writeQueueNums") or 0)
                      for b, a in masters.items()}
            want = {b: queues if isinstance(queues, int) else queues.get(b, before[b]) for b in masters}
            for b, a in masters.items():
                admin.create_topic(a, topic, want[b], attributes=load.topic_attributes if load else None)
            after = {b: int((admin.topic_configs(a).get(topic) or {}).get("writeQueueNums") or 0)
                     for b, a in masters.items()}
        except RemotingError as e:
            raise FaultError(f"topic_queues {topic}: {e}", "is the cluster up?") from None

        def route() -> dict[str, int] | None:
            try:
                r = admin.topic_route(topic) or {}
            except RemotingError:
                return None
            got = {q["brokerName"]: int(q.get("writeQueueNums") or 0) for q in r.get("queueDatas") or []}
            return got if all(got.get(b) == want[b] for b in masters) else None
        shown = poll_until(route, ROUTE_WAIT_S, "namesrv's route to show the count", interval=0.2,
                           raise_on_timeout=False)
        if shown is None:
            try:
                r = admin.topic_route(topic) or {}
                shown = {q["brokerName"]: int(q.get("writeQueueNums") or 0) for q in r.get("queueDatas") or []}
            except RemotingError:
                shown = {}
        ms = [measure("queues", f"{b} table", 1, 1.0 if after[b] == want[b] else 0.0,
                      f"{b}: {before[b]} -> {after[b]} queue(s) (asked {want[b]})") for b in masters]
        ms += [measure("queues", f"{b} route", 1, 1.0 if shown.get(b) == want[b] else 0.0,
                       f"namesrv routes {shown.get(b, 0)} write queue(s) of {b}") for b in masters]
        return {"topic": topic, "before": before, "asked": want, "after": after, "route": shown,
                "intent": intent(ms, f"queue count of {topic}")}

    def start(self) -> None:
        p: TopicQueuesParams = self.params  # type: ignore[assignment]
        self.evidence = self._set(p.queues)

    def stop(self) -> dict[str, Any]:
        p: TopicQueuesParams = self.params  # type: ignore[assignment]
        if p.back_after is None or "before" not in self.evidence:
            return self.evidence
        back = self._set(dict(self.evidence["before"]))
        self.evidence["back"] = {k: back[k] for k in ("after", "route")}
        ms = self.evidence["intent"]["measures"] + back["intent"]["measures"]
        self.evidence["intent"] = intent(ms, f"queue count of {self._topic()}")
        return self.evidence
