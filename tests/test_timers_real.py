"""Timer messages on real RocketMQ (issue 51): scheduled by deliver time through a broker's restart,
each delivered no earlier than due (less the wheel's slot) and none lost."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_here, write_scenario
from rmqchaos.ledger.schema import due_of

CLUSTER = {"subnet": "127.0.74.0/24", "namesrv": {"port": 27676}, "ready_timeout": "90s", "stop_timeout": "10s",
           "broker_defaults": {"jvm": {"heap_mb": 384, "max_direct_memory_mb": 256},
                               "config": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"}},
           "brokers": [{"name": "broker-a", "port": 27611}, {"name": "broker-b", "port": 27621}]}


def test_timer_messages_are_delivered_on_time_by_both_brokers_wheels(tmp_path: Path, kept_spark: Any) -> None:
    """The short twin of the restart test below (make test): the same path, no fault. Due 8-16 s after
    they were made; none early, none lost, each broker's wheel on time."""
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "timer-on-time", "cluster": CLUSTER,
        "load": {"topic": "T_TIMER", "users": 4, "rate": 15, "duration": "10s",
                 "timer": {"delay": "8s", "spread": "8s", "wait": "5s"}},
        "consumers": {"settle": "2s", "drain_timeout": "60s"}})
    run, s = run_here(f, tmp_path / "run")
    t = s["timers"]
    assert t is not None and t["keys"] >= 100 and t["slack_ms"] == 1000, t
    assert t["early"]["keys"] == 0 and t["lost"] == 0 and t["delivered"] == t["keys"] and t["by_fault"] == [], t
    for b in ("broker-a", "broker-b"):
        late = _lateness(run, b)
        assert late and max(ms for _, ms in late) < 3000, (b, late)
        assert t["late_ms_by_broker"][b]["p99"] < 3000, t
    assert s["counts"]["lost"] == 0


@pytest.mark.long  # make test: the twin above (the same path without the restart)
def test_a_timer_message_is_delivered_on_time_across_a_broker_restart(tmp_path: Path, kept_spark: Any) -> None:
    # due 30-55 s after it was made: what broker-a holds waits in its wheel while broker-a restarts (a
    # clean stop and start, once the consumers were served: a pull on an empty queue is answered after
    # 15 s, and nothing is due before 30 s); part of it is due while broker-a is down, part after
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "timer-restart", "cluster": CLUSTER,
        "load": {"topic": "T_TIMER", "users": 4, "rate": 15, "duration": "20s", "route_refresh": "3s",
                 "timer": {"delay": "30s", "spread": "25s", "wait": "10s"}},
        "consumers": {"settle": "2s", "drain_timeout": "60s", "route_refresh": "3s"},
        "faults": [{"id": "restart-a", "kind": "restart", "target": "broker-a", "at": "4s"}]})
    run, s = run_here(f, tmp_path / "run")
    t = s["timers"]
    assert t is not None and t["keys"] >= 200 and t["slack_ms"] == 1000, t
    assert t["early"]["keys"] == 0 and t["lost"] == 0 and t["delivered"] == t["keys"], t
    assert [f["id"] for f in t["by_fault"]] == ["restart-a"] and t["by_fault"][0]["exposed"] > 0, t
    assert t["late_ms_by_broker"]["broker-b"]["p99"] < 3000, t  # the other broker's wheel: on time throughout
    # broker-a's: due while it was down (or before its consumer was served again), delivered once it
    # was back; due after that, on time again
    faults = [e for e in _lines(run / "timeline.jsonl") if e["kind"] == "fault"]
    back = max(e["end_ms"] for e in faults)
    # "on time again" counts from back plus the outage's length (at least 10 s: a clean stop took 10-22 s
    # here), and the spread of due times reaches past it (the serving gate may hold the restart back 15 s)
    caught_up = back + max(10_000, back - min(e["start_ms"] for e in faults))
    late = _lateness(run, "broker-a")
    after = [ms for due, ms in late if due > caught_up]
    assert after and max(after) < 3000, (caught_up - back, late)
    assert all(due <= caught_up for due, ms in late if ms > 5000), (caught_up - back, late)
    assert s["counts"]["lost"] == 0


def _lines(f: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()]


def _lateness(run: Path, broker: str) -> list[tuple[int, int]]:
    """(due ms, when the wheel put it into its topic - due ms) of each key `broker` acknowledged, by the
    ledgers: a due timer's copy is stored when the wheel delivers it (its store time), so this is the
    broker's own lateness, apart from when the consumer read it: by receive time, messages due 10 s and
    more after broker-a was back came up to 9.8 s late, all at once, in 3 of 5 runs (the consumer gets a
    cleanly stopped broker's queues back at a rebalance, every 20 s), and passed by store time."""
    held = {r["key"] for f in (run / "ledgers").glob("send-*.jsonl") for r in _lines(f)
            if r["rec"] == "outcome" and r["outcome"] == "ok" and r["broker"] == broker}
    first: dict[str, int] = {}
    for f in (run / "ledgers").glob("receive-*.jsonl"):
        for r in _lines(f):
            first[r["key"]] = min(first.get(r["key"], r["store_ms"]), r["store_ms"])
    return sorted((due_of(k) or 0, first[k] - (due_of(k) or 0)) for k in held if k in first)
