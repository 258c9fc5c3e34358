"""`rmqchaos bench locust`: what driving the producer from Locust costs, the Locust-driven load
against the bare producer with as many concurrent sends."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.load import load_run_dir, run_locust
from bench.measure import Sample
from bench.producer import run_python
from bench.rounds import interleaved, totals
from cluster import get_backend


def cmd_bench_locust(a: argparse.Namespace) -> int:
    def one(cluster_run: Any, base: Path, who: str, i: int) -> Sample:
        if who == "locust":
            run = load_run_dir(base, cluster_run.path / "scenario.yaml", i, a.messages, a.users, a.size)
            s = run_locust(run, False, a.timeout, base)
        else:
            s = run_python(get_backend(cluster_run).namesrv_addr, a.messages, a.size, a.users, a.timeout, base)
        return Sample(who, s.acked, s.attempts, s.wall_s, s.cpu_s)

    samples = interleaved(a, ("locust", "bare"), one)
    (rl, cl), (rb, cb) = totals(samples, "locust"), totals(samples, "bare")
    print(f"Locust cost: {a.rounds} interleaved rounds x {a.messages} messages, {a.users} users / concurrent sends, "
          "no ledger, unpaced")
    print(f"locust-driven : {rl:8.0f} acked msg/s (load phase)  {cl:.3f} CPU-s per 10k acked (whole process)")
    print(f"bare producer : {rb:8.0f} acked msg/s (whole process)  {cb:.3f} CPU-s per 10k acked (whole process)")
    print(f"ratio locust_vs_bare acked_rate={rl / rb:.2f} acked_per_cpu={cb / cl:.2f}")
    return 0
