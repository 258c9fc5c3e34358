"""A record's journal line, as bytes: any record through orjson (`record_line`), and the send
ledger's two lines of an attempt made fast (`SendLines`), in C where it is built, byte for byte the
same as the records of the schema (rmqchaos/ledger/schema.py)."""
from __future__ import annotations

from typing import Any

import orjson

from rmqchaos.ledger.schema import INTENT_KEYS

try:  # the send ledger's lines in C, built by scripts/setup.sh from rmqchaos/ledger/native/send_lines.c
    from rmqchaos.ledger._send_lines import intent as c_intent, outcome as c_outcome
except ImportError:  # not built: the Python path alone, the same bytes
    c_intent = c_outcome = None


def record_line(rec: dict[str, Any]) -> bytes:
    """A record's journal line. orjson: the same compact UTF-8 line as json.dumps(separators=(",", ":"),
    ensure_ascii=False), in a tenth of the CPU."""
    return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)


class SendLines:
    """The send ledger's two lines of one attempt, as bytes, for one producer process: the line the
    writer would make of intent_record(...) / outcome_record(...), at a fraction of the CPU (the
    ledger's cost is per attempt, on the producer's hot path; bench ledger).

    Both lines are made in C (`c_intent`, `c_outcome`: about half the time of the Python paths in a
    tight loop), or in Python for a value the C encoder does not
    write (a string JSON must escape, an int beyond 64 bits): the intent line as one %-format of a
    template holding the process's constants (run id, producer id, policy); an outcome repeats its
    intent's fields, so it is made from the intent line by slicing, and only the answer is encoded,
    through orjson. tests/test_ledgers.py holds the bytes equal to json.dumps of the records, field
    order included, on both paths."""

    _INTENT_HEAD = b'{"rec":"intent",'
    _OUTCOME_HEAD = b'{"rec":"outcome",'
    _CUT = len(_INTENT_HEAD)

    def __init__(self, run_id: str, producer_id: str, policy: str) -> None:
        assert INTENT_KEYS[:4] == ("rec", "run_id", "producer_id", "attempt_id") and INTENT_KEYS[7] == "policy"
        # the constant parts around the values: up to "attempt_id": and after the topic
        self._head = (self._INTENT_HEAD + b'"run_id":' + orjson.dumps(run_id) + b',"producer_id":'
                      + orjson.dumps(producer_id) + b',"attempt_id":')
        self._policy = b',"policy":' + orjson.dumps(policy)
        self._template = (self._head.replace(b"%", b"%%") + b'%d,"key":%b,"attempt":%d,"topic":%b'
                          + self._policy.replace(b"%", b"%%") + b',"intended_ms":%d,"start_ms":%d}\n')

    def intent(self, attempt_id: int, key: str, attempt: int, topic: str, intended_ms: int, start_ms: int) -> bytes:
        return (c_intent is not None and c_intent(self._head, self._policy, attempt_id, key, attempt, topic,
                                                  intended_ms, start_ms)) or self.intent_py(
            attempt_id, key, attempt, topic, intended_ms, start_ms)

    def intent_py(self, attempt_id: int, key: str, attempt: int, topic: str, intended_ms: int, start_ms: int) -> bytes:
        """The intent line without C."""
        return self._template % (attempt_id, orjson.dumps(key), attempt, orjson.dumps(topic), intended_ms, start_ms)

    def outcome_of(self, intent: bytes, r: Any, app_ok: bool | None) -> bytes:
        """The outcome line of the attempt whose intent line is `intent`, from its answer `r` (an object
        with rmqclient's SendResult attributes: the ledger's msg_id is its uniq_key, offset_msg_id its
        msg_id)."""
        return (c_outcome is not None and c_outcome(intent, r, app_ok)) or self.outcome(
            intent, r.end_ms, r.outcome, r.status, r.code, r.remark, r.error, r.sent, r.uniq_key, r.msg_id, r.broker,
            r.queue_id, r.queue_offset, app_ok)

    @classmethod
    def outcome(cls, intent: bytes, end_ms: int | None, outcome: str | None, status: str | None, code: int | None,
                remark: str | None, error: str | None, sent: bool | None, msg_id: str | None,
                offset_msg_id: str | None, broker: str | None, queue_id: int | None, queue_offset: int | None,
                app_ok: bool | None) -> bytes:
        """The outcome line of the attempt whose intent line is `intent`."""
        answer = orjson.dumps({"end_ms": end_ms, "outcome": outcome, "status": status, "code": code, "remark": remark,
                               "error": error, "sent": sent, "msg_id": msg_id, "offset_msg_id": offset_msg_id,
                               "broker": broker, "queue_id": queue_id, "queue_offset": queue_offset, "app_ok": app_ok})
        # the intent's fields: between its head and its closing "}\n"
        return cls._OUTCOME_HEAD + intent[cls._CUT:-2] + b"," + answer[1:] + b"\n"
