"""Queue positions acknowledged to two keys (analysis/durability/offsets.py), on planted ledgers: apache/rocketmq
#7689's fingerprint, whichever key of each pair the consumer got."""
from __future__ import annotations

from typing import Any

import jsonschema

from analysis.durability.offsets import reused_queue_offsets
from analysis.report.verdict import verdict
from rmqchaos.spec.expect import figure
from test_failover import SCHEMA
from test_verdict import summary

COLS = "rec string, outcome string, broker string, topic string, queue_id int, queue_offset long, key string, end_ms long"


def test_two_keys_acknowledged_at_one_position_are_counted_once_with_their_classes(kept_spark: Any) -> None:
    send = kept_spark.createDataFrame([
        ("outcome", "ok", "broker-a", "T", 0, 5, "k1", 1000),     # delivered
        ("outcome", "ok", "broker-a", "T", 0, 5, "k2", 9000),     # the same position after the restart: lost
        ("outcome", "ok", "broker-a", "T", 0, 6, "k3", 1001),
        ("outcome", "ok", "broker-a", "T", 0, 6, "k3", 1002),     # one key answered twice at its position
        ("outcome", "ok", "broker-b", "T", 0, 5, "k4", 1003),     # another group: its own queues
        ("outcome", "ok", "broker-a", "T", 1, 5, "k5", 1004),     # another queue
        ("outcome", "ok", "broker-a", "U", 0, 5, "k6", 1005),     # another topic
        ("outcome", "error", "broker-a", "T", 0, 6, "k7", 1006),  # not acknowledged
        ("intent", None, None, "T", None, None, "k8", None),
        ("outcome", "ok", "broker-a", "T", 0, None, "k9", 1007),  # no offset in the answer
    ], COLS)
    keys = kept_spark.createDataFrame([("k1", "ok"), ("k2", "lost"), ("k3", "ok"), ("k4", "ok"), ("k5", "ok"),
                                       ("k6", "ok"), ("k7", "failed"), ("k8", "indeterminate"), ("k9", "ok")],
                                      "key string, class string")
    r = reused_queue_offsets(send, keys)
    assert (r["positions"], r["keys"], r["lost"]) == (1, 2, 1)
    assert r.pop("delivered_keys") == ["k1"]  # for the store check: read once, is it still stored?
    assert r["examples"] == [{"broker": "broker-a", "topic": "T", "queue_id": 0, "queue_offset": 5,
                              "acks": [{"key": "k1", "end_ms": 1000, "class": "ok"},
                                       {"key": "k2", "end_ms": 9000, "class": "lost"}]}]
    jsonschema.validate(r, SCHEMA["properties"]["reused_queue_offsets"])
    # as an `expect:` figure, and in the verdict
    assert figure({"reused_queue_offsets": r}, "reused_queue_offsets") == 1
    s = summary("x", "false", 1, None, reused_queue_offsets=r)
    assert "; 1 queue positions acknowledged to two messages each (1 of those messages lost)" in verdict(s)
    assert "queue positions" not in verdict(summary("x", "false", 1, None))  # summaries before it


def test_no_position_acknowledged_twice_is_zero_and_no_clause(kept_spark: Any) -> None:
    send = kept_spark.createDataFrame([("outcome", "ok", "broker-a", "T", 0, i, f"k{i}", 1000 + i) for i in range(5)],
                                      COLS)
    keys = kept_spark.createDataFrame([(f"k{i}", "ok") for i in range(5)], "key string, class string")
    r = reused_queue_offsets(send, keys)
    assert r == {"positions": 0, "keys": 0, "lost": 0, "examples": [], "delivered_keys": []}
