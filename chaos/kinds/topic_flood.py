"""topic_flood: the %RETRY% topic flood of incident 002. Every consumer group a broker ever saw has
its `%RETRY%<group>` topic in the broker's topic table, and the broker sends the whole table to
namesrv in its periodic registration (every `registerNameServerPeriod`, 30 s by default). With
enough stale groups (71,000 there) the registration frame outgrows namesrv's
`com.rocketmq.remoting.frameMaxLength` (16 MiB by default): namesrv refuses the frame, closes the
connection, unregisters the broker, and the broker drops out of every route while its process and
port look healthy.

The flood creates consumer groups on the target broker the way a passing client does: a consumer
heartbeat (HEART_BEAT) per `batch` groups, from a client that then goes away, which makes the broker
create each group and its %RETRY% topic (ClientManageProcessor.heartBeat); then, if asked, normal
topics (UPDATE_AND_CREATE_TOPIC). At most `rate` per second.

It is driven by its effect (`until: frame`, the default): it grows the table until its bytes exceed
namesrv's frame limit by `margin`, read from the scenario (cluster.namesrv.jvm.system_properties),
or until a bound stops it first: `groups` + `topics` created, the fault's `timeout`, the load's end.
How fast a host creates topics decides how long that takes, not whether it gets there: the broker
rewrites its whole table at each creation (the cost grows with the square of the count) and skips a
creation that waits over 3 s for the table's lock (TopicConfigManager). `until: count` creates exactly
`groups` and `topics` instead (bounded by the timeout too). The evidence says which stopped it.

Why the table's bytes are the target (RocketMQ 5.5.0, BrokerOuterAPI.registerBrokerAll): the
registration frame is 8 bytes of lengths, the RegisterBrokerRequestHeader and the body,
RegisterBrokerBody as JSON: {filterServerList: [], topicConfigSerializeWrapper: {topicConfigTable,
dataVersion, topicQueueMappingInfoMap, ...}}: the table and ~0.6 KB more (measured: a 280,792 B table,
a 281,394 B frame). A table over the frame is a refused frame; the margin (1 %) covers what may
change between the flood's read and the broker's next registration (a topic deleted meanwhile).

Measured cheaply while growing: the table is read whole once at the start and once per kind of topic
made (which gives the bytes of one entry: a constant and its name twice), then each batch asks only
the count (a page of one topic: `AdminClient.topic_count`), and the bytes are estimated from it, an
upper bound (names only get longer); when the estimate reaches the target the table is read whole to
confirm, and the flood goes on from the measured bytes if it fell short (skipped creations)."""
from __future__ import annotations

import json
import math
import re
import threading
import time
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, StrictInt

from chaos.intent import intent, measure, num
from chaos.protocol import FaultError, FaultKind, register
from rmqchaos.spec import Duration, Fault, Scenario, Strict
from rmqchaos.machine.wait import poll_until
from cluster.plan import seed
from cluster.plan.nodes import plan
from rmqclient.admin import RemotingError
from rmqclient.frame import MAX_FRAME

FRAME_PROPERTY = "com.rocketmq.remoting.frameMaxLength"
DEFAULT_FRAME = 16 * 1024 * 1024  # NettyDecoder's default
# the bytes of one table entry, `"<name>":{TopicConfig as JSON},`, are ENTRY_BYTES + 2 x len(name) (the
# name is the key and topicName); measured on 5.5.0 for a %RETRY% topic of a heartbeat (1 queue, perm 6).
# There 1,416 topics made a 280,792 B table and namesrv refused its registration at 281,394 B: 602 B more.
ENTRY_BYTES = 144


class FloodParams(Strict):
    until: Literal["frame", "count"] = "frame"
    groups: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 0  # frame: the most it may create; count: exactly
    topics: Annotated[StrictInt, Field(ge=0, le=1_000_000)] = 0
    rate: Annotated[float, Field(gt=0, le=100_000)] = 500.0  # groups + topics created per second, at most
    batch: Annotated[StrictInt, Field(ge=1, le=1000)] = 100  # groups per heartbeat
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")] = "rmqchaos_stale"
    margin: Annotated[float, Field(ge=0, le=1)] = 0.01  # frame: stop at table bytes >= frame x (1 + margin)
    # frame: once there, wait up to this long for namesrv to stop listing the broker (None: do not wait)
    wait_out: Duration | None = None


def frame_max(scenario: Scenario) -> int:
    """namesrv's frame limit in this scenario: its JVM's system property, else RocketMQ's default."""
    return int(scenario.cluster.namesrv.jvm.system_properties.get(FRAME_PROPERTY, DEFAULT_FRAME))


def table_bytes(table: dict[str, Any]) -> int:
    """The topic table as the registration carries it: JSON, uncompressed, no spaces (fastjson's form)."""
    return len(json.dumps({"topicConfigTable": table}, separators=(",", ":")))


def entry_constant(name: str, config: dict[str, Any]) -> int:
    """The bytes of `name`'s entry in the table's JSON, less its name twice: what every entry of that
    kind costs beside its name."""
    return len(json.dumps(name)) + 1 + len(json.dumps(config, separators=(",", ":"))) + 1 - 2 * len(name)


class Admin(Protocol):  # what the flood asks of rmqclient's AdminClient (a fake one in tests)
    def consumer_heartbeat(self, broker_addr: str, client_id: str, groups: list[str], topic: str) -> None: ...

    def create_topic(self, broker_addr: str, topic: str, queues: int = 4) -> None: ...

    def topic_configs(self, broker_addr: str) -> dict[str, dict[str, Any]]: ...

    def topic_count(self, broker_addr: str) -> tuple[int, dict[str, dict[str, Any]] | None]: ...


class Grower:
    """The flood's loop, apart from the fault protocol so that a fake admin can drive it."""

    def __init__(self, admin: Admin, addr: str, p: FloodParams, tag: str, topic: str, target: float | None,
                 timeout_s: float, halt: threading.Event) -> None:
        self.admin, self.addr, self.p, self.tag, self.topic = admin, addr, p, tag, topic
        self.target, self.timeout_s, self.halt = target, timeout_s, halt
        self.made_g = self.made_t = self.reads = 0
        self.constant: dict[str, int] = {}  # kind ("group", "topic") -> its entries' constant
        self.table: dict[str, Any] = {}
        self.bytes = self.count = self.count_read = self.before = 0

    def name(self, kind: str, i: int) -> str:
        """The i-th topic of a kind: a group's %RETRY% topic, or a normal topic."""
        return f"%RETRY%{self.tag}_{i}" if kind == "group" else f"{self.tag}_t{i}"

    def read(self) -> None:
        """The whole table: the exact bytes and count the estimate starts from."""
        self.table = self.admin.topic_configs(self.addr)
        self.reads += 1
        self.bytes, self.count = table_bytes(self.table), len(self.table)
        self.count_read = self.count

    def estimate(self, kind: str, name: str) -> int:
        """An upper bound on the table's bytes now: the last read's, and every topic counted since it
        at the size of `name`'s entry (the longest so far: names only get longer)."""
        return self.bytes + (self.count - self.count_read) * (self.constant.get(kind, ENTRY_BYTES) + 2 * len(name))

    def bound(self) -> str:
        p = self.p
        return "its bound of " + " and ".join(f"{n:,} {what}" for n, what in ((p.groups, "groups"), (p.topics, "topics")) if n)

    def run(self) -> str:
        """Grow until the target or a bound; returns what stopped it: "frame", "count" or the bound in
        words. Ends with the table as last read whole (its bytes exact)."""
        self.read()
        self.before = self.count
        reached = self._grow()
        if self.count != self.count_read:
            self.read()
        return reached

    def _grow(self) -> str:
        p, t0 = self.p, time.monotonic()
        while True:
            if self.halt.is_set():
                return "the load's end"
            if time.monotonic() >= t0 + self.timeout_s:
                return f"the fault's timeout ({self.timeout_s:g} s)"
            kind = "group" if self.made_g < p.groups else "topic" if self.made_t < p.topics else None
            if kind is None:
                return "count" if self.target is None else self.bound()
            i = self.made_g if kind == "group" else self.made_t
            n = min(p.batch if kind == "group" else 1, (p.groups if kind == "group" else p.topics) - i)
            if self.target is not None and kind in self.constant:  # about what the frame still needs, one more
                last = self.name(kind, i + n)
                n = min(n, 1 + max(0, math.ceil((self.target - self.estimate(kind, last)) /
                                                (self.constant[kind] + 2 * len(last)))))
            if kind == "group":
                self.admin.consumer_heartbeat(self.addr, f"{self.tag}@{i}",
                                              [f"{self.tag}_{j}" for j in range(i, i + n)], self.topic)
                self.made_g += n
            else:
                self.admin.create_topic(self.addr, self.name(kind, i), queues=1)
                self.made_t += 1
            self.halt.wait(max(0.0, t0 + (self.made_g + self.made_t) / p.rate - time.monotonic()))
            last = self.name(kind, i + n - 1)
            if kind not in self.constant:  # the first of its kind: the whole table, to size its entries
                self.read()
                mine = next((t for t in (last, self.name(kind, i)) if t in self.table), None)
                if mine is not None:
                    self.constant[kind] = entry_constant(mine, self.table[mine])
            else:
                self.count, whole = self.admin.topic_count(self.addr)
                if whole is not None:  # a broker that answers with its whole table
                    self.table, self.bytes, self.count_read = whole, table_bytes(whole), self.count
            if self.target is not None and self.estimate(kind, last) >= self.target:
                if self.count != self.count_read:
                    self.read()  # confirm: the estimate is an upper bound
                if self.bytes >= self.target:
                    return "frame"


def flood_intent(node: str, p: FloodParams, frame: int, table: int, created: int, secs: float,
                 reached: str) -> dict[str, Any]:
    """Frame: the table's bytes against namesrv's frame, a cliff (any share under 100 % refuses no
    frame: short below it, not below the usual 80 %). Count: the topics created against those asked."""
    by = "" if reached in ("frame", "count") else f"; stopped by {reached}"
    if p.until == "count":
        asked = p.groups + p.topics
        return intent([measure("topics created", node, asked, created,
                               f"created {created:,} of {asked:,} topics in {secs:.1f} s{by}")], f"topic_flood of {node}")
    pct = 100 * table / frame
    words = (f"reached {pct:.0f} % of namesrv's {frame:,} B frame ({table:,} B table, {created:,} topics created "
             f"in {secs:.1f} s{by})")
    return intent([measure("table bytes", node, frame, table, words)], f"topic_flood of {node}", cliff=True)


class _LoadEnded(Exception):
    """The load ended while the flood waited for its effect: stop waiting."""


@register
class TopicFlood(FaultKind):
    name = "topic_flood"
    Params = FloodParams
    target = "broker"

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        n = params.groups + params.topics
        if n == 0:
            return [((), "topic_flood creates nothing: set groups and/or topics > 0 (with until: frame, the most "
                          "it may create)")]
        if params.until == "count":
            if n / params.rate > fault.timeout:
                return [(("rate",), f"{n} at {params.rate:g}/s takes {n / params.rate:.0f}s, longer than the fault's "
                                    f"timeout {fault.timeout:g}s: raise rate or timeout")]
            return []
        frame = frame_max(scenario)
        target = frame * (1 + params.margin)
        if target + 65536 > MAX_FRAME:  # its read of the whole table is one answer
            return [((), f"topic_flood until: frame: namesrv's frame limit {frame:,} B needs a topic table larger than "
                         f"this platform reads in one answer ({MAX_FRAME:,} B): lower cluster.namesrv.jvm."
                         f"system_properties {FRAME_PROPERTY} (the scenarios use 256 KiB and less) or use until: count")]
        # what the group's table holds already (seeded before its first start) counts towards the frame
        group = next((p.broker_name for p in plan(scenario) if p.name == fault.target), None)
        b = next((b for b in scenario.cluster.brokers if b.name == group), None)
        seeded = seed.seeded_bytes(b.seed_topics, scenario.cluster.rocketmq_version) if b and b.seed_topics else 0
        most = seeded + n * (ENTRY_BYTES + 2 * len(f"%RETRY%{params.prefix}_x_0"))
        if most < target:
            need = math.ceil((target - seeded) / (ENTRY_BYTES + 2 * len(f"%RETRY%{params.prefix}_x_{n}")))
            return [(("groups",), f"topic_flood until: frame: {n:,} topics of ~{most // n} B cannot outgrow namesrv's "
                                  f"{frame:,} B frame: raise groups to at least {need:,} or lower {FRAME_PROPERTY}")]
        return []

    def start(self) -> None:
        self.running_pid()
        p: FloodParams = self.params  # type: ignore[assignment]
        admin, addr = self.ctx.cluster.admin(timeout=30), self.node.plan.addr  # type: ignore[attr-defined]
        scenario = self.ctx.cluster.scenario
        topic = scenario.load.topic if scenario.load else "TBW102"
        # names RocketMQ accepts ([%|a-zA-Z0-9_-]): an occurrence id may carry '#' (repeats) or '.'
        tag = re.sub(r"[^A-Za-z0-9_-]", "_", f"{p.prefix}_{self.occurrence}")
        frame = frame_max(scenario)
        target = frame * (1 + p.margin) if p.until == "frame" else None
        g = Grower(admin, addr, p, tag, topic, target, self.fault.timeout, self.ctx.halt)
        t0 = time.monotonic()
        try:
            reached = g.run()
        except RemotingError as e:
            raise FaultError(f"topic_flood {self.node.name}: {e} after {g.made_g} groups, {g.made_t} topics",
                             "is the broker up?") from None
        secs = time.monotonic() - t0
        table, created = g.bytes, g.count - g.before
        goal = "frame" if p.until == "frame" else "count"
        self.evidence = {
            "intent": flood_intent(self.node.name, p, frame, table, created, secs, reached),
            "until": p.until, "reached": reached, "groups": g.made_g, "topics": g.made_t, "created": created,
            "seconds": round(secs, 1), "frame_max_bytes": frame, "table_bytes": table,
            "target_bytes": None if target is None else math.ceil(target), "table_reads": g.reads,
            "topics_before": g.before, "topics_after": g.count,
            "retry_topics_after": sum(t.startswith("%RETRY%") for t in g.table), "stopped_early": reached != goal}
        if reached == "frame" and p.wait_out is not None:
            self.evidence["out_of_route_after_s"] = self._wait_out(float(p.wait_out))
            self._note_out(float(p.wait_out))

    def _wait_out(self, bound: float) -> float | None:
        """Seconds until namesrv no longer lists the broker (None: still listed after `bound`, or the load ended)."""
        t0, plan = time.monotonic(), self.node.plan  # type: ignore[attr-defined]

        def dropped() -> list[float]:  # [seconds] once no namesrv lists the broker (a list: 0.0 counts)
            return [round(time.monotonic() - t0, 1)] if self.ctx.cluster.listed_anywhere(plan.name) is False else []

        def load_running() -> None:
            if self.ctx.halt.is_set():
                raise _LoadEnded

        try:
            got = poll_until(dropped, bound, "namesrv to drop the broker", interval=0.5, check=load_running,
                             raise_on_timeout=False)
        except _LoadEnded:
            return None
        return got[0] if got else None

    def _note_out(self, bound: float) -> None:
        out, i = self.evidence["out_of_route_after_s"], self.evidence["intent"]
        i["words"] += (f"; namesrv dropped {self.node.name} {num(out)} s later" if out is not None else
                       f"; namesrv still listed {self.node.name} {num(bound)} s later")
