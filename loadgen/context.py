"""Per-process load state: the producer, the send ledger, the message quota and deadline, and the
one place where an attempt is written to the ledger, sent, and reported to Locust."""
from __future__ import annotations

import itertools
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.event

from loadgen.policies import accepted, run_policy
from loadgen.transactions import TransactionApp
from rmqchaos.ledger import body as msgbody
from rmqchaos.run import producer_control as pc
from rmqchaos.ledger.journal_write import DRAIN_S, LedgerWriter
from rmqchaos.ledger.lines import SendLines
from rmqchaos.ledger.schema import DUE_SEP, ORDER_SEP, send_ledger_path, txn_ledger_path
from rmqchaos.progress import say
from rmqchaos.spec import Load
from rmqclient.producer import MessageQueue, Producer, SendResult
from rmqclient.transaction import TransactionalProducer


CRASHED = "the producer application crashed (producer_crash): it never learned this attempt's outcome"


class SendFailed(Exception):
    """What Locust records as the failure of one attempt: the broker's code and remark verbatim."""


def failure_text(r: SendResult) -> str:
    if r.outcome == "timeout":
        return f"timeout: {r.error}"
    if r.outcome == "ok":  # stored, but not accepted by the policy (a weak status)
        return f"status {r.status}"
    if r.code is not None:
        return f"code {r.code}: {(r.remark or '').splitlines()[0] if r.remark else ''}"
    return f"transport: {r.error}"


@dataclass(frozen=True)
class LoadPlan:
    """What one load process needs; the same in every worker but for `worker`."""
    run_dir: str
    run_id: str
    namesrv: str
    source: str | None  # the producers' own loopback address (cluster/plan/nodes.py addresses)
    load: Load
    worker: int  # 0-based process index
    workers: int  # processes producing (1 with the local runner)
    deadline: float  # wall clock (time.time()): no message starts after it
    ledger: bool
    # bench ledger --alternate: the ledger on and off in turns of this many seconds (0: always as `ledger`)
    ledger_turns: float = 0.0
    # a timer load by delay level: that level's delay on the brokers (rmqchaos/spec/timing.py)
    level_delay_ms: int = 0


class LoadContext:
    def __init__(self, plan: LoadPlan, events: Any) -> None:
        self.plan, self.load, self.events = plan, plan.load, events
        self.producer_id = f"w{plan.worker}-{os.getpid()}"
        group = f"rmqchaos_{plan.run_id[-6:]}"
        # a transactional load: the application's decisions (loadgen/transactions.py), which also answer
        # the broker's check-backs on every connection of the producer (rmqclient/transaction.py)
        self.key_base = f"{self.load.key_prefix}{plan.run_id[-6:]}-{self.producer_id}-"
        self.txn = TransactionApp(self.load.transaction, plan.run_id, self.producer_id,
                                  txn_ledger_path(Path(plan.run_dir), self.producer_id) if plan.ledger else None,
                                  key_prefix=self.key_base) if self.load.transaction else None
        self.group = group
        self.producer = self._new_producer()
        # the producer_crash fault (rmqchaos/run/producer_control.py): crashes so far, and whether it is up
        self.generation = 0
        self._up = gevent.event.Event()
        self._up.set()
        self._done_requests: set[str] = set()
        self._ends: list[gevent.Greenlet] = []  # a transactional load's ends in flight
        self.writer = LedgerWriter(send_ledger_path(Path(plan.run_dir), self.producer_id)) if plan.ledger else None
        self.ledger = self.writer  # what an attempt writes to: None in the off turns of bench ledger --alternate
        #: bench ledger --alternate: at each turn's start (ledger on, user CPU-s, system CPU-s, accepted so far)
        self.turns: list[tuple[bool, float, float, int]] = []
        self.lines = SendLines(plan.run_id, self.producer_id, self.load.policy.kind)
        total = self.load.messages
        self.quota: int | None = None if total is None else (
            total // plan.workers + (1 if plan.worker < total % plan.workers else 0))
        self.taken = 0
        self.inflight = 0
        self.attempts = 0
        self.accepted = 0
        self._attempt_ids = itertools.count(1)
        # the payload that fills each self-verifying body (rmqchaos/ledger/body.py) up to message_size
        self.filler = os.urandom(self.load.message_size // 2 + 1).hex()[: self.load.message_size].encode()
        self.backup_topic = self.load.backup_topic()
        self._streams = itertools.count()  # an ordered load's message streams (Locust users), new_stream()
        self._pinned: dict[str, MessageQueue] = {}  # strict order: each sharding key's first queue
        self._closing = gevent.event.Event()
        self._control = gevent.spawn(self._control_loop)
        self._flusher = gevent.spawn(self._flush_loop) if self.writer else None
        self._alternator = (gevent.spawn(self._alternate, plan.ledger_turns)
                            if self.writer and plan.ledger_turns > 0 else None)

    def _new_producer(self) -> Producer:
        p, load = self.plan, self.load
        if self.txn is not None:
            return TransactionalProducer(p.namesrv, group=self.group, decide=self.txn.decide, timeout=load.timeout,
                                         route_ttl=load.route_refresh, source=p.source)
        return Producer(p.namesrv, group=self.group, timeout=load.timeout, route_ttl=load.route_refresh, source=p.source)

    # ------------------------------------------------------------ the producer_crash fault
    def _control_loop(self) -> None:
        while not self._closing.is_set():
            for req in pc.pending(self.plan.run_dir, self._done_requests):
                self._done_requests.add(req["file"])
                ev = self.crash() if req["action"] == "down" else self.restart()
                pc.ack(self.plan.run_dir, req["file"], self.producer_id, ev)
            gevent.sleep(0.1)

    def crash(self) -> dict[str, Any]:
        """The application dies: no more sends; the attempts in flight get no outcome; the halves not
        yet ended are abandoned; its connections close (the broker cannot ask it any more)."""
        if not self._up.is_set():
            return {"at_ms": int(time.time() * 1000), "already_down": True}
        self.generation += 1
        self._up.clear()
        inflight = self.inflight
        abandoned = self.txn.crash() if self.txn is not None else 0
        self.producer.close()
        say(f"load: producer crashed ({inflight} send(s) in flight, {abandoned} half message(s) left without an end)")
        return {"at_ms": int(time.time() * 1000), "inflight_sends": inflight, "abandoned_ends": abandoned,
                "decisions_kept": len(self.txn.decisions) if self.txn is not None else 0}

    def restart(self) -> dict[str, Any]:
        """A new producer instance of the same group; the sends go on."""
        if self._up.is_set():
            return {"at_ms": int(time.time() * 1000), "already_up": True}
        self.producer = self._new_producer()
        self._up.set()
        say("load: producer started again")
        return {"at_ms": int(time.time() * 1000), "client_id": getattr(self.producer, "client_id", None)}

    # ------------------------------------------------------------ quota and deadline
    def take(self) -> int | None:
        """The next message sequence number of this process, or None when the load is over."""
        if time.time() >= self.plan.deadline or (self.quota is not None and self.taken >= self.quota):
            return None
        self.taken += 1
        return self.taken

    @property
    def finished(self) -> bool:
        return self.inflight == 0 and (time.time() >= self.plan.deadline or
                                       (self.quota is not None and self.taken >= self.quota))

    # ------------------------------------------------------------ one business message
    def new_stream(self) -> list[str]:
        """An ordered load's next message stream (one per Locust user): the sharding keys it owns."""
        u = next(self._streams)
        return [f"{self.key_base}u{u}k{j}" for j in range(self.load.order.keys_per_user)] if self.load.order else []

    def send_message(self, seq: int, intended_s: float, shard: tuple[str, int] | None = None) -> list[SendResult]:
        """One business message: any queue; or with `shard` (sharding key, its sequence number) the key's
        queue, its key `<sharding key>~<number>` (rmqchaos/ledger/schema.py ORDER_SEP)."""
        self._up.wait()  # a crashed application sends nothing until it is back
        gen = self.generation
        key = f"{shard[0]}{ORDER_SEP}{shard[1]}" if shard else f"{self.key_base}{seq}"
        props = None
        if self.load.timer is not None:  # scheduled: due at a time the key records (rmqchaos/ledger/schema.py DUE_SEP)
            key, props = self._timer(key)
        body = msgbody.encode(key, self.producer_id, seq, self.filler, self.load.message_size)
        intended_ms = int(intended_s * 1000)
        n = itertools.count(1)
        self.inflight += 1
        try:
            rs = run_policy(self.load.policy, self.load.topic, self.backup_topic, self.load.timeout,
                            lambda topic, excl, tmo: self._attempt(key, body, next(n), topic, excl, tmo, intended_ms,
                                                                   shard[0] if shard else None, gen, props))
        finally:
            self.inflight -= 1
        if self.txn is not None and rs and rs[-1].outcome == "ok" and gen == self.generation:  # stored: end it, apart
            self._ends = [g for g in self._ends if not g.dead]
            self._ends.append(gevent.spawn(self.txn.end, self.producer, rs[-1].topic, rs[-1]))
        return rs

    def _timer(self, key: str) -> tuple[str, dict[str, str]]:
        """A timer load's message: its key with the time it is due at, and the property that schedules it.
        A delay level is due its delay after now (the broker counts from the message's store time, a
        little later: never earlier); a deliver time is now + delay + the key's share of the spread
        (by its hash, so a re-run draws the same)."""
        t = self.load.timer
        assert t is not None
        now = int(time.time() * 1000)
        if t.delay_level is not None:
            return f"{key}{DUE_SEP}{now + self.plan.level_delay_ms}", {"DELAY": str(t.delay_level)}
        share = zlib.crc32(key.encode()) / 2 ** 32
        due = now + int(round(((t.delay or 0.0) + share * t.spread) * 1000))
        return f"{key}{DUE_SEP}{due}", {"TIMER_DELIVER_MS": str(due)}

    def _pinned_queue(self, topic: str, shard_key: str, res: SendResult) -> MessageQueue | None:
        """Strict order: the queue a sharding key was first sent to, or None with `res` completed as an
        unsent error while that queue is not in the route (the first time: the queue its key hashes to)."""
        pinned = self._pinned.get(shard_key)
        if pinned is None:
            pinned = self.producer.queue_or_fail(res, topic, None, shard_key)
            if pinned is None:
                return None
            self._pinned[shard_key] = pinned
        try:
            in_route = pinned in self.producer.route(topic)
        except Exception as e:  # noqa: BLE001 - namesrv unreachable etc. is a result, as in Producer.send
            res.error = f"route lookup failed: {e}"
            return None
        if not in_route:
            res.error = f"strict order: queue {pinned.broker}#{pinned.queue_id} of {shard_key} is not in the route"
        return pinned if in_route else None

    def _attempt(self, key: str, body: bytes, attempt: int, topic: str, exclude: str | None, timeout: float,
                 intended_ms: int, shard_key: str | None = None, gen: int = 0,
                 props: dict[str, str] | None = None) -> SendResult:
        if gen != self.generation:  # the application crashed since this message began: no more attempts
            now = int(time.time() * 1000)
            return SendResult(outcome="error", topic=topic, key=key, start_ms=now, end_ms=now, error=CRASHED)
        ledger = self.ledger  # the attempt's two lines go to the same place (--alternate turns)
        aid = next(self._attempt_ids)
        # One start time in both records: the analysis counts an attempt's missing outcome per
        # second without pairing the two records.
        start_ms = int(time.time() * 1000)
        intent = b""
        if ledger:
            intent = self.lines.intent(aid, key, attempt, topic, intended_ms, start_ms)
            ledger.write_through(intent)
        if isinstance(self.producer, TransactionalProducer):
            txn = self.load.transaction
            r = self.producer.send_half(topic, body, key=key, timeout=timeout, exclude_broker=exclude,
                                        check_immunity_s=txn.check_immunity if txn is not None else None)
        elif shard_key is None:
            r = self.producer.send(topic, body, key=key, tags=self.load.tags, exclude_broker=exclude, timeout=timeout,
                                   properties=props)
        elif not (self.load.order and self.load.order.strict):  # SelectMessageQueueByHash, never another broker
            r = self.producer.send(topic, body, key=key, tags=self.load.tags, by_hash=shard_key, timeout=timeout)
        else:
            now = int(time.time() * 1000)
            r = SendResult(outcome="error", topic=topic, key=key, start_ms=now, end_ms=now)
            mq = self._pinned_queue(topic, shard_key, r)
            if mq is not None:
                r = self.producer.send(topic, body, key=key, tags=self.load.tags, queue=mq, timeout=timeout)
        if gen != self.generation:  # it crashed while this attempt was in flight: it never learns the outcome
            r.outcome, r.error = "error", CRASHED
            return r
        ok = accepted(self.load.policy, r)
        self.attempts += 1
        self.accepted += ok
        if ledger:
            ledger.write_through(self.lines.outcome_of(intent, r, ok))
        self.events.request.fire(request_type="SEND", name=f"{topic} [{self.load.policy.kind}]",
                                 response_time=r.end_ms - r.start_ms, response_length=len(body),
                                 exception=None if ok else SendFailed(failure_text(r)), context={})
        return r

    # ------------------------------------------------------------ ledger
    def _flush_loop(self) -> None:
        assert self.writer is not None
        pool = gevent.get_hub().threadpool
        while not self._closing.wait(DRAIN_S):
            self.writer.drain()  # in this thread: the spool is only ever touched by it
            if self.txn is not None:
                self.txn.drain()
            if self.writer.due():
                # in a thread: the other greenlets send while the disk works (the sync took
                # 4-74 ms a second in the load)
                pool.apply(self.writer.fsync)

    def _alternate(self, turn_s: float) -> None:
        """The ledger on and off in turns of one process (bench ledger --alternate): the host's and
        the brokers' drift cancels between neighbouring turns, and start-up is in no turn. An on
        turn ends with an fsync, so that it pays for its own lines' writeback."""
        assert self.writer is not None
        pool = gevent.get_hub().threadpool
        while True:
            t = os.times()
            self.turns.append((self.ledger is not None, t.user, t.system, self.accepted))
            if self._closing.wait(turn_s):
                break
            if self.ledger is not None:
                self.writer.drain()
                pool.apply(self.writer.fsync)
            self.ledger = None if self.ledger is not None else self.writer

    def close(self) -> None:
        if not self._up.is_set():  # the load ended while it was down: back, for the check-backs' sake
            self.restart()
        self._closing.set()
        self._control.join()
        for g in (self._alternator, self._flusher):
            if g is not None:
                g.join()  # its sync done: the journal's fd is not closed under it
        if self._ends:  # the last half messages' ends: bounded by end_after
            gevent.joinall(self._ends, timeout=(self.load.transaction.end_after if self.load.transaction else 0) + 5)
        if self.txn is not None and self.txn.open:  # an application stays up for its check-backs (bounded)
            say(f"load: waiting up to {self.load.transaction.linger:g}s for the check-backs of "
                f"{len(self.txn.open)} transaction(s) ended unknown")
            left = self.txn.linger()
            if left:
                say(f"load: {left} transaction(s) ended unknown were never asked about")
        if self.writer:
            self.writer.close()
        if self.txn is not None:
            self.txn.close()
        self.producer.close()
