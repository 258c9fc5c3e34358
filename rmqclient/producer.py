"""A gevent-native RocketMQ producer over the remoting protocol, with exact per-attempt outcomes.

- One connection per broker address, many requests in flight on it, matched by the frame's
  opaque (request id); a reader greenlet per connection resolves them.
- Every `send()` is exactly one attempt: no hidden retries. Retrying is the caller's policy.
- The result is a plain value (`SendResult`): outcome class `ok` / `error` / `timeout`, the send
  status, the broker's msgId / queue / offset, or its response code and remark verbatim.

Wire facts (RocketMQ 5.5.0 sources): SEND_MESSAGE_V2 = 310 with the short header field names of
SendMessageRequestHeaderV2 (a..n); SEND_BATCH_MESSAGE = 320; response codes 0 / 10 / 11 / 12 are
stored (SEND_OK, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT; MQClientAPIImpl
.processSendResponse), every other code is a broker error; response extFields msgId, queueId,
queueOffset (SendMessageResponseHeader).
"""
from __future__ import annotations

import itertools
import json
import os
import random
import socket as _stdsocket
import struct
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import gevent
import gevent.lock
import gevent.socket
from gevent.event import AsyncResult

from rmqclient.admin import TOPIC_NOT_EXIST, AdminClient, RemotingError
from rmqclient.frame import CLIENT_VERSION, FLAG_RESPONSE, Frame, FrameError, FrameReader
from rmqclient.record import java_hash

SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
STORED_STATUS = {0: "SEND_OK", 10: "FLUSH_DISK_TIMEOUT", 11: "SLAVE_NOT_AVAILABLE", 12: "FLUSH_SLAVE_TIMEOUT"}
NAME_SEP, PROP_SEP = "\x01", "\x02"  # MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR
MAX_BODY = 4 * 1024 * 1024


@dataclass(slots=True)
class SendResult:
    """One send attempt. outcome: ok (stored; see status) | error (a definite answer or a transport
    failure, see code/error) | timeout (no answer in time: the message may or may not be stored)."""
    outcome: str
    topic: str
    key: str | None
    start_ms: int
    end_ms: int
    status: str | None = None  # SEND_OK | FLUSH_DISK_TIMEOUT | FLUSH_SLAVE_TIMEOUT | SLAVE_NOT_AVAILABLE
    code: int | None = None  # the broker's response code (None: no response)
    remark: str | None = None  # the broker's remark, verbatim
    msg_id: str | None = None  # the broker's msgId (commit-log address; Java's offsetMsgId)
    uniq_key: str | None = None  # UNIQ_KEY property (Java's SendResult.getMsgId())
    broker: str | None = None
    addr: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    error: str | None = None  # transport failure text
    sent: bool = False  # the request bytes were handed to the socket (False: surely not stored)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


class ConnectionClosed(Exception):
    pass


def _now_ms() -> int:
    return int(time.time() * 1000)


class _UniqKeys:
    """UNIQ_KEY in MessageClientIDSetter's layout: IPv4 + pid(2) + random(4) + ms since month start(4)
    + counter(2), uppercase hex (32 chars). Brokers and tools parse the time out of it."""

    def __init__(self) -> None:
        self.prefix = (bytes([127, 0, 0, 1]) + struct.pack(">H", os.getpid() & 0xFFFF)
                       + struct.pack(">I", random.getrandbits(32))).hex().upper()
        self.counter = itertools.count(random.getrandbits(16))
        t = time.localtime()
        self.month_start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000

    def next(self) -> str:
        since = int(time.time() * 1000 - self.month_start) & 0xFFFFFFFF
        return self.prefix + f"{since:08X}{next(self.counter) & 0xFFFF:04X}"


class BrokerConnection:
    """One TCP connection to a broker; any number of requests in flight, answered by opaque."""

    def __init__(self, addr: str, connect_timeout: float, source: str | None = None) -> None:
        host, _, port = addr.rpartition(":")
        self.addr = addr
        self.sock = gevent.socket.create_connection((host, int(port)), timeout=connect_timeout,
                                                    source_address=(source, 0) if source else None)
        self.sock.settimeout(None)
        self.sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        self.pending: dict[int, AsyncResult] = {}
        self.closed: str | None = None
        self._wlock = gevent.lock.Semaphore()
        self._opaque = itertools.count(1)
        # a request the broker sends us (a transaction check-back): handed over in its own greenlet
        self.on_request: Callable[[Frame], None] | None = None
        self._reader = gevent.spawn(self._read_loop)

    def _read_loop(self) -> None:
        reader = FrameReader()
        reason = "connection closed by the broker"
        try:
            while True:
                data = self.sock.recv(262144)
                if not data:
                    break
                for f in reader.feed(data):
                    if f.flag & FLAG_RESPONSE:
                        ar = self.pending.pop(f.opaque, None)
                        if ar is not None:
                            ar.set(f)
                    elif self.on_request is not None:
                        gevent.spawn(self.on_request, f)
        except FrameError as e:
            reason = f"bad frame from broker: {e}"
        except OSError as e:
            reason = f"connection error: {e.strerror or e}"
        self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        self.closed = reason
        pending, self.pending = self.pending, {}
        for ar in pending.values():
            ar.set_exception(ConnectionClosed(reason))
        try:
            self.sock.close()
        except OSError:
            pass

    def next_opaque(self) -> int:
        return next(self._opaque)

    def submit(self, opaque: int, data: bytes) -> AsyncResult:
        """Register the request, then write it. Raises ConnectionClosed if nothing was written."""
        if self.closed:
            raise ConnectionClosed(self.closed)
        ar = AsyncResult()
        self.pending[opaque] = ar
        try:
            with self._wlock:
                self.sock.sendall(data)
        except OSError as e:
            self.pending.pop(opaque, None)
            self._fail_all(f"connection error: {e.strerror or e}")
            raise ConnectionClosed(self.closed or "closed") from None
        return ar

    def oneway(self, data: bytes) -> None:
        """Write a request no answer is waited for (its frame carries FLAG_ONEWAY)."""
        if self.closed:
            raise ConnectionClosed(self.closed)
        try:
            with self._wlock:
                self.sock.sendall(data)
        except OSError as e:
            self._fail_all(f"connection error: {e.strerror or e}")
            raise ConnectionClosed(self.closed or "closed") from None

    def forget(self, opaque: int) -> None:
        self.pending.pop(opaque, None)

    def close(self) -> None:
        if not self.closed:
            self._fail_all("closed by the client")
        self._reader.kill(block=False)


@dataclass(frozen=True, slots=True)
class MessageQueue:
    broker: str
    addr: str
    queue_id: int


class Producer:
    """Send messages through RocketMQ's remoting protocol; every call is one attempt.

    >>> p = Producer("127.0.0.1:9876", group="rmqchaos")
    >>> r = p.send("TopicA", b"body", key="order-42")   # SendResult(outcome='ok', status='SEND_OK', ...)
    """

    def __init__(self, namesrv: str, group: str = "rmqchaos_producer", timeout: float = 3.0,
                 connect_timeout: float = 3.0, route_ttl: float = 30.0, source: str | None = None) -> None:
        """timeout: per attempt, from its start to the broker's answer. route_ttl: how long a topic
        route is trusted before namesrv is asked again (DefaultMQProducer polls every 30 s). source:
        the loopback address every connection comes from (the producers' own, cluster/plan/nodes.py)."""
        self.namesrv = namesrv
        self.source = source
        self.group = group
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.admin = AdminClient(namesrv, timeout=connect_timeout, source=source)
        self.route_ttl = route_ttl
        self._routes: dict[str, tuple[float, list[MessageQueue]]] = {}
        self._rr: dict[str, itertools.count] = {}
        self._conns: dict[str, BrokerConnection] = {}
        self._connect_locks: dict[str, gevent.lock.Semaphore] = {}
        self._uniq = _UniqKeys()

    # ------------------------------------------------------------ routes
    def route(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Writable queues of `topic` on every master, from namesrv (cached for route_ttl, but asked
        again at once while it lists none: a group without a master, as after a whole group's restart;
        the Java client asks namesrv on every send while its publish info has no queue,
        DefaultMQProducerImpl.tryToFindTopicPublishInfo and TopicPublishInfo.ok).
        Raises RemotingError (code 17 and namesrv's remark) for a topic namesrv does not know."""
        cached = self._routes.get(topic)
        if refresh or not cached or not cached[1] or time.monotonic() - cached[0] > self.route_ttl:
            r = self.admin.topic_route(topic, missing_ok=False) or {}
            masters = {bd["brokerName"]: bd["brokerAddrs"].get("0") for bd in r.get("brokerDatas", [])}
            qs = [MessageQueue(q["brokerName"], masters[q["brokerName"]], i)
                  for q in sorted(r.get("queueDatas", []), key=lambda q: q["brokerName"])
                  if masters.get(q["brokerName"]) and q["perm"] & 2
                  for i in range(q["writeQueueNums"])]
            self._routes[topic] = (time.monotonic(), qs)
        return self._routes[topic][1]

    def select_queue(self, topic: str, exclude_broker: str | None = None,
                     broker: str | None = None, by_hash: str | None = None) -> MessageQueue | None:
        """Round robin over the topic's write queues (as DefaultMQProducer without latency fault
        tolerance), optionally avoiding one broker or pinning one; or with `by_hash` the queue that
        argument hashes to in the route's order, as the Java client's SelectMessageQueueByHash
        (`abs(arg.hashCode() % size)`): a route change moves keys."""
        qs = self.route(topic)
        if by_hash is not None:
            return qs[abs(java_hash(by_hash)) % len(qs)] if qs else None
        if broker is not None:
            qs = [q for q in qs if q.broker == broker]
        elif exclude_broker is not None:
            qs = [q for q in qs if q.broker != exclude_broker] or qs
        if not qs:
            return None
        n = next(self._rr.setdefault(topic, itertools.count(random.getrandbits(8))))
        return qs[n % len(qs)]

    # ------------------------------------------------------------ connections
    def _conn(self, addr: str) -> BrokerConnection:
        c = self._conns.get(addr)
        if c is not None and not c.closed:
            return c
        lock = self._connect_locks.setdefault(addr, gevent.lock.Semaphore())
        with lock:
            c = self._conns.get(addr)
            if c is None or c.closed:
                c = BrokerConnection(addr, self.connect_timeout, self.source)
                self._conns[addr] = c
            return c

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # ------------------------------------------------------------ encoding
    def _properties(self, key: str | None, uniq: str, tags: str | None, extra: dict[str, str] | None) -> str:
        parts = [f"UNIQ_KEY{NAME_SEP}{uniq}", f"WAIT{NAME_SEP}true"]
        if key is not None:
            parts.append(f"KEYS{NAME_SEP}{key}")
        if tags:
            parts.append(f"TAGS{NAME_SEP}{tags}")
        if extra:
            parts += [f"{k}{NAME_SEP}{v}" for k, v in extra.items()]
        return PROP_SEP.join(parts) + PROP_SEP

    def _encode(self, code: int, opaque: int, topic: str, mq: MessageQueue, props: str, body: bytes,
                batch: bool, sys_flag: int = 0) -> bytes:
        ext = {"a": self.group, "b": topic, "c": "TBW102", "d": "4", "e": str(mq.queue_id), "f": str(sys_flag),
               "g": str(_now_ms()), "h": "0", "i": props, "j": "0", "k": "false", "m": "true" if batch else "false",
               "n": mq.broker, "bname": mq.broker}
        hdr = ('{"code":%d,"language":"PYTHON","version":%d,"opaque":%d,"flag":0,"extFields":%s,'
               '"serializeTypeCurrentRPC":"JSON"}' % (code, CLIENT_VERSION, opaque,
                                                      json.dumps(ext, separators=(",", ":")))).encode()
        return struct.pack(">II", 4 + len(hdr) + len(body), len(hdr)) + hdr + body

    # ------------------------------------------------------------ send
    def send(self, topic: str, body: bytes, key: str | None = None, tags: str | None = None,
             queue: MessageQueue | None = None, exclude_broker: str | None = None,
             timeout: float | None = None, properties: dict[str, str] | None = None,
             sys_flag: int = 0, by_hash: str | None = None) -> SendResult:
        """One attempt. Never raises for broker or network trouble: the result says what happened."""
        start = _now_ms()
        uniq = self._uniq.next()
        res = SendResult(outcome="error", topic=topic, key=key, start_ms=start, end_ms=start, uniq_key=uniq)
        mq = queue or self.queue_or_fail(res, topic, exclude_broker, by_hash)
        if mq is None:
            return res
        props = self._properties(key, uniq, tags, properties)
        return self._attempt(res, SEND_MESSAGE_V2, topic, mq, props, body, False, timeout, sys_flag)

    def send_batch(self, topic: str, bodies: list[tuple[str | None, bytes]], queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult:
        """One attempt for a batch of (key, body) to one queue (SEND_BATCH_MESSAGE). On success
        `msg_id` holds the comma-separated msgIds and `queue_offset` the first message's offset."""
        start = _now_ms()
        res = SendResult(outcome="error", topic=topic, key=",".join(k or "" for k, _ in bodies), start_ms=start,
                         end_ms=start)
        mq = queue or self.queue_or_fail(res, topic, None)
        if mq is None:
            return res
        uniqs = [self._uniq.next() for _ in bodies]
        res.uniq_key = ",".join(uniqs)
        body = b"".join(_encode_batch_item(b, self._properties(k, u, None, None)) for (k, b), u in zip(bodies, uniqs))
        return self._attempt(res, SEND_BATCH_MESSAGE, topic, mq, "", body, True, timeout)

    def queue_or_fail(self, res: SendResult, topic: str, exclude_broker: str | None,
                      by_hash: str | None = None) -> MessageQueue | None:
        """The queue for this attempt (as `select_queue`), or None with `res` completed as an error that
        was never sent: namesrv's code and remark verbatim, or the lookup's failure."""
        try:
            mq = self.select_queue(topic, exclude_broker=exclude_broker, by_hash=by_hash)
        except RemotingError as e:  # namesrv's own answer (e.g. 17: no route) is kept verbatim
            res.code, res.remark, res.error = e.code, e.remark, str(e)
            mq = None
        except Exception as e:  # noqa: BLE001 - namesrv unreachable etc. is a result, not a crash
            res.error = f"route lookup failed: {e}"
            mq = None
        else:
            if mq is None:
                res.code, res.error = TOPIC_NOT_EXIST, f"topic {topic} has no writable queue"
        res.end_ms = _now_ms()
        return mq

    def _attempt(self, res: SendResult, code: int, topic: str, mq: MessageQueue, props: str, body: bytes,
                 batch: bool, timeout: float | None, sys_flag: int = 0) -> SendResult:
        res.broker, res.addr, res.queue_id = mq.broker, mq.addr, mq.queue_id
        deadline_s = timeout if timeout is not None else self.timeout
        try:
            conn = self._conn(mq.addr)
        except OSError as e:
            res.error, res.end_ms = f"connect to {mq.addr} failed: {e.strerror or e}", _now_ms()
            return res
        opaque = conn.next_opaque()
        data = self._encode(code, opaque, topic, mq, props, body, batch, sys_flag)
        try:
            ar = conn.submit(opaque, data)
        except ConnectionClosed as e:
            res.error, res.end_ms = str(e), _now_ms()
            return res
        res.sent = True
        try:
            f: Frame = ar.get(timeout=max(0.0, deadline_s - (_now_ms() - res.start_ms) / 1000))
        except gevent.Timeout:
            conn.forget(opaque)
            res.outcome, res.error, res.end_ms = "timeout", f"no response within {deadline_s:g}s", _now_ms()
            return res
        except ConnectionClosed as e:
            res.error, res.end_ms = str(e), _now_ms()
            return res
        res.end_ms = _now_ms()
        res.code, res.remark = f.code, f.remark
        status = STORED_STATUS.get(f.code)
        if status is None:
            return res
        res.outcome, res.status = "ok", status
        res.msg_id = f.ext.get("msgId")
        qid, qoff = f.ext.get("queueId"), f.ext.get("queueOffset")
        res.queue_id = int(qid) if qid is not None else res.queue_id
        res.queue_offset = int(qoff) if qoff is not None else None
        return res


def _encode_batch_item(body: bytes, props: str) -> bytes:
    """One message of a batch body (MessageDecoder.encodeMessage): total size, magic 0, body CRC 0,
    flag, body, properties."""
    p = props.encode()
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
    return struct.pack(">iiiii", size, 0, 0, 0, len(body)) + body + struct.pack(">h", len(p)) + p


def send_many(producer: Producer, items: Iterable[tuple[str, bytes, str | None]], concurrency: int
              ) -> list[SendResult]:
    """Send (topic, body, key) items with `concurrency` greenlets; results in completion order."""
    from gevent.pool import Pool
    pool = Pool(concurrency)
    return list(pool.imap_unordered(lambda it: producer.send(it[0], it[1], key=it[2]), items))
