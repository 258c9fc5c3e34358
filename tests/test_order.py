"""The per-key order checker (issue 50) on planted ledgers: every anomaly kind, counted exactly."""
from __future__ import annotations

from typing import Any

import pytest

from analysis.contracts.order import order_check, windows
from rmqchaos.ledger.schema import shard_of

RECV = "key string, receive_ms long, queue_offset long, broker string"
SEND = "rec string, key string, outcome string, end_ms long, broker string, queue_id int"


@pytest.mark.fast
def test_a_keys_sharding_key_and_sequence_are_read_from_it() -> None:
    assert shard_of("a1b2c3-w0-77-u3k1~42") == ("a1b2c3-w0-77-u3k1", 42)
    assert shard_of("a1b2c3-w0-77-1") is None and shard_of("x~") is None and shard_of("~3") is None
    assert shard_of(None) is None


@pytest.mark.fast
def test_anomalous_seconds_merge_into_windows() -> None:
    assert windows([10, 11, 13, 20]) == [{"start_ms": 10_000, "end_ms": 14_000}, {"start_ms": 20_000, "end_ms": 21_000}]
    assert windows([]) == []


def test_every_order_anomaly_is_counted_exactly(kept_spark: Any) -> None:
    # key A in order with an immediate repeat; B reordered (3 before 2); C a redelivery after a higher one;
    # D a gap (2 acknowledged, never delivered, 3 was); E in order; a plain key of an unordered load
    deliveries = [("A~1", 1000, 1, "c0"), ("A~2", 1001, 2, "c0"), ("A~2", 1002, 2, "c0"), ("A~3", 1003, 3, "c0"),
                  ("B~1", 2000, 1, "c0"), ("B~3", 5000, 3, "c1"), ("B~2", 5001, 2, "c1"),
                  ("C~1", 3000, 1, "c0"), ("C~2", 3001, 2, "c0"), ("C~1", 7000, 1, "c1"), ("C~3", 7001, 3, "c1"),
                  ("D~1", 4000, 1, "c0"), ("D~3", 4002, 3, "c0"),
                  ("E~1", 4000, 1, "c0"), ("plain-1", 4000, 9, "c0")]
    # B moved: its third message went to broker-b's queue 0 (a route change); every other key stayed
    # on its one queue, C's and D's on broker-b
    home = {"A": ("broker-a", 1), "B": ("broker-a", 2), "C": ("broker-b", 1), "D": ("broker-b", 3), "E": ("broker-a", 0)}
    sends = [("outcome", k, "ok", 100 + i, *(("broker-b", 0) if k == "B~3" else home.get(k[0], ("broker-a", 0))))
             for i, k in enumerate(("A~1", "A~2", "A~3", "B~1", "B~2", "B~3", "C~1", "C~2", "C~3",
                                    "D~1", "D~2", "D~3", "E~1", "E~2", "plain-1"))]
    sends.append(("outcome", "D~4", "timeout", 999, None, None))  # never acknowledged: no gap
    r = order_check(kept_spark.createDataFrame(sends, SEND), kept_spark.createDataFrame(deliveries, RECV))
    assert r is not None
    assert (r["keys"], r["messages"], r["keys_in_order"]) == (5, 14, 2)  # A and E; E~2's loss is the tail's
    assert r["keys_by_anomaly"] == {"reordered": 1, "repeat_out_of_order": 1, "gap": 1}
    assert r["messages_by_anomaly"] == {"reordered": 1, "repeat_out_of_order": 1, "gap": 1, "repeat_in_order": 1}
    assert r["windows"] == [{"start_ms": 5000, "end_ms": 8000}]  # seconds 5 and 7: one window
    assert {e["shard_key"]: e["seqs"] for e in r["examples"]} == {"B": [1, 3, 2], "C": [1, 2, 1, 3], "D": [1, 3]}
    # B, C and D broke order with one anomalous message each (an inversion, a replay, a gap)
    assert r["causes"] == {"moved": 1, "stayed": 2, "by_home_broker": {"broker-a": 1, "broker-b": 2},
                           "messages": {"moved": 1, "stayed": 2, "by_home_broker": {"broker-a": 1, "broker-b": 2}}}
    assert r["keys_by_home_broker"] == {"broker-a": 3, "broker-b": 2} and r["keys_moved"] == 1
    none = order_check(kept_spark.createDataFrame(sends[-2:], SEND),
                       kept_spark.createDataFrame([("plain-1", 1, 1, "c0")], RECV))
    assert none is None  # an unordered load: no order verdict


@pytest.mark.fast
def test_the_verdict_and_the_figures_say_which_keys_broke_order() -> None:
    from analysis.judge.figures import value
    from analysis.contracts.order import order_phrase
    o = {"keys": 80, "messages": 4000, "keys_in_order": 68, "keys_by_anomaly": {"reordered": 5, "repeat_out_of_order": 7,
                                                                               "gap": 0},
         "messages_by_anomaly": {"reordered": 9, "repeat_out_of_order": 40, "gap": 0, "repeat_in_order": 3},
         "windows": [{"start_ms": 20_000, "end_ms": 23_000}, {"start_ms": 41_000, "end_ms": 42_000}], "examples": []}
    assert order_phrase({"order": o}) == ("order: 12 of 80 sharding keys broke it (reordered: 5 key(s), 9 message(s); "
                                          "repeated out of order: 7 key(s), 40 message(s)), in 2 window(s) lasting "
                                          "3 s and 1 s")
    # with the run's series, when: on the report plots' time axis (second 0: the first attempt)
    assert order_phrase({"order": o, "series": [{"t": 1}, {"t": 2}]}).endswith(
        "in 2 window(s) lasting 3 s and 1 s (at 19-22 s and 40-41 s since the first attempt)")
    assert (value({"order": o}, "keys_out_of_order"), value({"order": o}, "order_repeats_out_of_order")) == (12, 40)
    assert value({"order": None}, "order_gaps") is None and order_phrase({}) is None
    assert order_phrase({"order": {**o, "keys_in_order": 80}}) == "order: all 80 sharding keys in order (4,000 deliveries)"
    caused = {**o, "causes": {"moved": 9, "stayed": 3, "by_home_broker": {"broker-a": 12}}, "keys_moved": 30}
    assert order_phrase({"order": {**o, "keys_in_order": 80, "keys_moved": 30}}) == (
        "order: all 80 sharding keys in order (4,000 deliveries); 30 of them moved to another queue")
    assert [value({"order": caused}, f) for f in ("order_keys_moved", "order_broken_moved", "order_broken_stayed",
                                                  "order_broken_on.broker-a", "order_broken_on.broker-b")] == [30, 9, 3, 12, 0]
    assert order_phrase({"order": caused}).endswith(
        "lasting 3 s and 1 s; 9 had moved to another queue, 3 stayed on theirs (first sent to: 12 on broker-a)")


@pytest.mark.fast
def test_a_sharding_key_goes_to_the_queue_the_java_selector_picks() -> None:
    from rmqclient.producer import MessageQueue, Producer, java_hash
    assert (java_hash("hello"), java_hash("polygenelubricants"), java_hash("ü€𝄞")) == (99162322, -2147483648, 17317530)
    p = Producer("127.0.0.1:1")
    qs = [MessageQueue(b, "127.0.0.1:1", i) for b in ("broker-a", "broker-b") for i in range(4)]
    p._routes["T"] = (float("inf"), qs)  # a route as namesrv gave it, brokers in name order
    assert p.select_queue("T", by_hash="hello") == qs[99162322 % 8]
    assert p.select_queue("T", by_hash="polygenelubricants") == qs[0]  # Integer.MIN_VALUE % 8 is 0 in Java too


@pytest.mark.fast
@pytest.mark.parametrize("load, consumers, line", [
    ({"queues": 1, "order": {}}, [{"id": "c0", "listener": "orderly"}],
     "t.yaml:3: load.order: sharding needs at least two queues: the topic has one"),
    ({"order": {}, "policy": {"kind": "resend_to_backup_topic"}}, [{"id": "c0", "listener": "orderly"}],
     "policy resend_to_backup_topic would move it to another topic"),
    ({"order": {}}, [{"id": "c0"}], "t.yaml:4: consumers.instances[0].listener: consumer c0 reads the ordered topic"),
    ({}, [{"id": "c0", "listener": "orderly", "mode": "ack_first_of_batch"}], "an orderly consumer acks every message"),
])
def test_bad_order_settings_are_one_line_at_load(tmp_path: Any, load: dict, consumers: list, line: str) -> None:
    import yaml
    from pipeline.runs import load_scenario
    from rmqchaos.spec import SpecError
    f = tmp_path / "t.yaml"
    f.write_text("name: t\ncluster: {brokers: [{name: broker-a, port: 10911}]}\n" + f"load: {yaml.safe_dump(load, default_flow_style=True)}"
                 + f"consumers: {{instances: {yaml.safe_dump(consumers, default_flow_style=True).strip()}}}\n")
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    assert line in e.value.line(), e.value.line()


@pytest.mark.fast
def test_strict_order_pins_a_key_to_its_first_queue_and_fails_rather_than_move() -> None:
    """load.order.strict: a sharding key's sends go to the queue it was first sent to; while that queue
    is not in the route, a send fails unsent (its error says why) instead of taking another queue, as
    an application that must not reorder a key would do. The route here is a stand-in for namesrv's."""
    from types import SimpleNamespace

    from loadgen.context import LoadContext
    from rmqclient.producer import MessageQueue, SendResult
    a0, a1, b0 = MessageQueue("broker-a", "127.0.0.11:10911", 0), MessageQueue("broker-a", "127.0.0.11:10911", 1), \
        MessageQueue("broker-b", "127.0.0.21:10911", 0)
    route = [a0, a1, b0]
    prod = SimpleNamespace(route=lambda topic: list(route),
                           queue_or_fail=lambda res, topic, exclude, by_hash: route[len(by_hash) % len(route)])
    ctx = SimpleNamespace(_pinned={}, producer=prod)

    def pinned(key: str) -> tuple[MessageQueue | None, str | None]:
        r = SendResult(outcome="error", topic="T", key=key, start_ms=0, end_ms=0)
        return LoadContext._pinned_queue(ctx, "T", key, r), r.error  # type: ignore[arg-type]

    assert pinned("k") == (a1, None) and pinned("k") == (a1, None)  # hashed once (len 1 of 3), then kept
    route[:] = [a0, b0]  # broker-a's queue 1 left the route (a queue-count change): the key does not move
    assert pinned("k") == (None, "strict order: queue broker-a#1 of k is not in the route")
    assert pinned("kkk") == (b0, None)  # a key first sent now hashes over the route as it is (3 of 2)
    route[:] = [a0, a1, b0]
    assert pinned("k") == (a1, None) and pinned("kkk") == (b0, None)  # back in the route: sends go on there
