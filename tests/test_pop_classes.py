"""POP's classes (issue 52) on planted receive ledgers, counted exactly (Spark), and the figures and
the verdict's clause made of them."""
from __future__ import annotations

from typing import Any

R = ("key string, origin_topic string, broker string, receive_ms long, receipt_handle string, ack string, ack_ms long, "
     "change string, delivery_attempt int, queue_id int, queue_offset long, ack_error string")


def handle(pop_ms: int, invisible_ms: int) -> str:
    """A receipt handle as the proxy writes it (ExtraInfoUtil): its 2nd and 3rd fields are what counts."""
    return f"0 {pop_ms} {invisible_ms} 5 0 broker-a 2 104 546152"


def test_every_pop_class_and_cause_is_counted_exactly(kept_spark: Any) -> None:
    from analysis.contracts.pop import pop_check
    h = handle(1000, 15_000)  # invisible until 16,000
    rows = [
        # a: acked in time, delivered once: no class
        ("a", "T", "broker-a", 1000, h, "ok", 1200, None),
        # b: skipped, came back after its invisible time, then acked: one redelivered_after_invisible (not_acked)
        ("b", "T", "broker-a", 1000, h, "skipped", 1000, None), ("b", "T", "broker-a", 17_000, handle(17_000, 15_000), "ok", 17_100, None),
        # c: the ack refused, came back: ack_refused
        ("c", "T", "broker-a", 1000, h, "error", 1300, None), ("c", "T", "broker-a", 17_000, handle(17_000, 15_000), "ok", 17_100, None),
        # d: the ack answered ok after the invisible time (16,000), came back: ack_late
        ("d", "T", "broker-a", 1000, h, "ok", 16_500, None), ("d", "T", "broker-a", 17_000, handle(17_000, 15_000), "ok", 17_100, None),
        # e: acked in time and delivered again: a violation (plain ack)
        ("e", "T", "broker-a", 1000, h, "ok", 1200, None), ("e", "T", "broker-a", 17_000, handle(17_000, 15_000), "ok", 17_100, None),
        # m: acked in time before broker-a crashed (at 50,000), revived after it: after_broker_crash
        ("m", "T", "broker-a", 40_000, handle(40_000, 15_000), "ok", 40_100, None),
        ("m", "T", "broker-a", 70_000, handle(70_000, 15_000), "ok", 70_100, None),
        # q: its ack got no answer (the proxy died), never came again: the ack may have taken: ack_in_doubt
        ("q", "T", "broker-a", 1000, h, "error", 1300, None, 1, 0, 600, "StatusRuntimeException: UNAVAILABLE: io exception"),
        # p: a producer's resend stored twice, both copies delivered and acked: another message, no class
        ("p", "T", "broker-a", 1000, h, "ok", 1200, None, 1, 0, 500), ("p", "T", "broker-a", 2000, h, "ok", 2100, None, 1, 0, 501),
        # j: acked in time and read again as a first delivery (the broker's POP offset went back): re_popped
        ("j", "T", "broker-a", 1000, h, "ok", 1200, None), ("j", "T", "broker-a", 9_000, handle(9_000, 15_000), "ok", 9_100, None, 1),
        # f: changeInvisibleDuration to 30 s, then acked in time (by its new handle), delivered again: #9583
        ("f", "T", "broker-a", 1000, handle(1100, 30_000), "ok", 1300, "ok"), ("f", "T", "broker-a", 32_000, handle(32_000, 15_000), "ok", 32_100, None),
        # g: skipped and never came back, its time long past the stop's slack: consumed but lost
        ("g", "T", "broker-a", 1000, h, "skipped", 1000, None),
        # h: skipped late in the run, due again only after the consumers stopped: not judged
        ("h", "T", "broker-a", 95_000, handle(95_000, 15_000), "skipped", 95_000, None),
        # i: a remoting delivery (no handle): not POP's; k: a PushConsumer's (no ack recorded): not judged
        ("i", "T", "broker-a", 1000, None, None, None, None), ("i", "T", "broker-a", 2000, None, None, None, None),
        ("k", "T", "broker-a", 1000, h, None, 1100, None),
    ]
    seen: set[str] = set()
    planted = []
    for row in rows:  # delivery_attempt: 1 the first time, 2 after (unless the row says); where it is stored:
        attempt = row[8] if len(row) > 8 else 1 if row[0] not in seen else 2  # a first delivery: the topic's
        pos = (0, ord(row[0])) if attempt == 1 else (1, 1000 + ord(row[0]))  # queue; a revived one: the retry topic's
        refused = "BadRequestException: [request-id=x, response-code=40013] INVALID_RECEIPT_HANDLE"
        planted.append((*row[:8], attempt, *(row[9:11] or pos), row[11] if len(row) > 11 else
                        refused if row[5] == "error" else None))
        seen.add(row[0])
    r = pop_check(kept_spark.createDataFrame(planted, R), stop_ms=100_000, crashes=[("broker-a", 50_000)])
    assert r is not None
    assert (r["deliveries"], r["keys"], r["acks_ok"], r["acks_refused"]) == (20, 12, 15, 2)
    assert r["classes"] == {"redelivered_after_invisible": 3, "redelivered_after_ack": 4, "consumed_but_lost": 1,
                            "ack_in_doubt": 1, "due_after_stop": 1}
    assert r["causes"]["redelivered_after_invisible"] == {"not_acked": 1, "ack_refused": 1, "ack_late": 1, "no_ack": 0}
    assert r["causes"]["redelivered_after_ack"] == {"re_popped": 1, "after_broker_crash": 1, "after_change": 1,
                                                    "plain_ack": 1}
    assert r["causes"]["consumed_but_lost"]["not_acked"] == 1 and r["causes"]["due_after_stop"]["not_acked"] == 1
    assert r["keys_by_class"] == {"redelivered_after_invisible": 3, "redelivered_after_ack": 4, "consumed_but_lost": 1,
                                  "ack_in_doubt": 1, "due_after_stop": 1}


def test_without_a_stop_time_no_last_delivery_is_called_lost(kept_spark: Any) -> None:
    from analysis.contracts.pop import pop_check
    r = pop_check(kept_spark.createDataFrame([("g", "T", "broker-a", 1000, handle(1000, 15_000), "skipped", 1000, None, 1, 0,
                                                5, None)], R), None)
    assert r is not None and r["classes"]["consumed_but_lost"] == 0 and r["classes"]["due_after_stop"] == 1


def test_the_scenarios_revive_wait_says_when_a_last_delivery_is_due_again(kept_spark: Any) -> None:
    """Invisible until 16 s, consumers stopped at 40 s: due after the stop with the default 60 s wait,
    consumed but lost with consumers.revive_wait 10 s (the drain waited that long for it)."""
    from analysis.contracts.pop import pop_check
    rows = kept_spark.createDataFrame([("g", "T", "broker-a", 1000, handle(1000, 15_000), "skipped", 1000, None, 1, 0,
                                        5, None)], R)
    assert pop_check(rows, 40_000)["classes"]["due_after_stop"] == 1  # type: ignore[index]
    r = pop_check(rows, 40_000, revive_slack_ms=10_000)
    assert r is not None and r["classes"]["consumed_but_lost"] == 1 and r["classes"]["due_after_stop"] == 0, r


def test_no_receipt_handle_means_no_pop_part(kept_spark: Any) -> None:
    from analysis.contracts.pop import pop_check
    assert pop_check(kept_spark.createDataFrame([("i", "T", "broker-a", 1000, None, None, None, None, None, None, None,
                                                  None)], R),
                     5000) is None


def test_pop_figures_and_the_verdicts_clause() -> None:
    from analysis.judge.figures import value
    from analysis.contracts.pop import pop_phrase
    s = {"pop": {"deliveries": 15, "keys": 8, "acks_ok": 10, "acks_refused": 1,
                 "classes": {"redelivered_after_invisible": 3, "redelivered_after_ack": 2, "consumed_but_lost": 1,
                             "ack_in_doubt": 0, "due_after_stop": 0},
                 "causes": {"redelivered_after_ack": {"re_popped": 4, "after_change": 1, "plain_ack": 1}}}}
    assert value(s, "pop.redelivered_after_ack") == 2 and value(s, "pop.redelivered_after_ack.after_change") == 1
    assert value(s, "pop.consumed_but_lost") == 1 and value({}, "pop.consumed_but_lost") is None
    assert (value(s, "pop.acks_refused"), value(s, "pop.acks_ok"), value(s, "pop.deliveries")) == (1, 10, 15)
    words = pop_phrase(s)
    assert words is not None and "2 REDELIVERED AFTER A SUCCESSFUL ACK, of which 1 after changeInvisibleDuration" in words
    assert "4 acked and read again from the queue as a first delivery" in words
    assert "1 CONSUMED BUT LOST" in words and pop_phrase({}) is None


def test_a_fault_on_the_proxy_is_one_that_targets_cuts_or_slows_a_node_serving_grpc() -> None:
    """proxy_outages: a kill of the proxy until the restart that follows it, a partition with the proxy
    in a group, a link to it; in local mode a broker's kill (the proxy inside it). Not a fault elsewhere."""
    from analysis.contracts.pop import OUTAGE_SLACK_MS, proxy_outages

    def fault(fid: str, kind: str, target: str, a: int, b: int, **p: Any) -> dict[str, Any]:
        return {"kind": "fault", "target": target, "start_ms": a, "end_ms": b,
                "params": {"fault_id": fid, "fault_kind": kind, **p}}
    events = [fault("k", "kill", "proxy", 1000, 1001), fault("k-back", "restart", "proxy", 9000, 9500, follows="k"),
              fault("cut", "partition", "cluster", 20000, 30000, groups=[["producers", "consumers"], ["proxy"]]),
              fault("slow", "link", "cluster", 40000, 50000, **{"from": "producers", "to": "proxy"}),
              fault("cut-ab", "partition", "cluster", 60000, 61000, groups=[["broker-a"], ["broker-b"]]),
              fault("kill-a", "kill", "broker-a", 70000, 70001),
              fault("flood", "topic_flood", "broker-b", 80000, 81000, groups=1500)]  # its groups: a count
    assert proxy_outages(events) == [("k", 1000, 9500 + OUTAGE_SLACK_MS), ("cut", 20000, 30000 + OUTAGE_SLACK_MS),
                                     ("slow", 40000, 50000 + OUTAGE_SLACK_MS)]
    assert proxy_outages(events, {"broker-a", "broker-b"}) == [("cut-ab", 60000, 61000 + OUTAGE_SLACK_MS),
                                                                ("kill-a", 70000, 70001 + OUTAGE_SLACK_MS),
                                                                ("flood", 80000, 81000 + OUTAGE_SLACK_MS)]
