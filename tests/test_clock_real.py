"""A node's own clock on real RocketMQ (issue 51): a broker under libfaketime moved +120 s by a `clock`
fault reads the shifted time from itself (the JVM's own clock) and stamps what it stores with it
(System.currentTimeMillis: the commit log's store time), while the host's clock and every other
node's stay where they were, and so does its own monotonic clock (System.nanoTime, what its scheduled
executors wait by: VM.uptime); reset, it reads the host's time again. In the same run a consumer under
libfaketime jumps +300 s (consumer_clock) and its receive ledger keeps the host's time."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import run_here, write_scenario

CLUSTER = {"subnet": "127.0.75.0/24", "namesrv": {"port": 27776}, "ready_timeout": "90s", "stop_timeout": "10s",
           "faketime": ["broker-a"],
           "broker_defaults": {"jvm": {"heap_mb": 384, "max_direct_memory_mb": 256},
                               "config": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"}},
           "brokers": [{"name": "broker-a", "port": 27711}, {"name": "broker-b", "port": 27721}]}


def test_a_broker_under_a_faked_clock_reads_and_stamps_the_shifted_time_alone(tmp_path: Path, kept_spark: Any) -> None:
    f = write_scenario(tmp_path / "c.yaml", {
        "name": "clock-smoke", "cluster": CLUSTER,
        "load": {"topic": "T_CLOCK", "users": 4, "rate": 40, "duration": "25s"},
        "consumers": {"settle": "2s", "drain_timeout": "60s", "instances": [{"id": "c0", "faketime": True}]},
        "faults": [{"id": "ahead", "kind": "clock", "target": "broker-a", "at": "2s", "offset": "+120s",
                    "duration": "12s"},
                   {"id": "c-ahead", "kind": "consumer_clock", "consumer": "c0", "at": "4s", "offset": "+300s"}]})
    run, s = run_here(f, tmp_path / "run")
    faults = {e["params"]["fault_id"]: e for e in _lines(run / "timeline.jsonl") if e["kind"] == "fault"}
    ev = faults["ahead"]
    p = ev["params"]["evidence"]
    assert abs(p["offset_before_s"]) <= 1.5 and abs(p["offset_after_s"] - 120) <= 1.5, p
    assert p["line"] == "+120.000" and p["intent"]["short"] is False, p
    assert set(p["others_offset_s"]) == {"namesrv", "broker-b"}, p  # the other nodes: unmoved
    assert all(v is not None and abs(v) <= 1.5 for v in p["others_offset_s"].values()), p
    assert abs(p["offset_at_end_s"]) <= 1.5, p  # reset to the host's time
    # only the wall clock moved: the JVM's monotonic clock (nanoTime, its scheduled executors) did not
    assert p["monotonic_moved_s"] is not None and abs(p["monotonic_moved_s"]) <= 1.0, p
    # what broker-a stored inside the window carries its shifted clock; broker-b's never does
    # from when its control file was written (the reads before it take seconds on a busy host: a fresh
    # clone's run had broker-a stamp unshifted times 2.3 s after the fault's start), plus libfaketime's
    # once-a-second re-read and a margin
    lo, hi = p["set_ms"] + 2_000, ev["end_ms"] - 3_000
    skew = {b: [r["store_ms"] - r["receive_ms"] for r in _received(run) if r["broker"] == b and lo <= r["receive_ms"] <= hi]
            for b in ("broker-a", "broker-b")}
    assert skew["broker-a"] and all(110_000 <= x <= 121_000 for x in skew["broker-a"]), skew
    assert skew["broker-b"] and all(x <= 0 for x in skew["broker-b"]), skew
    assert s["counts"]["lost"] == 0
    c = faults["c-ahead"]["params"]["evidence"]
    assert abs(c["offset_after_s"] - 300) <= 1.5 and c["intent"]["short"] is False, c
    assert abs(c["monotonic_moved_s"]) <= 1.0 and c["persists"] is True, c
    # its own client log was read for the requests it gave up at the step (how many: only those in
    # flight at its next housekeeping scan, timing-dependent under a steady load)
    assert c["client_requests_timed_out"] is not None, c
    # the consumer's ledger keeps the host's time: broker-b (its clock never moved) stored each message
    # before the consumer received it, and not 300 s before
    late = [r["receive_ms"] - r["store_ms"] for r in _received(run)
            if r["broker"] == "broker-b" and r["receive_ms"] > faults["c-ahead"]["end_ms"]]
    assert late and all(0 <= x <= 30_000 for x in late), (min(late), max(late))


def _lines(f: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()]


def _received(run: Path) -> list[dict[str, Any]]:
    return [r for f in sorted((run / "ledgers").glob("receive-*.jsonl")) for r in _lines(f)]
