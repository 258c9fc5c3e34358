"""`rmqchaos bench ledger`: what the send ledger costs the load process, as CPU per acknowledged
message with the ledger on against off (separate loads, or turns within each load), and the seal's
CPU after the load."""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.load import UNPACED, load_run_dir, run_locust
from bench.measure import Sample
from bench.rounds import bench_topic, interleaved, totals, with_cluster
from cluster import get_backend
from rmqchaos.errors import UserError
from rmqchaos.progress import say


def _alternating(a: argparse.Namespace) -> int:
    """bench ledger --alternate: each load process turns its ledger on and off every a.alternate
    seconds; CPU per accepted message in the on turns against the off turns (each load's first turn,
    start-up and ramp, and its last, cut by the end, left out)."""
    def body(cluster_run: Any) -> list[list[Any]]:
        bench_topic(get_backend(cluster_run).namesrv_addr)
        out: list[list[Any]] = []
        with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
            say("warm-up: one load (not counted; a fresh broker is slow at first)")
            for i in range(-1, a.rounds):  # -1: the warm-up
                run = load_run_dir(Path(td), cluster_run.path / "scenario.yaml", 1000 if i < 0 else i, a.messages,
                                   a.users, a.size, a.rate)
                run_locust(run, True, a.timeout, Path(td), a.alternate)
                turns = json.loads((run.path / "load" / "summary.json").read_text()).get("ledger_turns", [])
                if i >= 0:
                    out.append(turns)
                    say(f"load {i + 1}/{a.rounds}: {max(0, len(turns) - 2)} turns of {a.alternate:g}s counted")
        return out

    loads = with_cluster(a, body)
    tot = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}  # user CPU-s, system CPU-s, accepted
    per_load = []
    for turns in loads:
        mine = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
        for (on, u0, s0, n0), (_, u1, s1, n1) in zip(turns[1:-1], turns[2:]):
            for d in (mine[on], tot[on]):
                d[0] += u1 - u0
                d[1] += s1 - s0
                d[2] += n1 - n0
        if mine[True][2] and mine[False][2]:
            per_load.append(((mine[True][0] + mine[True][1]) / mine[True][2])
                            / ((mine[False][0] + mine[False][1]) / mine[False][2]) - 1)
    if not (tot[True][2] and tot[False][2]):
        raise UserError(f"no complete on and off turns of {a.alternate:g}s", "use more --messages or a shorter --alternate")
    per10k = {k: ((v[0] + v[1]) / v[2] * 1e4, v[0] / v[2] * 1e4, v[1] / v[2] * 1e4) for k, v in tot.items()}
    print(f"ledger benchmark: {a.rounds} load(s) x {a.messages} messages, {a.users} Locust users, "
          + ("unpaced" if a.rate >= UNPACED else f"paced at {a.rate:g} msg/s")
          + f", the ledger on and off in turns of {a.alternate:g}s within each load")
    for name, k in (("ledger on ", True), ("ledger off", False)):
        c, u, sy = per10k[k]
        print(f"{name}: {tot[k][2]:8d} accepted in its turns  {c:.3f} CPU-s per 10k (user {u:.3f}, kernel {sy:.3f})")
    print("per-load CPU overhead: " + ", ".join(f"{v:+.3f}" for v in per_load))
    print(f"ledger_overhead={per10k[True][0] / per10k[False][0] - 1:.3f}")
    return 0


def cmd_bench_ledger(a: argparse.Namespace) -> int:
    """The same Locust load (unpaced, or at --rate) with the send ledger on and off: the ledger's cost as CPU per
    acknowledged message of the load process (whole process, start-up included on both sides). The
    seal that follows a closed journal (rmqchaos/ledger/seal.py, in the pipeline's process, not the
    producer's) is timed apart and printed beside it."""
    import resource

    if a.alternate:
        return _alternating(a)
    from rmqchaos.ledger.schema import ledger_files
    from rmqchaos.ledger.seal import seal_closed
    seal_cpu: list[tuple[float, int]] = []  # (CPU-s, records) of each ledger-on round's seal

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def one(cluster_run: Any, base: Path, who: str, i: int) -> Sample:
        run = load_run_dir(base, cluster_run.path / "scenario.yaml", i, a.messages, a.users, a.size, a.rate)
        s = run_locust(run, who == "ledger", a.timeout, base)
        if who == "ledger" and i < 1000:  # counted rounds only
            c0 = cpu()
            done = seal_closed(ledger_files(run.path, "send"), "send")
            seal_cpu.append((cpu() - c0, sum(x.records for x in done)))
        return s

    samples = interleaved(a, ("ledger", "no-ledger"), one)
    (rate_on, cpu_on), (rate_off, cpu_off) = totals(samples, "ledger"), totals(samples, "no-ledger")
    on, off = [s for s in samples if s.who == "ledger"], [s for s in samples if s.who == "no-ledger"]
    acked_on = sum(s.acked for s in on)
    seal_s = sum(c for c, _ in seal_cpu)
    print(f"ledger benchmark: {a.rounds} interleaved rounds x {a.messages} messages, {a.users} Locust users, "
          + ("unpaced" if a.rate >= UNPACED else f"paced at {a.rate:g} msg/s"))
    for name, xs, rate, c in (("ledger on ", on, rate_on, cpu_on), ("ledger off", off, rate_off, cpu_off)):
        acked = sum(x.acked for x in xs)
        # where the cost lies: the kernel's share (the journal's page-cache pages are faulted in
        # by the copies into the mapping, one per 4 KiB) against the interpreter's formatting
        print(f"{name}: {rate:8.0f} acked msg/s  {c:.3f} CPU-s per 10k acked (load process; "
              f"{sum(x.sys_s for x in xs) / acked * 1e4:.3f} of it in the kernel, "
              f"{sum(x.minflt for x in xs) / acked * 1e4:,.0f} minor page faults)")
    print(f"seal after the load: {seal_s / acked_on * 1e4:.3f} CPU-s per 10k acked "
          f"({sum(n for _, n in seal_cpu):,} records, DuckDB, in the pipeline's process)")
    per = [x.cpu_per_10k / y.cpu_per_10k - 1 for x, y in zip(on, off)]
    print("per-round CPU overhead: " + ", ".join(f"{v:+.3f}" for v in per) + f" (median {statistics.median(per):+.3f})"
          + "; per-round rate cost: " + ", ".join(f"{1 - x.rate / y.rate:+.3f}" for x, y in zip(on, off)))
    print(f"ledger_overhead={cpu_on / cpu_off - 1:.3f}")
    return 0
