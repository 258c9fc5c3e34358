"""Ordered and transactional loads on real RocketMQ (issue 50), short forms: an ordered load through
orderly consumers keeps every sharding key in order when nothing breaks; a transactional load's
commits are delivered, its rollbacks are not, and what it ended unknown is resolved by the broker's
check-back, which the producer answers from its own decisions."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import run_here, write_scenario

CLUSTER = {"subnet": "127.0.73.0/24", "namesrv": {"port": 27576}, "ready_timeout": "90s", "stop_timeout": "3s",
           "broker_defaults": {"jvm": {"heap_mb": 384, "max_direct_memory_mb": 256},
                               "config": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                          # check-backs sooner than 5.5.0's 6 s / 30 s, so a short run sees them
                                          "transactionTimeOut": 2000, "transactionCheckInterval": 3000}},
           "brokers": [{"name": "broker-a", "port": 27511}, {"name": "broker-b", "port": 27521}]}


@pytest.mark.long
def test_an_ordered_load_through_orderly_consumers_keeps_every_key_in_order(tmp_path: Path, kept_spark: Any) -> None:
    f = write_scenario(tmp_path / "o.yaml", {
        "name": "ordered-smoke", "cluster": CLUSTER,
        "load": {"topic": "T_ORDER", "queues": 4, "users": 4, "rate": 100, "duration": "15s", "order": {"keys_per_user": 3}},
        "consumers": {"settle": "2s", "drain_timeout": "60s", "instances": [{"id": "c0", "listener": "orderly"}]}})
    _, s = run_here(f, tmp_path / "run")
    o = s["order"]
    assert o["keys"] == 12 and o["keys_in_order"] == 12 and o["messages"] >= 1400, o
    assert s["counts"]["lost"] == 0


@pytest.mark.long
def test_a_transactional_load_commits_rolls_back_and_resolves_unknowns_by_check_back(tmp_path: Path,
                                                                                      kept_spark: Any) -> None:
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "txn-smoke", "cluster": CLUSTER,
        "load": {"topic": "T_TXN", "users": 4, "rate": 50, "duration": "15s",
                 "transaction": {"commit": 0.6, "rollback": 0.2, "unknown": 0.2}},
        # the last unknown ends need a check-back: timeout 2 s + interval 3 s, and the drain waits for them
        "consumers": {"settle": "12s", "drain_timeout": "60s"}})
    _, s = run_here(f, tmp_path / "run")
    t = s["transactions"]
    c = t["classes"]
    assert t["keys"] >= 700 and c["rolled_back_delivered"] == 0 and c["committed_lost"] == 0, t
    assert c["unknown_never"] == 0 and c["undecided"] == 0 and c["unknown_in_time"] > 100, t
    assert c["committed_delivered"] + c["unknown_in_time"] + c["rolled_back"] == t["keys"], t
    assert t["checks"] >= c["unknown_in_time"]
