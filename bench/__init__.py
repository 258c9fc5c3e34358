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
    cpu_s: float  # user + system
    sys_s: float = 0.0  # of which in the kernel (the Locust benchmarks only)
    minflt: int = 0  # minor page faults (the Locust benchmarks only)

    @property
    def rate(self) -> float:
        return self.acked / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_per_10k(self) -> float:
        return self.cpu_s / self.acked * 10_000 if self.acked else float("inf")


def _measure(cmd: list[str], env: dict[str, str] | None, timeout: float,
             workdir: Path) -> tuple[str, float, Any, int]:
    """Run cmd to completion: (stdout, wall s, the child's rusage, exit code)."""
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
    return out_f.read_text(errors="replace"), wall, ru, p.returncode


def run_python(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path) -> Sample:
    cmd = [sys.executable, "-m", "rmqclient.bench_worker", "--namesrv", ns, "--topic", TOPIC, "--count", str(count),
           "--size", str(size), "--concurrency", str(conc)]
    out, wall, ru, rc = _measure(cmd, dict(os.environ), timeout, workdir)
    res = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if rc != 0 or res is None:
        raise UserError(f"the platform's benchmark producer failed (exit {rc})", out.strip()[-300:])
    return Sample("python", res["acked"], res["attempts"], wall, ru.ru_utime + ru.ru_stime)


def run_java(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path, heap_mb: int) -> Sample:
    paths.rocketmq_home(paths.pinned_rocketmq_version())  # installs the pinned jars when missing
    cmd = jvm_command(BENCH_PRODUCER, bench_args(ns, TOPIC, count, size, conc), heap_mb=heap_mb,
                      cp=classpath(paths.pinned_rocketmq_version()), user_home=workdir)
    out, wall, ru, rc = _measure(cmd, dict(os.environ, ROCKETMQ_HOME=str(workdir)), timeout, workdir)
    done = bench_complete(out)
    if rc != 0 or done is None:
        raise UserError(f"RocketMQ's benchmark Producer failed (exit {rc})", out.strip()[-300:])
    total, failed, resp_failed = done
    return Sample("java", total - failed, total + resp_failed, wall, ru.ru_utime + ru.ru_stime)


def compare(samples: list[Sample]) -> dict[str, float]:
    def tot(who: str) -> tuple[float, float, float]:
        s = [x for x in samples if x.who == who]
        return sum(x.acked for x in s), sum(x.wall_s for x in s), sum(x.cpu_s for x in s)
    pa, pw, pc = tot("python")
    ja, jw, jc = tot("java")
    return {"python_rate": pa / pw, "java_rate": ja / jw, "python_cpu_per_10k": pc / pa * 1e4,
            "java_cpu_per_10k": jc / ja * 1e4, "acked_per_cpu": (pa / pc) / (ja / jc), "acked_rate": (pa / pw) / (ja / jw)}


def _bench_topic(namesrv: str) -> None:
    """The benchmarks' topic on every broker, its route given a second to reach the namesrv."""
    from rmqclient.admin import AdminClient
    AdminClient(namesrv).create_topic_everywhere(TOPIC, queues=4)
    time.sleep(1.0)


def bench_producer(ns: str, rounds: int, count: int, size: int, conc: int, timeout: float,
                   java_heap_mb: int = 256) -> list[Sample]:
    _bench_topic(ns)
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

UNPACED = 200_000  # msg/s: above what one load process reaches here, so the load runs as fast as it can


def _rate(v: str) -> float:
    r = float(v)
    if not 0 < r <= UNPACED:
        raise argparse.ArgumentTypeError(f"{v}: a rate is messages/s above 0 and at most {UNPACED}")
    return r


def _turn(v: str) -> float:
    t = float(v)
    if not 0.5 <= t <= 60:
        raise argparse.ArgumentTypeError(f"{v}: a turn is 0.5 to 60 seconds")
    return t


def _load_run_dir(base: Path, cluster_scenario: Path, i: int, messages: int, users: int, size: int,
                  rate: float = UNPACED):
    """A throw-away run directory whose scenario drives a Locust load through the cluster, at `rate`
    messages/s in total (UNPACED: as fast as it goes)."""
    import yaml

    from rmqchaos.rundir import RunDir
    from rmqchaos.spec import parse_scenario
    d = yaml.safe_load(cluster_scenario.read_text())
    d.update(name=f"bench{i}", checks={}, consumers=None,
             load={"topic": TOPIC, "users": users, "spawn_rate": 10000, "rate": rate, "duration": "300s",
                   "messages": messages, "message_size": size})
    text = yaml.safe_dump(d, sort_keys=False)
    return RunDir.create(base / f"r{i}", parse_scenario(text), text, mode="owned")


def run_locust(run, ledger: bool, timeout: float, workdir: Path, turns: float = 0.0) -> Sample:
    cmd = [sys.executable, "-m", "loadgen", str(run.path), "--ledger", "on" if ledger else "off"]
    if turns:
        cmd += ["--ledger-turns", str(turns)]
    env = dict(os.environ, RMQCHAOS_QUIET="1", PYTHONPATH=str(paths.REPO))
    out, wall, ru, rc = _measure(cmd, env, timeout, workdir)
    if rc != 0:
        raise UserError(f"the Locust load process failed (exit {rc})", out.strip()[-300:])
    summ = json.loads((run.path / "load" / "summary.json").read_text())
    acked = summ["locust_requests"] - summ["locust_failures"]
    # rate over the load itself (start-up excluded on both sides: the same code path)
    return Sample("ledger" if ledger else "no-ledger", acked, summ["locust_requests"],
                  summ["end_s"] - summ["start_s"], ru.ru_utime + ru.ru_stime, ru.ru_stime, ru.ru_minflt)


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
    def body(cluster_run: Any) -> list[Sample]:
        _bench_topic(get_backend(cluster_run).namesrv_addr)
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
    return _with_cluster(a, body)


def _totals(samples: list[Sample], who: str) -> tuple[float, float]:
    """(acked msg/s, CPU-s per 10k acked) over every sample of `who`."""
    s = [x for x in samples if x.who == who]
    return sum(x.acked for x in s) / sum(x.wall_s for x in s), sum(x.cpu_s for x in s) / sum(x.acked for x in s) * 1e4


def _alternating(a: argparse.Namespace) -> int:
    """bench ledger --alternate: each load process turns its ledger on and off every a.alternate
    seconds; CPU per accepted message in the on turns against the off turns (each load's first turn,
    start-up and ramp, and its last, cut by the end, left out)."""
    def body(cluster_run: Any) -> list[list[Any]]:
        _bench_topic(get_backend(cluster_run).namesrv_addr)
        out: list[list[Any]] = []
        with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
            say("warm-up: one load (not counted; a fresh broker is slow at first)")
            for i in range(-1, a.rounds):  # -1: the warm-up
                run = _load_run_dir(Path(td), cluster_run.path / "scenario.yaml", 1000 if i < 0 else i, a.messages,
                                    a.users, a.size, a.rate)
                run_locust(run, True, a.timeout, Path(td), a.alternate)
                turns = json.loads((run.path / "load" / "summary.json").read_text()).get("ledger_turns", [])
                if i >= 0:
                    out.append(turns)
                    say(f"load {i + 1}/{a.rounds}: {max(0, len(turns) - 2)} turns of {a.alternate:g}s counted")
        return out

    loads = _with_cluster(a, body)
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
    seal that follows a closed journal (rmqchaos/seal.py, in the pipeline's process, not the
    producer's) is timed apart and printed beside it."""
    import resource

    if a.alternate:
        return _alternating(a)
    from rmqchaos.ledgers import ledger_files
    from rmqchaos.seal import seal_closed
    seal_cpu: list[tuple[float, int]] = []  # (CPU-s, records) of each ledger-on round's seal

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def one(cluster_run: Any, base: Path, who: str, i: int) -> Sample:
        run = _load_run_dir(base, cluster_run.path / "scenario.yaml", i, a.messages, a.users, a.size, a.rate)
        s = run_locust(run, who == "ledger", a.timeout, base)
        if who == "ledger" and i < 1000:  # counted rounds only
            c0 = cpu()
            done = seal_closed(ledger_files(run.path, "send"), "send")
            seal_cpu.append((cpu() - c0, sum(x.records for x in done)))
        return s

    samples = _interleaved(a, ("ledger", "no-ledger"), one)
    (rate_on, cpu_on), (rate_off, cpu_off) = _totals(samples, "ledger"), _totals(samples, "no-ledger")
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

def _driver_peak_mib() -> float | None:
    """The Spark driver JVM's peak resident memory so far (VmHWM), in MiB."""
    from pyspark import SparkContext
    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None) if gw is not None else None
    try:
        with open(f"/proc/{proc.pid}/status") as f:  # type: ignore[union-attr]
            return next(int(x.split()[1]) / 1024 for x in f if x.startswith("VmHWM:"))
    except (AttributeError, OSError, StopIteration):
        return None


def cmd_bench_analyze(a: argparse.Namespace) -> int:
    """Synthetic ledgers with planted classes, per size: DuckDB's reference classification reading the
    JSON Lines journals, against seal (JSON → Parquet, rmqchaos/seal.py) + Spark `analyze` reading the
    sealed copies, side by side; then (--standalone) the same seal + analyze with a Spark standalone
    cluster of 1 master and 2 workers of 1 core that the benchmark starts and stops."""
    from analysis import duckdb_ref, synthetic
    from analysis import spark_cluster
    from analysis.keys import key_table
    from analysis.reconcile import analyze_ledgers
    from analysis.sealed import read_receive, read_send, seal_all
    from analysis.session import spark_session
    from rmqchaos.seal import sealed_path

    keys = ("keys", "ok", "lost", "duplicated", "recovered", "failed", "indeterminate", "unexpected",
            "acked", "acked_weak", "attempts", "duplicate_deliveries")
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="rmqchaos-bench-analyze-"))
    master = None
    if a.standalone:
        say("starting a Spark standalone cluster: 1 master, 2 workers of 1 core")
        master = spark_cluster.up(workers=2, cores=1, memory_mb=a.worker_memory_mb, port=a.cluster_port,
                                  webui_port=a.cluster_webui_port)["master"]

    def unseal(files: list[Path]) -> None:
        for f in files:
            sealed_path(f).unlink(missing_ok=True)

    def timed_analyze(spark: Any, send: list[Path], recv: list[Path]) -> tuple[float, float, dict[str, Any]]:
        """(seal s, analyze s, result) from unsealed journals."""
        unseal(send + recv)
        t = time.monotonic()
        seal_all(send + recv, [])
        t_seal = time.monotonic() - t
        t = time.monotonic()
        res = analyze_ledgers(spark, send, recv, [])
        return t_seal, time.monotonic() - t, res

    results: list[tuple[int, float, float | None, bool]] = []
    log = base / "spark.log"  # Spark's and its JVM's own lines, not the benchmark's output
    spark = spark_session(a.master, log_file=log)
    try:
        print(f"analysis benchmark: seal + Spark {spark.version} analyze ({spark.sparkContext.master}"
              + (f"; and {master}: 2 workers x 1 core" if master else "") + ") vs DuckDB on the JSON journals, "
              "same machine, same files, one size at a time")
        warm: tuple[list[Path], list[Path]] | None = None
        if a.warmup:  # uncounted: the first Spark job in a JVM runs interpreted until the JIT catches up
            d = base / "warmup"
            say(f"warm-up on {a.warmup} keys (not counted)")
            synthetic.write(d, a.warmup)
            warm = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            duckdb_ref.classify(*warm)
            analyze_ledgers(spark, *warm, [])
        for n in a.rows:
            d = base / f"n{n}"
            say(f"writing synthetic ledgers for {n} keys")
            synthetic.write(d, n)
            # the generator's writes reach the disk now, not while one engine or the other is timed
            os.sync()
            send, recv = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            rows = _count_lines(send + recv)
            truth = synthetic.truth(n)
            t = time.monotonic()
            ref = duckdb_ref.classify(send, recv)
            t_duck = time.monotonic() - t
            t_seal, t_an, res = timed_analyze(spark, send, recv)
            t = time.monotonic()  # classification only, on the sealed copies: attempts, keys, class counts
            key_table(read_send(spark, send, []), read_receive(spark, recv, [])).groupBy("class").count().collect()
            t_cls = time.monotonic() - t

            def agrees(r: dict[str, Any]) -> bool:
                return all(r["counts"][k] == ref[k] == truth[k] for k in keys) and \
                    r["duplicates_by_cause"] == ref["duplicates_by_cause"] == truth["duplicates_by_cause"] and \
                    sorted(r["answers"], key=str) == sorted(truth["answers"], key=str)  # Spark's alone (not DuckDB's)
            agree = agrees(res)
            total = t_seal + t_an
            peak = _driver_peak_mib()
            print(f"rows {rows:>11,}: duckdb {t_duck:6.1f}s ({rows / t_duck:>9,.0f} rows/s) | local[*]: seal "
                  f"{t_seal:5.1f}s + analyze {t_an:6.1f}s = {total:6.1f}s ({total / rows * 1e6:5.2f} µs/row, "
                  f"spark_vs_duckdb {t_duck / total:.3f}), "
                  f"classify only {t_cls:5.1f}s | driver peak RSS "
                  + (f"{peak:,.0f} MiB" if peak else "?") + f" | agree={str(agree).lower()}")
            t_sa = None
            if master:
                spark.stop()
                spark = spark_session(master, log_file=log)
                if warm:  # new executors: their first job, uncounted, also waits until they are up
                    analyze_ledgers(spark, *warm, [])
                s_seal, s_an, s_res = timed_analyze(spark, send, recv)
                t_sa = s_seal + s_an
                agree = agree and agrees(s_res)
                print(f"{'':17s}  standalone (2 x 1 core): seal {s_seal:5.1f}s + analyze {s_an:6.1f}s = {t_sa:6.1f}s "
                      f"({t_sa / rows * 1e6:5.2f} µs/row, standalone_vs_duckdb {t_duck / t_sa:.3f}) "
                      f"| agree={str(agrees(s_res)).lower()}")
                spark.stop()
                spark = spark_session(a.master, log_file=log)
            results.append((rows, t_duck / total, t_duck / t_sa if t_sa else None, agree))
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
        if master:
            spark_cluster.down()
        if not a.keep:  # its own temp dir goes whole (an interrupted run leaves GBs of ledgers)
            shutil.rmtree(base if not a.dir else base / "warmup", ignore_errors=True)
    rows, ratio, sa_ratio, agree = results[-1]
    print(f"spark_vs_duckdb={ratio:.3f} " + (f"standalone_vs_duckdb={sa_ratio:.3f} " if sa_ratio else "")
          + f"rows={rows} agree={str(all(r[3] for r in results)).lower()}")
    return 0 if all(r[3] for r in results) else 1


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
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    p.add_argument("--messages", type=int, default=200000, help="messages per process per round (default 200000)")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--concurrency", type=int, default=32, help="sends in flight / Java threads (default 32)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound per process run (default 300 s)")
    _cluster_args(p).add_argument("--namesrv", help="use the running cluster with this namesrv (loopback) instead")
    p.set_defaults(fn=cmd_bench_producer)
    an = bsub.add_parser("analyze", help="Spark analyze vs a DuckDB reference on synthetic ledgers",
                         description=cmd_bench_analyze.__doc__)
    an.add_argument("--rows", type=lambda v: [int(x) for x in v.split(",")], default=[1_000_000, 10_000_000, 16_700_000],
                    help="comma-separated numbers of keys; each key is ~3 ledger rows (default "
                         "1000000,10000000,16700000: ~3M, 30M and 50M rows; 16.7M keys need ~20 GB of JSON "
                         "beside its sealed copies, one size on disk at a time unless --keep)")
    an.add_argument("--dir", help="where to write the synthetic ledgers and spark.log (default: a temp dir, "
                                  "removed at the end unless --keep)")
    an.add_argument("--warmup", type=int, default=200_000,
                    help="keys of an uncounted first round of both engines (default 200000; 0: none)")
    an.add_argument("--keep", action="store_true", help="keep the synthetic ledgers")
    an.add_argument("--master", help="Spark master of the main rows (default local[*])")
    an.add_argument("--standalone", action=argparse.BooleanOptionalAction, default=True,
                    help="also run seal + analyze on a Spark standalone cluster (1 master, 2 workers of 1 core) "
                         "that the benchmark starts and stops (default on)")
    an.add_argument("--worker-memory-mb", type=int, default=2048, help="memory of each standalone worker (default 2048)")
    an.add_argument("--cluster-port", type=int, default=17077, help="the standalone master's port (default 17077)")
    an.add_argument("--cluster-webui-port", type=int, default=18180,
                    help="the standalone master's web UI port; workers use the next ones (default 18180)")
    an.set_defaults(fn=cmd_bench_analyze)
    for name, fn, hlp, msgs, rounds in (("ledger", cmd_bench_ledger,
                                         "the same Locust load with the send ledger on and off", 50000, 4),
                                        ("locust", cmd_bench_locust, "Locust-driven producer vs the bare producer",
                                         100000, 2)):
        q = bsub.add_parser(name, help=hlp, description=hlp + ", interleaved in one run.")
        q.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds (default {rounds})")
        q.add_argument("--messages", type=int, default=msgs, help=f"messages per load (default {msgs})")
        q.add_argument("--users", type=int, default=32, help="Locust users / concurrent sends (default 32)")
        q.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
        if name == "ledger":  # the bare producer of `bench locust` has no pacing to match
            q.add_argument("--rate", type=_rate, default=UNPACED,
                           help="messages/s of each load, all users together (default: unpaced, as fast as it goes)")
            q.add_argument("--alternate", type=_turn, default=0.0, metavar="SECONDS",
                           help="instead of separate loads with the ledger on and off, --rounds loads that each turn "
                                "it on and off every SECONDS (drift between neighbouring turns cancels; start-up is "
                                "in no turn)")
        q.add_argument("--timeout", type=float, default=300.0, help="bound per load process (default 300 s)")
        _cluster_args(q)
        q.set_defaults(fn=fn)
