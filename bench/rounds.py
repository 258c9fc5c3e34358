"""Where and in what order a benchmark's measurements run: the benchmark cluster (one started from
--scenario, or a running one), its topic on every broker, rounds of two kinds in ABBA order after an
uncounted warm-up, and the totals of each kind."""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.measure import Sample
from cluster import get_backend
from pipeline.stages import down, up
from pipeline.runs import create_run, open_cluster_run, reap_orphans
from rmqchaos.progress import say

TOPIC = "RMQCHAOS_BENCH"


def bench_topic(namesrv: str) -> None:
    """The benchmarks' topic on every broker, its route given a second to reach the namesrv."""
    from rmqclient.admin import AdminClient
    AdminClient(namesrv).create_topic_everywhere(TOPIC, queues=4)
    time.sleep(1.0)


def with_cluster(a: argparse.Namespace, fn):  # type: ignore[no-untyped-def]
    if a.run_dir:
        return fn(open_cluster_run(a.run_dir))
    reap_orphans()
    run = create_run(a.scenario, None, mode="owned")
    say(f"starting a cluster for the benchmark from {a.scenario} (run directory {run.path})")
    up.run(run)
    try:
        return fn(run)
    finally:
        down.run(run)


def interleaved(a: argparse.Namespace, kinds: tuple[str, str],
                one: Callable[[Any, Path, str, int], Sample]) -> list[Sample]:
    """`a.rounds` rounds of both kinds in ABBA order against the benchmark cluster; one(cluster run,
    scratch dir, kind, index) runs one measurement."""
    def body(cluster_run: Any) -> list[Sample]:
        bench_topic(get_backend(cluster_run).namesrv_addr)
        samples: list[Sample] = []
        with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
            # two of each, ABBA: after one of each, the first counted run was still the slowest of its
            # benchmark every time (3 of 3 ledger runs on 2026-11-26, one of them A/A, where it alone
            # made +0.03 of "overhead")
            say("warm-up: two runs of each kind (not counted; a fresh broker is slow at first)")
            for i, who in enumerate(kinds + kinds[::-1]):
                one(cluster_run, Path(td), who, 1000 + i)
            i = 0
            for r in range(a.rounds):
                for who in (kinds if r % 2 == 0 else kinds[::-1]):
                    s = one(cluster_run, Path(td), who, i)
                    i += 1
                    samples.append(s)
                    say(f"round {r + 1}/{a.rounds} {who:9s}: {s.acked}/{s.attempts} acked in {s.wall_s:.1f}s "
                        f"({s.rate:.0f} msg/s), {s.cpu_s:.2f} CPU-s")
        return samples
    return with_cluster(a, body)


def totals(samples: list[Sample], who: str) -> tuple[float, float]:
    """(acked msg/s, CPU-s per 10k acked) over every sample of `who`."""
    s = [x for x in samples if x.who == who]
    return sum(x.acked for x in s) / sum(x.wall_s for x in s), sum(x.cpu_s for x in s) / sum(x.acked for x in s) * 1e4
