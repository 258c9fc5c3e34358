"""Transactional sends over remoting, as RocketMQ 5.5.0's Java client does them (docs/protocol.md,
"Transactions and ordered sends"; DefaultMQProducerImpl.sendMessageInTransaction / endTransaction /
checkTransactionState):

- a half message is a SEND_MESSAGE_V2 with the properties TRAN_MSG=true and PGROUP=<group> and
  sysFlag TRANSACTION_PREPARED_TYPE (the broker goes by the property);
- it is ended by END_TRANSACTION (37), oneway, to the master that stored it: COMMIT (8), ROLLBACK (12)
  or NOT (0, unknown: the broker writes no answer and waits for a check-back), naming the half message
  by its commit-log offset (from its offset msgId), its queue offset and its UNIQ_KEY;
- the broker asks what became of a half message still open after transactionTimeOut with
  CHECK_TRANSACTION_STATE (39), oneway, on any connection of the producer group that heartbeated
  (HEART_BEAT with producerDataSet, at least every 120 s): the producer answers with END_TRANSACTION
  (fromTransactionCheck=true) echoing the check's offsets (the broker re-appended the half message
  before asking), to the broker that asked.

The application's part is `decide(key, uniq_key)`: its own recorded decision for a key ("commit",
"rollback" or "unknown"), asked on every check-back; every check is recorded in `checks`."""
from __future__ import annotations

import os
import random
import time
from typing import Any, Callable

import gevent

from rmqclient.admin import HEART_BEAT
from rmqclient.frame import FLAG_ONEWAY, Frame, encode_frame
from rmqclient.producer import BrokerConnection, ConnectionClosed, Producer, SendResult
from rmqclient.record import decode

END_TRANSACTION = 37
CHECK_TRANSACTION_STATE = 39
PREPARED = 4  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
DECISIONS = {"commit": 8, "rollback": 12, "unknown": 0}  # TRANSACTION_COMMIT_TYPE, _ROLLBACK_TYPE, _NOT_TYPE
HEARTBEAT_S = 30.0  # the Java client's heartbeatBrokerInterval; the broker forgets a channel after 120 s


def commit_log_offset(offset_msg_id: str) -> int:
    """The commit-log offset an IPv4 offset msgId names (MessageDecoder.decodeMessageId: 4 bytes of
    address, 4 of port, 8 of offset, as 32 hex digits)."""
    if len(offset_msg_id) != 32:
        raise ValueError(f"not an IPv4 offset msgId: {offset_msg_id!r}")
    return int(offset_msg_id[16:], 16)


def end_fields(group: str, topic: str, res: SendResult, decision: str, from_check: bool = False,
               check: dict[str, str] | None = None) -> dict[str, str]:
    """END_TRANSACTION's header (EndTransactionRequestHeader): from the half message's send result, or
    from a check-back's header (its offsets, which the broker moved when it re-appended the message)."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
    if check is not None:
        tran, log, uniq, bname = check["tranStateTableOffset"], check["commitLogOffset"], check["msgId"], check.get("bname")
        txid = check.get("transactionId") or uniq
    else:
        assert res.msg_id is not None and res.queue_offset is not None, "a stored half message"
        tran, log, uniq, bname = str(res.queue_offset), str(commit_log_offset(res.msg_id)), res.uniq_key, res.broker
        txid = res.uniq_key
    out = {"topic": topic, "producerGroup": group, "tranStateTableOffset": str(tran), "commitLogOffset": str(log),
           "commitOrRollback": str(DECISIONS[decision]), "fromTransactionCheck": "true" if from_check else "false",
           "msgId": str(uniq), "transactionId": str(txid)}
    if bname:
        out["bname"] = bname
    return out


class TransactionalProducer(Producer):
    """A Producer whose every broker connection heartbeats as a member of its group and answers the
    broker's check-backs from `decide`."""

    def __init__(self, namesrv: str, group: str, decide: Callable[[str | None, str | None], str],
                 heartbeat_s: float = HEARTBEAT_S, **kw: Any) -> None:
        super().__init__(namesrv, group=group, **kw)
        self.decide = decide
        self.heartbeat_s = heartbeat_s
        self.client_id = f"127.0.0.1@{os.getpid()}#{random.getrandbits(32)}"
        self.checks: list[dict[str, Any]] = []  # {ms, broker, key, uniq_key, answer}
        self._beats = gevent.spawn(self._heartbeats)

    # ------------------------------------------------------------ the group's membership
    def _conn(self, addr: str) -> BrokerConnection:
        c = self._conns.get(addr)
        fresh = c is None or c.closed is not None
        c = super()._conn(addr)
        if fresh:
            c.on_request = lambda f, a=addr: self._on_request(a, f)
            self._heartbeat(c)  # before the first half message: a check-back needs a registered channel
        return c

    def _heartbeat(self, c: BrokerConnection) -> None:
        body = ('{"clientID":"%s","producerDataSet":[{"groupName":"%s"}],"consumerDataSet":[],'
                '"heartbeatFingerprint":0}' % (self.client_id, self.group)).encode()
        opaque = c.next_opaque()
        try:
            c.submit(opaque, encode_frame(Frame(code=HEART_BEAT, opaque=opaque, body=body))).get(timeout=self.timeout)
        except (ConnectionClosed, gevent.Timeout):
            c.forget(opaque)  # the next beat, or the send on this connection, says what is wrong

    def _heartbeats(self) -> None:
        """As MQClientInstance's scheduled tasks: the routes of the topics in use refreshed, then a
        heartbeat to every master they name, connecting again where needed, whether or not anything
        was sent there since: a master back from a restart must have a channel of the group to ask
        its check-backs on (without it, a half whose END was lost with the old master is never asked)."""
        while True:
            gevent.sleep(self.heartbeat_s)
            addrs: set[str] = set()
            for topic in list(self._routes):
                try:
                    addrs |= {q.addr for q in self.route(topic)}
                except Exception:  # noqa: BLE001 - namesrv unreachable: the masters known so far
                    addrs |= {q.addr for q in self._routes[topic][1]}
            for addr in addrs | {a for a, c in self._conns.items() if c.closed is None}:
                try:
                    c, fresh = self._conns.get(addr), False
                    if c is None or c.closed is not None:
                        c, fresh = self._conn(addr), True  # a fresh connection heartbeats in _conn
                    if not fresh:
                        self._heartbeat(c)
                except (OSError, ConnectionClosed):
                    continue  # a master down now: the next round tries again

    def close(self) -> None:
        self._beats.kill(block=False)
        super().close()

    # ------------------------------------------------------------ a transaction
    def send_half(self, topic: str, body: bytes, key: str | None = None, timeout: float | None = None,
                  exclude_broker: str | None = None, check_immunity_s: int | None = None) -> SendResult:
        """One attempt to store a half message (any queue: the broker keeps it in its half topic).
        `check_immunity_s`: its CHECK_IMMUNITY_TIME_IN_SECONDS, a user property as the Java client's
        MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS."""
        props = {"TRAN_MSG": "true", "PGROUP": self.group}
        if check_immunity_s is not None:
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(check_immunity_s)
        return self.send(topic, body, key=key, timeout=timeout, sys_flag=PREPARED, exclude_broker=exclude_broker,
                         properties=props)

    def end(self, topic: str, res: SendResult, decision: str) -> str | None:
        """End the half message `res` (a stored send_half result) oneway; None, or why it was not sent."""
        if res.addr is None:
            return "the half message has no broker"
        return self._oneway(res.addr, end_fields(self.group, topic, res, decision))

    def _oneway(self, addr: str, ext: dict[str, str]) -> str | None:
        try:
            c = self._conn(addr)
            c.oneway(encode_frame(Frame(code=END_TRANSACTION, opaque=c.next_opaque(), flag=FLAG_ONEWAY, ext=ext)))
        except (OSError, ConnectionClosed) as e:
            return f"END_TRANSACTION to {addr} not sent: {e}"
        return None

    # ------------------------------------------------------------ the broker asks
    def _on_request(self, addr: str, f: Frame) -> None:
        if f.code != CHECK_TRANSACTION_STATE:
            return  # nothing else is asked of a producer here
        rec = decode(f.body, 0) if f.body else None
        props = rec.props if rec is not None else {}
        key, uniq = (props.get("KEYS") or None), f.ext.get("msgId") or props.get("UNIQ_KEY")
        try:
            answer = self.decide(key, uniq)
        except Exception:  # noqa: BLE001 - an application that cannot tell answers unknown, as Java's does
            answer = "unknown"
        topic = f.ext.get("topic") or (rec.topic if rec is not None else "")  # the half topic, as Java echoes it
        err = self._oneway(addr, end_fields(props.get("PGROUP") or self.group, topic,
                                            SendResult("ok", topic, key, 0, 0), answer, from_check=True, check=f.ext))
        self.checks.append({"ms": int(time.time() * 1000), "broker": addr, "key": key, "uniq_key": uniq,
                            "answer": answer, "error": err})
