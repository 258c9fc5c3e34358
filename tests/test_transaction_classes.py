"""The transaction classes (issue 50) on planted ledgers, counted exactly (Spark)."""
from __future__ import annotations

from typing import Any


def test_every_transaction_class_is_counted_exactly(kept_spark: Any) -> None:
    from analysis.contracts.transactions import transaction_check
    S = "rec string, key string, outcome string, end_ms long"
    T = "key string, source string, decision string, answer string, decided_ms long, error string"
    R = "key string, receive_ms long"
    sends = [("outcome", k, "ok", 1000) for k in ("c1", "c2", "c3", "r1", "r2", "u1", "u2", "u3", "x1", "a1", "a2")]
    sends.append(("outcome", "f1", "timeout", 1000))  # no half stored: not a transaction here
    txn = [("c1", "app", "commit", "commit", 1100, None), ("c2", "app", "commit", "commit", 1100, None),
           ("c3", "app", "commit", "commit", 1100, "END_TRANSACTION to ... not sent"),  # its end failed ...
           ("c3", "check", "commit", "commit", 37_000, None),  # ... a check-back committed it
           ("r1", "app", "rollback", "rollback", 1100, None), ("r2", "app", "rollback", "rollback", 1100, None),
           ("r2", "check", "rollback", "rollback", 31_000, None),  # asked after its rollback
           ("u1", "app", "unknown", "unknown", 1100, None), ("u1", "check", "unknown", "commit", 37_000, None),
           ("u2", "app", "unknown", "unknown", 1100, None), ("u2", "check", "unknown", "commit", 90_000, None),
           ("u3", "app", "unknown", "unknown", 1100, None),  # x1: no decision recorded (its producer died)
           # a1, a2: abandoned by a producer crash, rolled back by the restarted producer's check-back
           ("a1", "check", None, "rollback", 9000, None), ("a2", "check", None, "rollback", 9000, None)]
    recv = [("c1", 2000), ("c1", 2500), ("c3", 38_000), ("r2", 32_000), ("u1", 38_000), ("u2", 91_000), ("a2", 9500)]
    r = transaction_check(kept_spark.createDataFrame(sends, S), kept_spark.createDataFrame(txn, T),
                          kept_spark.createDataFrame(recv, R), receive_complete=True)
    assert r["keys"] == 11 and r["bound_ms"] == 41_000
    # a2: resolved in time, but delivered after its rollback: the violation is its class
    assert r["classes"] == {"committed_delivered": 2, "committed_lost": 1, "committed_undelivered_at_stop": 0,
                            "rolled_back_delivered": 2, "rolled_back": 1, "unknown_in_time": 2, "unknown_late": 1,
                            "unknown_never": 1, "undecided": 1, "discarded": 0}
    assert r["extra_deliveries"] == 1 and r["checks"] == 6 and r["checked_after_end"] == 2 and r["abandoned"] == 3
    assert r["examples"]["rolled_back_delivered"] == ["a2", "r2"] and r["examples"]["committed_lost"] == ["c2"]


def test_a_never_resolved_half_the_broker_discarded_after_transaction_check_max_is_its_own_class(kept_spark: Any) -> None:
    """The store holds u1's half in TRANS_CHECK_MAX_TIME_TOPIC; u2 and x1 are nowhere there."""
    from analysis.contracts.transactions import DISCARD_TOPIC, transaction_check
    S = "rec string, key string, outcome string, end_ms long"
    T = "key string, source string, decision string, answer string, decided_ms long, error string"
    R = "key string, receive_ms long"
    sends = [("outcome", k, "ok", 1000) for k in ("c1", "u1", "u2", "x1", "x2")]
    txn = [("c1", "app", "commit", "commit", 1100, None)] + [
        (k, src, "unknown", "unknown", ms, None) for k in ("u1", "u2") for src, ms in
        (("app", 1100), ("check", 8000), ("check", 13_000), ("check", 18_000))]
    recv = [("c1", 2000)]
    asked: list[tuple[str, str]] = []

    class Store:
        def find(self, topic: str, key: str) -> list[dict[str, Any]]:
            asked.append((topic, key))
            return [{"node": "broker-a", "topic": topic}] if key in ("u1", "x2") else []
    r = transaction_check(kept_spark.createDataFrame(sends, S), kept_spark.createDataFrame(txn, T),
                          kept_spark.createDataFrame(recv, R), receive_complete=True, store=Store())
    c = r["classes"]
    assert (c["committed_delivered"], c["unknown_never"], c["undecided"], c["discarded"]) == (1, 1, 1, 2), c
    assert sorted(asked) == [(DISCARD_TOPIC, k) for k in ("u1", "u2", "x1", "x2")]  # only the never resolved
    assert r["examples"]["discarded"] == ["u1", "x2"] and r["examples"]["unknown_never"] == ["u2"]
    # x1: no decision, nothing resolved it, not discarded (its producer died, the broker not done yet)
    assert sum(c.values()) == r["keys"] == 5


def test_a_transactional_loads_uncommitted_halves_are_never_lost_and_its_rechecked_copies_have_their_cause(
        kept_spark: Any, tmp_path: Any) -> None:
    # t1 committed and delivered once; t2 rolled back, not delivered; t3 abandoned, never resolved, not
    # delivered; t4 committed, asked about after its commit and stored again (two copies delivered);
    # t5 committed and never delivered: the one loss; t6 ended unknown, answered commit to two check-backs
    # (a slow answer: the broker asked again, about another re-appended copy), stored and delivered twice
    import json
    from analysis.reconcile.reconcile import analyze_ledgers
    from rmqchaos.ledger.schema import intent_record, outcome_record

    def attempt(key: str, start: int, msg: str) -> list[dict]:
        return [intent_record("intent", "r", "p0", start, key, 1, "T", "no_retry", start, start),
                outcome_record("outcome", "r", "p0", start, key, 1, "T", "no_retry", start, start, start + 5, "ok",
                               "SEND_OK", None, None, None, True, msg, None, "broker-a", 0, start, True)]

    def delivery(key: str, msg: str, offset: int) -> dict:
        return {"run_id": "r", "key": key, "msg_id": msg, "topic": "T", "origin_topic": "T", "broker": "broker-a",
                "queue_id": 0, "queue_offset": offset, "reconsume_times": 0, "consumer_id": "c0", "batch_size": 1,
                "batch_index": 0, "store_ms": 1, "receive_ms": 2000 + offset}

    def txn(key: str, source: str, decision: str | None, answer: str, ms: int) -> dict:
        return {"run_id": "r", "producer_id": "p0", "key": key, "source": source, "decision": decision,
                "answer": answer, "decided_ms": ms, "error": None}
    send = [r for i, k in enumerate(("t1", "t2", "t3", "t4", "t5", "t6")) for r in attempt(k, 1000 + i, f"M{i}")]
    recv = [delivery("t1", "M0", 1), delivery("t4", "M3", 2), delivery("t4", "M3x", 3),  # t4's second copy
            delivery("t6", "M5", 4), delivery("t6", "M5x", 5)]
    txns = [txn("t1", "app", "commit", "commit", 1100), txn("t2", "app", "rollback", "rollback", 1100),
            txn("t4", "app", "commit", "commit", 1100), txn("t4", "check", "commit", "commit", 5000),
            txn("t5", "app", "commit", "commit", 1100), txn("t6", "app", "unknown", "unknown", 1100),
            txn("t6", "check", "unknown", "commit", 9000), txn("t6", "check", "unknown", "commit", 14000)]
    for name, rows in (("send-p0", send), ("receive-c0", recv), ("txn-p0", txns)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    res = analyze_ledgers(kept_spark, [tmp_path / "send-p0.jsonl"], [tmp_path / "receive-c0.jsonl"], [],
                          txn_files=[tmp_path / "txn-p0.jsonl"])
    c = res["counts"]
    assert (c["ok"], c["not_committed"], c["lost"], c["duplicated"]) == (1, 2, 1, 2), c
    assert res["duplicates_by_cause"]["transaction_recommit"] == 2, res["duplicates_by_cause"]
    assert res["duplicates_by_cause"]["unexplained"] == 0
    t = res["transactions"]
    assert t["classes"]["committed_lost"] == 1 and t["classes"]["undecided"] == 1 and t["checked_after_end"] == 1, t


def test_a_lost_timer_stored_only_in_the_wheels_topic_is_lost_in_the_wheel(kept_spark: Any) -> None:
    """The store check (analysis/durability/store_check.py) on planted ledgers and a planted store: w1 is stored
    only in rmq_sys_wheel_timer (the wheel never put it into its topic), w2 there and in its topic (put,
    then never delivered), g1 nowhere, p1 (not a timer) in its topic, c1 only past a DLedger replica's
    truncated log (in no log: cluster/stored/messages.py in_log)."""
    from analysis.durability.store_check import store_check
    S = "rec string, key string, topic string, outcome string, broker string, status string, end_ms long"
    K = "key string, class string"
    keys = ["w1@5000", "w2@5000", "g1@5000", "p1", "c1"]
    sends = [r for i, k in enumerate(keys) for r in (("intent", k, "T", None, None, None, None),
                                                     ("outcome", k, "T", "ok", "broker-a", "SEND_OK", 1000 + i))]
    at = {"w1@5000": ["rmq_sys_wheel_timer"], "w2@5000": ["T", "rmq_sys_wheel_timer"], "p1": ["T"], "c1": ["T"]}

    class Store:
        unread: list[str] = []

        def find(self, topic: str, key: str) -> list[dict[str, Any]]:
            return [{"node": "broker-a", "topic": topic, "in_log": key != "c1"}] if topic in at.get(key, []) else []

        def nodes(self) -> list[str]:
            return ["broker-a"]

        def method(self) -> str:
            return "planted"
    r = store_check(kept_spark.createDataFrame(sends, S), kept_spark.createDataFrame([(k, "lost") for k in keys], K),
                    Store(), [])
    assert (r["lost_from_store"], r["lost_in_delivery"], r["lost_in_wheel"], r["lost_truncated"]) == (2, 3, 1, 1), r
    assert r["gone_acked_ms_by_broker"] == {"broker-a": [1002, 1004]}, r  # g1's and c1's: the ones in no log
