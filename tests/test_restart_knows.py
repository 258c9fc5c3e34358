"""What a broker that lost power comes back knowing (issue 48): its topics, groups and consumer
offsets as its store's config files hold them, against what it knew at the cut, and the deliveries
read again because its offsets went back. Pure logic and a small Spark frame; the real power losses
that record it run in tests/test_power_loss.py and the power-loss scenarios."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.report.power_words import disk_error_phrases, power_phrases
from analysis.replication.redeliveries import rollback_repeats, rollbacks
from cluster.stored.metadata import forgot, on_disk

BEFORE = {"topics": ["RMQCHAOS_POWER", "TBW102", "%RETRY%rmqchaos_consumer"], "groups": ["rmqchaos_consumer"],
          "offsets": {"RMQCHAOS_POWER@rmqchaos_consumer": {0: 500, 1: 480, 2: 470}}}


@pytest.mark.fast
def test_the_files_a_restart_loads_the_bak_when_the_file_is_empty_and_fastjson_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "topics.json").write_text("")  # truncated, never written back: the broker loads the .bak
    (cfg / "topics.json.bak").write_text('{"topicConfigTable":{"RMQCHAOS_POWER":{},"TBW102":{}},"dataVersion":{}}')
    (cfg / "consumerOffset.json").write_text('{"offsetTable":{"RMQCHAOS_POWER@rmqchaos_consumer":{0:300,1:480}}}')
    got = on_disk(cfg)  # no subscriptionGroup.json at all
    assert got["topics"] == ["RMQCHAOS_POWER", "TBW102"] and got["groups"] == []
    assert got["offsets"] == {"RMQCHAOS_POWER@rmqchaos_consumer": {0: 300, 1: 480}}
    assert got["sources"] == {"topics": "topics.json.bak", "offsets": "consumerOffset.json",
                              "groups": "neither subscriptionGroup.json nor its .bak holds a table"}
    f = forgot(BEFORE, got)
    assert f["topics_lost"] == ["%RETRY%rmqchaos_consumer"] and f["groups_lost"] == ["rmqchaos_consumer"]
    assert f["offsets_back"] == [
        {"topic": "RMQCHAOS_POWER", "group": "rmqchaos_consumer", "queue": 0, "before": 500, "after": 300},
        {"topic": "RMQCHAOS_POWER", "group": "rmqchaos_consumer", "queue": 2, "before": 470, "after": None}]
    assert f["messages_back"] == 200 + 470
    assert forgot(BEFORE, BEFORE) == {"topics_lost": [], "groups_lost": [], "offsets_back": [], "messages_back": 0}


def power_event(forgot_: dict[str, Any] | None, cut_ms: int = 10_000) -> dict[str, Any]:
    knows = {"before": {"topics": 3, "groups": 1, "offsets": 3}, "after": {"topics": 3, "groups": 1, "offsets": 3},
             "sources": {}, "forgot": forgot_}
    return {"kind": "fault", "outcome": "ok", "target": "broker-a", "start_ms": cut_ms, "end_ms": cut_ms + 5000,
            "params": {"fault_id": "power-a", "fault_kind": "power_loss",
                       "evidence": {"nodes_lost": {"broker-a": {"cut_ms": cut_ms, "knows": knows}}}}}


@pytest.mark.fast
def test_the_verdict_says_what_a_restarted_broker_knew_and_what_was_read_again() -> None:
    f = forgot(BEFORE, {"topics": BEFORE["topics"], "groups": BEFORE["groups"],
                        "offsets": {"RMQCHAOS_POWER@rmqchaos_consumer": {0: 450, 1: 480, 2: 470}}})
    s = {"events": [power_event(f)], "offset_rollback": {"deliveries": 48, "keys": 48, "by_fault": {"power-a": 48}}}
    assert power_phrases(s) == ["broker-a came back with all 3 topics and 1 groups in its config files, its consumer offsets of 1 "
                                "queue(s) 50 messages back (read again after power-a: 48 deliveries)"]
    lost = forgot(BEFORE, {"topics": ["TBW102"], "groups": [], "offsets": {}})
    assert power_phrases({"events": [power_event(lost)]}) == [
        "broker-a came back with config files that lack 2 of 3 topics (%RETRY%rmqchaos_consumer, RMQCHAOS_POWER) and 1 of 1 groups "
        "(rmqchaos_consumer), its consumer offsets of 3 queue(s) 1,450 messages back"]
    assert power_phrases({"events": [power_event(None)]}) == []  # it did not answer before the cut: nothing said
    from analysis.judge.figures import value
    assert value(s, "read_again_after_rollback") == 48 and value({}, "read_again_after_rollback") is None
    assert value(s, "not_started_after_power_loss") == 0 and value({}, "not_started_after_power_loss") is None


@pytest.mark.fast
def test_a_node_that_did_not_start_again_is_named_with_its_exception() -> None:
    ev = power_event(None)
    ev["params"]["evidence"]["not_started"] = {"broker-a": "java.lang.NumberFormatException: Cannot parse null string"}
    s = {"events": [ev]}
    assert power_phrases(s) == ["broker-a did not start again when its power came back: "
                                "java.lang.NumberFormatException: Cannot parse null string"]
    from analysis.judge.figures import value
    assert value(s, "not_started_after_power_loss") == 1


@pytest.mark.fast
def test_a_slow_disk_window_names_what_its_broker_answered() -> None:
    e = {"kind": "fault", "outcome": "ok", "target": "broker-a",
         "params": {"fault_id": "slow-a", "fault_kind": "disk_slow",
                    "evidence": {"op": "fsync", "delay_ms": 300, "delays": [{"path": "commitlog/0", "count": 40}]}}}
    s = {"events": [e], "cluster": {"brokers": {"broker-a": {"brokerName": "broker-a"}}},
         "windows": [{"id": "slow-a", "answers_by_broker": {"broker-a": {"FLUSH_DISK_TIMEOUT": 1200, "SEND_OK": 3,
                                                                          "timeout": 2}}}]}
    assert disk_error_phrases(s) == ["while broker-a's fsyncs were held (slow-a: 40 held 300 ms each): 1,200 sends "
                                     "acknowledged FLUSH_DISK_TIMEOUT, 3 sends acknowledged SEND_OK, 2 not"]


def test_a_repeat_inside_a_forgotten_range_after_the_cut_is_read_again_after_the_rollback(kept_spark: Any) -> None:
    ranges = rollbacks([power_event(forgot(BEFORE, {"topics": [], "groups": [], "offsets": {
        "RMQCHAOS_POWER@rmqchaos_consumer": {0: 450, 1: 480, 2: 470}}}))], {"broker-a": {"brokerName": "broker-a"}})
    assert ranges == [{"fault_id": "power-a", "broker": "broker-a", "topic": "RMQCHAOS_POWER", "queue": 0,
                       "lo": 450, "hi": 500, "cut_ms": 10_000}]
    cols = "key string, origin_topic string, broker string, queue_id int, queue_offset long, reconsume_times int, " \
           "receive_ms long"
    rows = [("k1", "RMQCHAOS_POWER", "broker-a", 0, 460, 0, 9_000), ("k1", "RMQCHAOS_POWER", "broker-a", 0, 460, 0, 12_000),
            # outside the range, in another queue, or a %RETRY% redelivery: not the rollback's
            ("k2", "RMQCHAOS_POWER", "broker-a", 0, 500, 0, 9_000), ("k2", "RMQCHAOS_POWER", "broker-a", 0, 500, 0, 12_000),
            ("k3", "RMQCHAOS_POWER", "broker-a", 1, 460, 0, 9_000), ("k3", "RMQCHAOS_POWER", "broker-a", 1, 460, 0, 12_000),
            ("k4", "RMQCHAOS_POWER", "broker-a", 0, 455, 0, 9_000), ("k4", "RMQCHAOS_POWER", "broker-a", 0, 455, 1, 12_000),
            # in the range but repeated before the cut (a rebalance): not the rollback's either
            ("k5", "RMQCHAOS_POWER", "broker-a", 0, 470, 0, 5_000), ("k5", "RMQCHAOS_POWER", "broker-a", 0, 470, 0, 6_000)]
    recv = kept_spark.createDataFrame(rows, cols)
    assert rollback_repeats(recv, ranges) == {"deliveries": 1, "keys": 1, "by_fault": {"power-a": 1}}
    assert rollback_repeats(recv, []) == {"deliveries": 0, "keys": 0, "by_fault": {}}
    assert rollback_repeats(recv, None) is None


@pytest.mark.fast
def test_a_second_layer_window_on_one_mount_counts_only_its_own() -> None:
    """The layer counts per mount: a second disk_error or disk_slow window on the same node keeps only
    what came after it began; a fresh mount (another server pid) starts from nothing."""
    from chaos.kinds.disk_error import keyed, since
    first = keyed(41, [{"path": "commitlog/0", "op": "fsync", "errno": "EIO", "count": 30, "first_ms": 1, "last_ms": 9}])
    now = keyed(41, [{"path": "commitlog/0", "op": "fsync", "errno": "EIO", "count": 42, "first_ms": 1, "last_ms": 20},
                     {"path": "commitlog/1", "op": "fsync", "errno": "EIO", "count": 5, "first_ms": 15, "last_ms": 19}])
    assert since(first, now) == {
        (41, "commitlog/0", "EIO"): {"path": "commitlog/0", "op": "fsync", "errno": "EIO", "count": 12, "first_ms": None,
                                     "last_ms": 20},
        (41, "commitlog/1", "EIO"): {"path": "commitlog/1", "op": "fsync", "errno": "EIO", "count": 5, "first_ms": 15,
                                     "last_ms": 19}}
    assert since(now, now) == {}  # nothing new
    slow = keyed(7, [{"path": "commitlog/0", "op": "fsync", "count": 10, "delay_ms": 3000, "first_ms": 1, "last_ms": 2}])
    later = keyed(7, [{"path": "commitlog/0", "op": "fsync", "count": 14, "delay_ms": 4200, "first_ms": 1, "last_ms": 5}])
    assert since(slow, later)[(7, "commitlog/0", "")]["delay_ms"] == 1200
    assert since(first, keyed(99, [{"path": "commitlog/0", "errno": "EIO", "count": 3}]))[(99, "commitlog/0", "EIO")]["count"] == 3
