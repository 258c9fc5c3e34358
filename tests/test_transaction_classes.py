"""The transaction classes (issue 50) on planted ledgers, counted exactly (Spark)."""
from __future__ import annotations

from typing import Any


def test_every_transaction_class_is_counted_exactly(kept_spark: Any) -> None:
    from analysis.transactions import transaction_check
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
                            "unknown_never": 1, "undecided": 1}
    assert r["extra_deliveries"] == 1 and r["checks"] == 6 and r["checked_after_end"] == 2 and r["abandoned"] == 3
    assert r["examples"]["rolled_back_delivered"] == ["a2", "r2"] and r["examples"]["committed_lost"] == ["c2"]
