"""topic_flood: the %RETRY% topic flood of incident 002. Every consumer group a broker ever saw has
its `%RETRY%<group>` topic in the broker's topic table, and the broker sends the whole table to
namesrv in its periodic registration (every 30 s). With enough stale groups (71,000 there) the
registration frame outgrows namesrv's `com.rocketmq.remoting.frameMaxLength` (16 MiB by default):
namesrv refuses the frame, closes the connection, unregisters the broker, and the broker drops out
of every route while its process and port look healthy.

The flood creates `groups` consumer groups on the target broker the way a passing client does: a
consumer heartbeat (HEART_BEAT) per `batch` groups, from a client that then goes away, which makes
the broker create each group and its %RETRY% topic (ClientManageProcessor.heartBeat); and/or
`topics` normal topics (UPDATE_AND_CREATE_TOPIC). At most `rate` per second (the broker persists
its whole topic table at each creation, so it may go slower), until done, the load ends or the
fault's `timeout` passes (the evidence says `stopped_early`). To reach the cliff on one machine,
lower namesrv's frameMaxLength in the scenario (cluster.namesrv.jvm.system_properties); one
%RETRY% topic adds ~210 bytes to the registration (measured: 319,756 bytes with 1,518 topics)."""
from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any

from pydantic import Field, StrictInt

from chaos.protocol import FaultError, FaultKind, register
from rmqchaos.spec import Fault, Scenario, Strict
from rmqclient.admin import RemotingError


class FloodParams(Strict):
    groups: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 0
    topics: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 0
    rate: Annotated[float, Field(gt=0, le=100_000)] = 500.0  # groups + topics created per second
    batch: Annotated[StrictInt, Field(ge=1, le=1000)] = 100  # groups per heartbeat
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")] = "rmqchaos_stale"


@register
class TopicFlood(FaultKind):
    name = "topic_flood"
    Params = FloodParams
    target = "broker"

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        n = params.groups + params.topics
        if n == 0:
            return [((), "topic_flood creates nothing: set groups and/or topics > 0")]
        if n / params.rate > fault.timeout:
            return [(("rate",), f"{n} at {params.rate:g}/s takes {n / params.rate:.0f}s, longer than the fault's "
                                f"timeout {fault.timeout:g}s: raise rate or timeout")]
        return []

    def start(self) -> None:
        self.running_pid()
        p: FloodParams = self.params  # type: ignore[assignment]
        admin, addr = self.ctx.cluster.admin(timeout=30), self.node.plan.addr  # type: ignore[attr-defined]
        topic = self.ctx.cluster.scenario.load.topic if self.ctx.cluster.scenario.load else "TBW102"
        # names RocketMQ accepts ([%|a-zA-Z0-9_-]): an occurrence id may carry '#' (repeats) or '.'
        tag = re.sub(r"[^A-Za-z0-9_-]", "_", f"{p.prefix}_{self.occurrence}")
        # bounded in time as in count: the broker may create groups slower than `rate`
        t0, made_g, made_t = time.monotonic(), 0, 0
        until = t0 + self.fault.timeout
        try:
            before = len(admin.topic_configs(addr))
            while made_g < p.groups and not self.ctx.halt.is_set() and time.monotonic() < until:
                batch = [f"{tag}_{i}" for i in range(made_g, min(p.groups, made_g + p.batch))]
                admin.consumer_heartbeat(addr, f"{tag}@{made_g}", batch, topic)
                made_g += len(batch)
                self._pace(t0, made_g, p.rate)
            while made_t < p.topics and not self.ctx.halt.is_set() and time.monotonic() < until:
                admin.create_topic(addr, f"{tag}_t{made_t}", queues=1)
                made_t += 1
                self._pace(t0, made_g + made_t, p.rate)
            table = admin.topic_configs(addr)
        except RemotingError as e:
            raise FaultError(f"topic_flood {self.node.name}: {e} after {made_g} groups, {made_t} topics",
                             "is the broker up?") from None
        # the topic table as the registration carries it (JSON, uncompressed): the frame's bulk
        self.evidence = {"groups": made_g, "topics": made_t, "seconds": round(time.monotonic() - t0, 1),
                         "topics_before": before, "topics_after": len(table),
                         "retry_topics_after": sum(t.startswith("%RETRY%") for t in table),
                         "topic_table_bytes": len(json.dumps({"topicConfigTable": table}, separators=(",", ":"))),
                         "stopped_early": made_g < p.groups or made_t < p.topics}

    def _pace(self, t0: float, done: int, rate: float) -> None:
        self.ctx.halt.wait(max(0.0, t0 + done / rate - time.monotonic()))
