"""The broker's own evidence of disk pressure, read from its store log (RocketMQ 5.5.0,
`<node>/logs/rocketmqlogs/store.log`; docs/broker-evidence.md has the sources):

- `[PAGECACHERT] TotalPut N, PutMessageDistributeTime [<=0ms]:N [0~10ms]:N …`: the put-latency
  histogram of the last 60 s (StoreStatsService, a fixed period; counters reset at each line);
- `PERF_COUNTER_WRITE_MEMORY_TIME_MS[…] num:N cost:MS … max:N … tp99:N …`: the append into the page
  cache (or the transient store buffer) per 10 s window; `PERF_COUNTER_FLUSH_DATA_TIME_MS`: the
  flush to disk, same form;
- `[NOTIFYME]putMessage in lock cost time(ms)=N` (the put lock held > 500 ms) and
  `CommitLog#putMessage cost Nms` (a put > 500 ms end to end).

The line's own timestamp is written in GMT+8 by RocketMQ's logback layout
(`%d{yyy-MM-dd HH:mm:ss,GMT+8}`), second resolution: converted to epoch ms here. Pure parsing, no
I/O beyond reading the file; unknown lines are skipped."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from cluster.plan.rmqlog import LINE_TS as _TS
from cluster.plan.rmqlog import epoch_ms, log_dir
SLOW_PUTS_MAX = 10_000  # slow-put lines kept per broker (a sick broker can write one per put)

PAGECACHERT = re.compile(_TS + r"\[PAGECACHERT\] TotalPut (\d+), PutMessageDistributeTime (.*)$")
BUCKET = re.compile(r"\[([^\]]+)\]:(\d+)")
PERF = re.compile(_TS + r"PERF_COUNTER_(WRITE_MEMORY|FLUSH_DATA)_TIME_MS\[[^\]]*\] num:(\d+) cost:(\d+) .*?"
                  r"max:(\d+) tp50:(\d+) tp80:\d+ tp90:\d+ tp99:(\d+)")
NOTIFYME = re.compile(_TS + r"\[NOTIFYME\]putMessage in lock cost time\(ms\)=(\d+)")
SLOW_PUT = re.compile(_TS + r".*CommitLog#putMessage cost (\d+)ms")


def parse(lines: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"pagecachert": [], "write_memory": [], "flush_data": [], "slow_puts": [],
                           "slow_puts_dropped": 0}
    for line in lines:
        if "PAGECACHERT" in line:
            m = PAGECACHERT.match(line)
            if m:
                out["pagecachert"].append({"t_ms": epoch_ms(m[1]), "total": int(m[2]),
                                           "buckets": {b: int(n) for b, n in BUCKET.findall(m[3])}})
        elif "PERF_COUNTER_" in line:
            m = PERF.match(line)
            if m:
                key = "write_memory" if m[2] == "WRITE_MEMORY" else "flush_data"
                out[key].append({"t_ms": epoch_ms(m[1]), "n": int(m[3]), "window_ms": int(m[4]),
                                 "max_ms": int(m[5]), "p50_ms": int(m[6]), "p99_ms": int(m[7])})
        elif "NOTIFYME" in line or "CommitLog#putMessage cost" in line:
            m = NOTIFYME.match(line) or SLOW_PUT.match(line)
            if m:
                if len(out["slow_puts"]) < SLOW_PUTS_MAX:
                    out["slow_puts"].append({"t_ms": epoch_ms(m[1]), "ms": int(m[2]),
                                             "kind": "in_lock" if "NOTIFYME" in line else "put"})
                else:
                    out["slow_puts_dropped"] += 1
    return out


def slow_share(entry: dict[str, Any], over_ms: int = 10) -> float | None:
    """Of a [PAGECACHERT] line's puts, the share that took more than `over_ms` (bucket lower bounds)."""
    total = entry["total"]
    if not total:
        return None
    slow = sum(n for b, n in entry["buckets"].items() if _lower_ms(b) >= over_ms)
    return slow / total


def _lower_ms(bucket: str) -> float:
    """'<=0ms' → 0, '0~10ms' → 0, '10~50ms' → 10, '500ms~1s' → 500, '1~2s' → 1000, '10s~' → 10000."""
    if bucket.startswith("<="):
        return 0.0
    lo = bucket.split("~")[0]
    if lo.endswith("ms"):
        return float(lo[:-2])
    if lo.endswith("s"):
        return float(lo[:-1]) * 1000
    unit = 1000.0 if bucket.endswith("s") and not bucket.endswith("ms") else 1.0
    return float(lo) * unit


def evidence(cluster_dir: Path, brokers: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per broker of the run's cluster: its store log parsed (brokers without one are left out)."""
    out = {}
    for b in brokers:
        f = log_dir(cluster_dir, b) / "store.log"
        if f.is_file():
            with f.open(encoding="utf-8", errors="replace") as fh:
                out[b] = parse(fh)
    return out
