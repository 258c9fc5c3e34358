"""`rmqchaos bench producer`: the platform's producer against RocketMQ's own benchmark Producer.

Both run as child processes against the same cluster and topic, in interleaved rounds (ABBA order,
so drift of this noisy machine falls on both sides), with the same concurrency, message size and
count. For each process: acked messages, wall time from spawn to exit, and CPU-seconds (user + sys,
from wait4's rusage) — whole-process numbers, JVM/interpreter start-up included on both sides.
Only ratios measured side by side are meant to be compared across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cluster import get_backend
from cluster.jvm import classpath, jvm_command
from cluster.tools import BENCH_PRODUCER, bench_args, bench_complete
from pipeline import down, up
from pipeline.runs import create_run, namesrv_target, open_cluster_run, reap_orphans
from rmqchaos import paths
from rmqchaos.errors import UserError
from rmqchaos.procs import spawn
from rmqchaos.progress import say

TOPIC = "RMQCHAOS_BENCH"


@dataclass
class Sample:
    who: str  # "python" | "java"
    acked: int
    attempts: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.acked / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_per_10k(self) -> float:
        return self.cpu_s / self.acked * 10_000 if self.acked else float("inf")


def _measure(cmd: list[str], env: dict[str, str] | None, timeout: float, workdir: Path) -> tuple[str, float, float, int]:
    """Run cmd to completion: (stdout, wall s, cpu s of the child, exit code)."""
    out_f = workdir / "out.txt"
    with open(out_f, "wb") as out:
        t0 = time.monotonic()
        p = spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir, die_with_parent=True)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                raise UserError(f"benchmark process {cmd[0]} did not finish within {timeout:.0f}s",
                                "is the cluster healthy? (rmqchaos cluster status)")
            time.sleep(0.01)
        wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return out_f.read_text(errors="replace"), wall, ru.ru_utime + ru.ru_stime, p.returncode


def run_python(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path) -> Sample:
    cmd = [sys.executable, "-m", "rmqclient.bench_worker", "--namesrv", ns, "--topic", TOPIC, "--count", str(count),
           "--size", str(size), "--concurrency", str(conc)]
    out, wall, cpu, rc = _measure(cmd, dict(os.environ), timeout, workdir)
    res = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if rc != 0 or res is None:
        raise UserError(f"the platform's benchmark producer failed (exit {rc})", out.strip()[-300:])
    return Sample("python", res["acked"], res["attempts"], wall, cpu)


def run_java(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path, heap_mb: int) -> Sample:
    home = paths.rocketmq_home(paths.pinned_rocketmq_version())
    cmd = jvm_command(BENCH_PRODUCER, bench_args(ns, TOPIC, count, size, conc), heap_mb=heap_mb,
                      cp=classpath(paths.pinned_rocketmq_version()), user_home=workdir)
    out, wall, cpu, rc = _measure(cmd, dict(os.environ, ROCKETMQ_HOME=str(workdir)), timeout, workdir)
    done = bench_complete(out)
    if rc != 0 or done is None:
        raise UserError(f"RocketMQ's benchmark Producer failed (exit {rc})", out.strip()[-300:])
    total, failed, resp_failed = done
    return Sample("java", total - failed, total + resp_failed, wall, cpu)


def compare(samples: list[Sample]) -> dict[str, float]:
    def tot(who: str) -> tuple[float, float, float]:
        s = [x for x in samples if x.who == who]
        return sum(x.acked for x in s), sum(x.wall_s for x in s), sum(x.cpu_s for x in s)
    pa, pw, pc = tot("python")
    ja, jw, jc = tot("java")
    return {"python_rate": pa / pw, "java_rate": ja / jw, "python_cpu_per_10k": pc / pa * 1e4,
            "java_cpu_per_10k": jc / ja * 1e4, "acked_per_cpu": (pa / pc) / (ja / jc), "acked_rate": (pa / pw) / (ja / jw)}


def bench_producer(ns: str, rounds: int, count: int, size: int, conc: int, timeout: float,
                   java_heap_mb: int = 256) -> list[Sample]:
    from rmqclient.admin import AdminClient
    AdminClient(ns).create_topic_everywhere(TOPIC, queues=4)
    time.sleep(1.0)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
        wd = Path(td)
        warm = max(1000, count // 10)
        say(f"warm-up: {warm} messages each (not counted)")
        run_python(ns, warm, size, conc, timeout, wd)
        run_java(ns, warm, size, conc, timeout, wd, java_heap_mb)
        for i in range(rounds):
            order = ("python", "java") if i % 2 == 0 else ("java", "python")
            for who in order:
                s = (run_python(ns, count, size, conc, timeout, wd) if who == "python"
                     else run_java(ns, count, size, conc, timeout, wd, java_heap_mb))
                samples.append(s)
                say(f"round {i + 1}/{rounds} {who:6s}: {s.acked}/{s.attempts} acked in {s.wall_s:.1f}s "
                    f"({s.rate:.0f} msg/s), {s.cpu_s:.2f} CPU-s ({s.cpu_per_10k:.2f} per 10k acked)")
    return samples


def cmd_bench_producer(a: argparse.Namespace) -> int:
    run = None
    if a.namesrv or a.run_dir:
        ns, _ = namesrv_target(a.namesrv, a.run_dir)
    else:
        reap_orphans()
        run = create_run(a.scenario, None, mode="owned")
        say(f"starting a cluster for the benchmark from {a.scenario} (run directory {run.path})")
        ns = up.run(run)["namesrv"]
    try:
        samples = bench_producer(ns, a.rounds, a.messages, a.size, a.concurrency, a.timeout)
    finally:
        if run is not None:
            down.run(run)
    r = compare(samples)
    per_round = [(p.cpu_per_10k and j.cpu_per_10k / p.cpu_per_10k, p.rate / j.rate)
                 for p, j in zip([s for s in samples if s.who == "python"], [s for s in samples if s.who == "java"])]
    print(f"producer benchmark: {a.rounds} interleaved rounds x {a.messages} messages of {a.size} B, "
          f"{a.concurrency} concurrent sends, topic {TOPIC} on every broker")
    print(f"{'':8s} {'acked msg/s':>12s} {'CPU-s per 10k acked':>20s}")
    print(f"{'python':8s} {r['python_rate']:12.0f} {r['python_cpu_per_10k']:20.3f}   (rmqclient.Producer, gevent)")
    print(f"{'java':8s} {r['java_rate']:12.0f} {r['java_cpu_per_10k']:20.3f}   ({BENCH_PRODUCER})")
    print("per-round ratios (python/java) acked_per_cpu: "
          + ", ".join(f"{x:.2f}" for x, _ in per_round) + "; acked_rate: " + ", ".join(f"{y:.2f}" for _, y in per_round)
          + f" (median {statistics.median(x for x, _ in per_round):.2f} / {statistics.median(y for _, y in per_round):.2f})")
    print(f"ratio acked_per_cpu={r['acked_per_cpu']:.2f} acked_rate={r['acked_rate']:.2f}")
    return 0


# ---------------------------------------------------------------- load benchmarks (Locust)

def _load_run_dir(base: Path, cluster_scenario: Path, i: int, messages: int, users: int, size: int):
    """A throw-away run directory whose scenario drives an unpaced Locust load through the cluster."""
    import yaml

    from rmqchaos.rundir import RunDir
    from rmqchaos.spec import parse_scenario
    d = yaml.safe_load(cluster_scenario.read_text())
    d.update(name=f"bench{i}", checks={}, consumers=None,
             load={"topic": TOPIC, "users": users, "spawn_rate": 10000, "rate": 200000, "duration": "300s",
                   "messages": messages, "message_size": size})
    text = yaml.safe_dump(d, sort_keys=False)
    return RunDir.create(base / f"r{i}", parse_scenario(text), text, mode="owned")


def run_locust(run, ledger: bool, timeout: float, workdir: Path) -> Sample:
    cmd = [sys.executable, "-m", "loadgen", str(run.path), "--ledger", "on" if ledger else "off"]
    env = dict(os.environ, RMQCHAOS_QUIET="1", PYTHONPATH=str(paths.REPO))
    out, wall, cpu, rc = _measure(cmd, env, timeout, workdir)
    if rc != 0:
        raise UserError(f"the Locust load process failed (exit {rc})", out.strip()[-300:])
    summ = json.loads((run.path / "load" / "summary.json").read_text())
    acked = summ["locust_requests"] - summ["locust_failures"]
    # rate over the load itself (start-up excluded on both sides: the same code path)
    return Sample("ledger" if ledger else "no-ledger", acked, summ["locust_requests"],
                  summ["end_s"] - summ["start_s"], cpu)


def _with_cluster(a: argparse.Namespace, fn):  # type: ignore[no-untyped-def]
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


def _interleaved(a: argparse.Namespace, kinds: tuple[str, str],
                 one: Callable[[Any, Path, str, int], Sample]) -> list[Sample]:
    """`a.rounds` rounds of both kinds in ABBA order against the benchmark cluster; one(cluster run,
    scratch dir, kind, index) runs one measurement."""
    from rmqclient.admin import AdminClient

    def body(cluster_run: Any) -> list[Sample]:
        AdminClient(get_backend(cluster_run).namesrv_addr).create_topic_everywhere(TOPIC, queues=4)
        time.sleep(1)
        samples: list[Sample] = []
        with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
            say("warm-up: one run of each kind (not counted; a fresh broker is slow at first)")
            for i, who in enumerate(kinds):
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
    return _with_cluster(a, body)


def _totals(samples: list[Sample], who: str) -> tuple[float, float]:
    """(acked msg/s, CPU-s per 10k acked) over every sample of `who`."""
    s = [x for x in samples if x.who == who]
    return sum(x.acked for x in s) / sum(x.wall_s for x in s), sum(x.cpu_s for x in s) / sum(x.acked for x in s) * 1e4


def cmd_bench_ledger(a: argparse.Namespace) -> int:
    def one(cluster_run: Any, base: Path, who: str, i: int) -> Sample:
        run = _load_run_dir(base, cluster_run.path / "scenario.yaml", i, a.messages, a.users, a.size)
        return run_locust(run, who == "ledger", a.timeout, base)

    samples = _interleaved(a, ("ledger", "no-ledger"), one)
    (rate_on, cpu_on), (rate_off, cpu_off) = _totals(samples, "ledger"), _totals(samples, "no-ledger")
    on, off = [s for s in samples if s.who == "ledger"], [s for s in samples if s.who == "no-ledger"]
    print(f"ledger benchmark: {a.rounds} interleaved rounds x {a.messages} messages, {a.users} Locust users, unpaced")
    print(f"ledger on : {rate_on:8.0f} acked msg/s  {cpu_on:.3f} CPU-s per 10k acked")
    print(f"ledger off: {rate_off:8.0f} acked msg/s  {cpu_off:.3f} CPU-s per 10k acked")
    print("per-round overhead: " + ", ".join(f"{1 - x.rate / y.rate:+.3f}" for x, y in zip(on, off)))
    print(f"ledger_overhead={1 - rate_on / rate_off:.3f}")
    return 0


def cmd_bench_locust(a: argparse.Namespace) -> int:
    def one(cluster_run: Any, base: Path, who: str, i: int) -> Sample:
        if who == "locust":
            run = _load_run_dir(base, cluster_run.path / "scenario.yaml", i, a.messages, a.users, a.size)
            s = run_locust(run, False, a.timeout, base)
        else:
            s = run_python(get_backend(cluster_run).namesrv_addr, a.messages, a.size, a.users, a.timeout, base)
        return Sample(who, s.acked, s.attempts, s.wall_s, s.cpu_s)

    samples = _interleaved(a, ("locust", "bare"), one)
    (rl, cl), (rb, cb) = _totals(samples, "locust"), _totals(samples, "bare")
    print(f"Locust cost: {a.rounds} interleaved rounds x {a.messages} messages, {a.users} users / concurrent sends, "
          "no ledger, unpaced")
    print(f"locust-driven : {rl:8.0f} acked msg/s (load phase)  {cl:.3f} CPU-s per 10k acked (whole process)")
    print(f"bare producer : {rb:8.0f} acked msg/s (whole process)  {cb:.3f} CPU-s per 10k acked (whole process)")
    print(f"ratio locust_vs_bare acked_rate={rl / rb:.2f} acked_per_cpu={cb / cl:.2f}")
    return 0


# ---------------------------------------------------------------- analysis benchmark

def cmd_bench_analyze(a: argparse.Namespace) -> int:
    """Synthetic ledgers with planted classes; Spark `analyze` (full, and classification only) vs the
    DuckDB reference classification, side by side, per size."""
    from analysis import duckdb_ref, synthetic
    from analysis.reconcile import analyze_ledgers, key_table, read_receive, read_send, spark_session

    spark = spark_session(a.master)
    last = None
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="rmqchaos-bench-analyze-"))
    try:
        print(f"analysis benchmark: Spark {spark.version} ({spark.sparkContext.master}) vs DuckDB, same machine, "
              "same files, one size at a time")
        if a.warmup:  # uncounted: the first Spark job in a JVM runs interpreted until the JIT catches up
            d = base / "warmup"
            say(f"warm-up on {a.warmup} keys (not counted)")
            synthetic.write(d, a.warmup)
            send, recv = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            duckdb_ref.classify(send, recv)
            analyze_ledgers(spark, send, recv, [])
            shutil.rmtree(d, ignore_errors=True)
        for n in a.rows:
            d = base / f"n{n}"
            say(f"writing synthetic ledgers for {n} keys")
            synthetic.write(d, n)
            send, recv = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            rows = _count_lines(send + recv)
            t = time.monotonic()
            ref = duckdb_ref.classify(send, recv)
            t_duck = time.monotonic() - t
            t = time.monotonic()
            res = analyze_ledgers(spark, send, recv, [])
            t_full = time.monotonic() - t
            t = time.monotonic()  # classification only: parse, attempts, keys, class counts
            w: list[str] = []
            stg = d / "_cls"
            key_table(read_send(spark, send, w, stg / "s"), read_receive(spark, recv, w, stg / "r")) \
                .groupBy("class").count().collect()
            t_cls = time.monotonic() - t
            truth = synthetic.truth(n)
            keys = ("keys", "ok", "lost", "duplicated", "recovered", "failed", "indeterminate", "unexpected",
                    "acked", "acked_weak", "attempts", "duplicate_deliveries")
            agree = all(res["counts"][k] == ref[k] == truth[k] for k in keys) and \
                res["duplicates_by_cause"] == ref["duplicates_by_cause"] == truth["duplicates_by_cause"]
            print(f"rows {rows:>11,}: duckdb {t_duck:7.1f}s ({rows / t_duck:>10,.0f} rows/s) | spark analyze "
                  f"{t_full:7.1f}s ({rows / t_full:>9,.0f} rows/s) | spark classify only {t_cls:7.1f}s "
                  f"({rows / t_cls:>9,.0f} rows/s) | agree={str(agree).lower()}")
            last = (t_duck / t_full, rows, agree)
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
    assert last is not None
    print(f"spark_vs_duckdb={last[0]:.3f} rows={last[1]} agree={str(last[2]).lower()}")
    return 0 if last[2] else 1


def _count_lines(files: list[Path]) -> int:
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b""))
    return n


def _cluster_args(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """Which cluster a benchmark measures: one it starts from --scenario, or a running one."""
    p.add_argument("--scenario", default=str(paths.REPO / "scenarios" / "smoke.yaml"),
                   help="cluster to start for the benchmark (default scenarios/smoke.yaml)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run-dir", help="use the running cluster of this run directory instead")
    return g


def add_parsers(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks that print ratios measured side by side")
    bsub = b.add_subparsers(dest="bench", required=True)
    p = bsub.add_parser("producer", help="the platform's producer vs RocketMQ's benchmark Producer",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    p.add_argument("--messages", type=int, default=20000, help="messages per process per round (default 20000)")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--concurrency", type=int, default=32, help="sends in flight / Java threads (default 32)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound per process run (default 300 s)")
    _cluster_args(p).add_argument("--namesrv", help="use the running cluster with this namesrv (loopback) instead")
    p.set_defaults(fn=cmd_bench_producer)
    an = bsub.add_parser("analyze", help="Spark analyze vs a DuckDB reference on synthetic ledgers",
                         description=cmd_bench_analyze.__doc__)
    an.add_argument("--rows", type=lambda v: [int(x) for x in v.split(",")], default=[1_000_000, 10_000_000, 50_000_000],
                    help="comma-separated numbers of keys (default 1000000,10000000,50000000; each key is "
                         "~3 ledger rows; 50M keys need ~55 GB of disk)")
    an.add_argument("--dir", help="where to write the synthetic ledgers (default: a temp dir)")
    an.add_argument("--warmup", type=int, default=200_000,
                    help="keys of an uncounted first round of both engines (default 200000; 0: none)")
    an.add_argument("--keep", action="store_true", help="keep the synthetic ledgers")
    an.add_argument("--master", help="Spark master (default local[*])")
    an.set_defaults(fn=cmd_bench_analyze)
    for name, fn, hlp in (("ledger", cmd_bench_ledger, "the same Locust load with the send ledger on and off"),
                          ("locust", cmd_bench_locust, "Locust-driven producer vs the bare producer")):
        q = bsub.add_parser(name, help=hlp, description=hlp + ", interleaved in one run.")
        q.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
        q.add_argument("--messages", type=int, default=20000, help="messages per load (default 20000)")
        q.add_argument("--users", type=int, default=32, help="Locust users / concurrent sends (default 32)")
        q.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
        q.add_argument("--timeout", type=float, default=300.0, help="bound per load process (default 300 s)")
        _cluster_args(q)
        q.set_defaults(fn=fn)
