"""Transactional sends over remoting (issue 50): the END_TRANSACTION header from a half message's
answer and from a check-back, and the check-back answered from the application's own decision.
Pure logic on frames; the real transactions run in the transaction scenarios' tests."""
from __future__ import annotations

import struct
from typing import Any

import pytest

from rmqclient.frame import Frame
from rmqclient.producer import SendResult
from rmqclient.record import MAGIC_V1
from rmqclient.transaction import CHECK_TRANSACTION_STATE, TransactionalProducer, commit_log_offset, end_fields

pytestmark = pytest.mark.fast
HALF = SendResult("ok", "T", "k-1", 1, 2, status="SEND_OK", msg_id="7F00000100002A9F0000000000012C40",
                  uniq_key="7F0000010E6F1C2A3B4C5D6E00010002", broker="broker-a", addr="127.0.0.1:10911",
                  queue_id=0, queue_offset=17)


def record(props: str, topic: bytes = b"T") -> bytes:
    """A stored message record as a check-back carries it (MessageDecoder.encode)."""
    rec = (struct.pack(">iiiiiqqiq", 0, MAGIC_V1, 0, 0, 0, 17, 76864, 0, 1) + b"\x7f\0\0\x01" + struct.pack(">i", 5)
           + struct.pack(">q", 1) + b"\x7f\0\0\x01" + struct.pack(">i", 10911) + struct.pack(">iq", 0, 0)
           + struct.pack(">i", 4) + b"body" + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props.encode())
    return struct.pack(">i", len(rec)) + rec[4:]


def test_the_end_names_the_half_message_by_its_offsets_and_uniq_key() -> None:
    assert commit_log_offset(HALF.msg_id or "") == 0x12C40
    f = end_fields("g1", "T", HALF, "commit")
    assert f == {"topic": "T", "producerGroup": "g1", "tranStateTableOffset": "17", "commitLogOffset": str(0x12C40),
                 "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": HALF.uniq_key,
                 "transactionId": HALF.uniq_key, "bname": "broker-a"}
    assert end_fields("g1", "T", HALF, "rollback")["commitOrRollback"] == "12"
    assert end_fields("g1", "T", HALF, "unknown")["commitOrRollback"] == "0"
    with pytest.raises(ValueError, match="decision must be one of"):
        end_fields("g1", "T", HALF, "maybe")
    with pytest.raises(ValueError, match="not an IPv4 offset msgId"):
        commit_log_offset("abc")


def test_a_check_back_is_answered_from_the_applications_decision_with_the_checks_offsets() -> None:
    p = TransactionalProducer("127.0.0.1:1", group="g1", decide=lambda key, uniq: {"k-1": "commit"}.get(key, "unknown"))
    sent: list[tuple[str, dict[str, str]]] = []
    p._oneway = lambda addr, ext: sent.append((addr, ext))  # type: ignore[method-assign]
    try:
        check = {"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "tranStateTableOffset": "40", "commitLogOffset": "99000",
                 "msgId": "U1", "transactionId": "U1", "bname": "broker-a"}
        p._on_request("127.0.0.1:10911", Frame(code=CHECK_TRANSACTION_STATE, ext=check,
                                               body=record("KEYS\x01k-1\x02UNIQ_KEY\x01U1\x02PGROUP\x01g1\x02")))
        p._on_request("127.0.0.1:10911", Frame(code=CHECK_TRANSACTION_STATE, ext={**check, "msgId": "U2"},
                                               body=record("KEYS\x01k-2\x02UNIQ_KEY\x01U2\x02PGROUP\x01g1\x02")))
        p._on_request("127.0.0.1:10911", Frame(code=11, ext={}))  # anything else asked is not answered
    finally:
        p.close()
    assert [(a, e["commitOrRollback"], e["fromTransactionCheck"], e["tranStateTableOffset"], e["commitLogOffset"])
            for a, e in sent] == [("127.0.0.1:10911", "8", "true", "40", "99000"), ("127.0.0.1:10911", "0", "true", "40", "99000")]
    assert sent[0][1]["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC" and sent[0][1]["producerGroup"] == "g1"
    assert [(c["key"], c["uniq_key"], c["answer"]) for c in p.checks] == [("k-1", "U1", "commit"), ("k-2", "U2", "unknown")]


def test_the_group_heartbeats_every_master_of_its_routes_connecting_again_to_one_back_from_a_restart() -> None:
    # as MQClientInstance: a master the producer has not sent to since it came back still gets a channel
    # of the group, so its check-backs can reach the application
    import gevent
    from rmqclient.producer import MessageQueue
    p = TransactionalProducer("127.0.0.1:1", group="g1", decide=lambda key, uniq: "commit", heartbeat_s=0.05)
    qs = [MessageQueue("broker-a", "A:1", 0), MessageQueue("broker-b", "B:1", 0)]
    p._routes["T"] = (0.0, qs)
    p.route = lambda topic, refresh=False: qs  # type: ignore[method-assign]
    opened: list[str] = []
    beats: list[str] = []

    class Conn:
        closed = None

        def __init__(self, addr: str) -> None:
            self.addr = addr
    p._conn = lambda addr: (opened.append(addr), p._conns.setdefault(addr, Conn(addr)))[1]  # type: ignore[method-assign]
    p._heartbeat = lambda c: beats.append(c.addr)  # type: ignore[method-assign]
    p._conns["B:1"] = Conn("B:1")  # connected to broker-b only; broker-a came back and was never sent to
    try:
        gevent.sleep(0.18)
    finally:
        p._beats.kill()
    assert opened[0] == "A:1" and "B:1" not in opened, opened  # connected again to broker-a, once
    assert opened.count("A:1") == 1 and beats.count("B:1") >= 2 and beats.count("A:1") >= 1, (opened, beats)


def test_a_transactional_half_message_carries_the_prepared_flag_and_properties() -> None:
    captured: dict[str, Any] = {}
    p = TransactionalProducer("127.0.0.1:1", group="g1", decide=lambda k, u: "commit")
    p.send = lambda *a, **kw: captured.update(kw) or HALF  # type: ignore[method-assign]
    try:
        assert p.send_half("T", b"x", key="k-1") is HALF
    finally:
        p.close()
    assert captured["sys_flag"] == 4 and captured["properties"] == {"TRAN_MSG": "true", "PGROUP": "g1"}


def test_a_half_message_carries_its_check_immunity_when_the_load_asks() -> None:
    captured: dict[str, Any] = {}
    p = TransactionalProducer("127.0.0.1:1", group="g1", decide=lambda k, u: "commit")
    p.send = lambda *a, **kw: captured.update(kw) or HALF  # type: ignore[method-assign]
    try:
        p.send_half("T", b"x", key="k-1", check_immunity_s=6)
    finally:
        p.close()
    assert captured["properties"] == {"TRAN_MSG": "true", "PGROUP": "g1", "CHECK_IMMUNITY_TIME_IN_SECONDS": "6"}


def test_a_key_asked_about_while_being_decided_stays_open_until_a_check_back_gets_its_end() -> None:
    """The broker re-appended the half to ask: that copy is asked about again after the application's
    own end (apache/rocketmq#6402), so the producers linger for it."""
    import gevent
    from loadgen.transactions import TransactionApp
    from rmqchaos.spec import Transaction
    app = TransactionApp(Transaction(commit=1.0, end_after="0.2s", linger="5s"), "r1", "w0-1", None, key_prefix="run-")

    class P:
        def end(self, topic: str, res: Any, d: str) -> None:
            pass
    g = gevent.spawn(app.end, P(), "T", SendResult("ok", "T", "run-1", 0, 0))
    gevent.sleep(0.05)
    assert app.decide("run-1", None) == "unknown" and app.open == {"run-1"}
    g.join()
    assert g.value == "commit" and app.open == {"run-1"}  # its own end does not close the re-appended copy
    gevent.spawn_later(0.1, app.decide, "run-1", None)
    assert app.linger() == 0 and app.open == set()  # the next check-back, answered commit, did


def test_the_applications_decisions_follow_the_mix_and_answer_check_backs(tmp_path: Any) -> None:
    import json
    from loadgen.transactions import TransactionApp, drawn
    from rmqchaos.spec import Transaction
    spec = Transaction(commit=0.5, rollback=0.3, unknown=0.2, unknown_resolves_to="rollback")
    keys = [f"k-{i}" for i in range(4000)]
    share = {d: sum(drawn(spec, k) == d for k in keys) / len(keys) for d in ("commit", "rollback", "unknown")}
    assert abs(share["commit"] - 0.5) < 0.03 and abs(share["rollback"] - 0.3) < 0.03 and abs(share["unknown"] - 0.2) < 0.03
    assert [drawn(spec, k) for k in keys[:50]] == [drawn(spec, k) for k in keys[:50]]  # the key decides, not the clock
    app = TransactionApp(spec, "r1", "w0-1", tmp_path / "txn-w0-1.jsonl")
    ended: list[tuple[str, str]] = []

    class P:
        def end(self, topic: str, res: Any, d: str) -> None:
            ended.append((res.key, d))
    c = next(k for k in keys if drawn(spec, k) == "commit")
    u = next(k for k in keys if drawn(spec, k) == "unknown")
    for k in (c, u):
        app.end(P(), "T", SendResult("ok", "T", k, 0, 0))
    assert ended == [(c, "commit"), (u, "unknown")]
    assert (app.decide(c, None), app.decide(u, None), app.decide("never-seen", None)) == ("commit", "rollback", "unknown")
    assert app.decide("", None) == "unknown"  # no key: not this process's to answer
    app.close()
    recs = [json.loads(x) for x in (tmp_path / "txn-w0-1.jsonl").read_text().splitlines()]
    assert [(r["key"], r["source"], r["decision"], r["answer"]) for r in recs] == [
        (c, "app", "commit", "commit"), (u, "app", "unknown", "unknown"), (c, "check", "commit", "commit"),
        (u, "check", "unknown", "rollback"), ("never-seen", "check", None, "unknown"), ("", "check", None, "unknown")]


def test_a_crashed_application_abandons_its_pending_ends_and_answers_them_rollback_after(tmp_path: Any) -> None:
    import gevent
    from loadgen.transactions import TransactionApp, drawn
    from rmqchaos.spec import Transaction
    spec = Transaction(commit=1.0, end_after="1s")
    app = TransactionApp(spec, "r1", "w0-1", None, key_prefix="run-w0-1-")
    ended: list[str] = []

    class P:
        def end(self, topic: str, res: Any, d: str) -> None:
            ended.append(res.key)
    done = app.end(P(), "T", SendResult("ok", "T", "run-w0-1-1", 0, 0))  # decided before the crash
    pending = [gevent.spawn(app.end, P(), "T", SendResult("ok", "T", f"run-w0-1-{i}", 0, 0)) for i in (2, 3)]
    gevent.sleep(0.1)
    assert app.decide("run-w0-1-2", None) == "unknown"  # still deciding: not rollback yet
    assert app.crash() == 2 and app.open == {"run-w0-1-2", "run-w0-1-3"}
    gevent.joinall(pending)
    assert done == "commit" and [g.value for g in pending] == [None, None] and ended == ["run-w0-1-1"]
    # after the crash: its database kept the first decision; the abandoned keys were never decided
    assert [app.decide(k, None) for k in ("run-w0-1-1", "run-w0-1-2", "run-w0-1-3", "other-w1-9-1")] == \
        ["commit", "rollback", "rollback", "unknown"]
    assert app.open == set() and drawn(spec, "run-w0-1-2") == "commit"  # the mix alone would have committed


@pytest.mark.parametrize("load, line", [
    ({"transaction": {"commit": 0.5, "rollback": 0.2}}, "commit + rollback + unknown must be 1, got 0.7"),
    ({"transaction": {}, "order": {}}, "a transactional load is not an ordered one here"),
])
def test_a_bad_transaction_mix_is_one_line_at_load(tmp_path: Any, load: dict, line: str) -> None:
    import yaml
    from pipeline.runs import load_scenario
    from rmqchaos.spec import SpecError
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump({"name": "t", "load": load, "consumers": {"instances": [{"id": "c0", "listener": "orderly"}]}}))
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    assert line in e.value.line(), e.value.line()



def test_the_verdict_and_the_figures_say_what_became_of_the_transactions() -> None:
    from analysis.judge.figures import value
    from analysis.contracts.transactions import CLASSES, transaction_phrase
    t = {"keys": 3000, "classes": {**{c: 0 for c in CLASSES}, "committed_delivered": 2100, "rolled_back": 598,
                                   "rolled_back_delivered": 2, "unknown_in_time": 280, "unknown_late": 20},
         "extra_deliveries": 12, "checks": 320, "checked_after_end": 5, "bound_ms": 41000, "examples": {}}
    assert transaction_phrase({"transactions": t}) == (
        "transactions: 3,000 half messages stored: 2,100 committed and delivered (12 extra deliveries), 600 rolled "
        "back (2 DELIVERED all the same), 300 ended unknown (280 resolved by a check-back in time, 20 late, 0 never), "
        "5 asked about after their end")
    assert value({"transactions": t}, "transactions.rolled_back_delivered") == 2
    assert value({"transactions": t}, "transactions.checked_after_end") == 5
    assert value({}, "transactions.undecided") is None and transaction_phrase({}) is None
