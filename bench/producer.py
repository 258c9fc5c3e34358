"""`rmqchaos bench producer`: the platform's producer against RocketMQ's own benchmark Producer.

Both run as child processes against the same cluster and topic, in interleaved rounds (ABBA order,
so drift of this noisy machine falls on both sides), with the same concurrency, message size and
count. For each process: acked messages, wall time from spawn to exit, and CPU-seconds (user + sys,
from wait4's rusage) — whole-process numbers, JVM/interpreter start-up included on both sides.
Only ratios measured side by side are meant to be compared across machines.

--mode grpc (issue 52): through the proxy, the platform's gRPC load (io.rmqchaos.GrpcProducer with its
send ledger: an intent and an outcome line per attempt) against the same loop of the 5.x Java client's
Producer.send with no ledger (GrpcProducer --out -): what the platform adds to the client. It needs a
cluster with a proxy: by default it starts scenarios/grpc-control.yaml's, or give --run-dir.

--mode ordered / transactional (issue 50): the platform's ordered send (a sharding key hashed over the
route's queues) and transactional send (half message, then its commit), against the Java client's
own API for the same (io.rmqchaos.SendBench: send with SelectMessageQueueByHash;
TransactionMQProducer.sendMessageInTransaction committing at once), each thread or greenlet owning 4
sharding keys.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.measure import Sample, measure
from bench.rounds import TOPIC, bench_topic
from cluster import get_backend
from cluster.plan.jvm import classpath, grpc_classpath, jvm_command
from cluster.plan.tools import BENCH_PRODUCER, bench_args, bench_complete
from pipeline.stages import down, up
from pipeline.runs import create_run, namesrv_target, reap_orphans
from rmqchaos.machine import paths
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir


MODES = ("normal", "ordered", "transactional", "grpc")
SEND_BENCH = "io.rmqchaos.SendBench"
GRPC_PRODUCER = "io.rmqchaos.GrpcProducer"


def run_python(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path, mode: str = "normal") -> Sample:
    cmd = [sys.executable, "-m", "rmqclient.bench_worker", "--namesrv", ns, "--topic", TOPIC, "--count", str(count),
           "--size", str(size), "--concurrency", str(conc), "--mode", mode]
    out, wall, ru, rc = measure(cmd, dict(os.environ), timeout, workdir)
    res = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if rc != 0 or res is None:
        raise UserError(f"the platform's benchmark producer failed (exit {rc})", out.strip()[-300:])
    return Sample("python", res["acked"], res["attempts"], wall, ru.ru_utime + ru.ru_stime)


def run_java(ns: str, count: int, size: int, conc: int, timeout: float, workdir: Path, heap_mb: int,
             mode: str = "normal") -> Sample:
    rocketmq_dist.rocketmq_home(paths.pinned_rocketmq_version())  # installs the pinned jars when missing
    if mode != "normal":  # the client's own ordered / transactional API
        cmd = jvm_command(SEND_BENCH, ["--namesrv", ns, "--topic", TOPIC, "--count", str(count), "--size", str(size),
                                       "--concurrency", str(conc), "--mode", mode], heap_mb=heap_mb,
                          cp=classpath(paths.pinned_rocketmq_version(), platform_jar=True), user_home=workdir)
        out, wall, ru, rc = measure(cmd, dict(os.environ), timeout, workdir)
        res = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
        if rc != 0 or res is None:
            raise UserError(f"{SEND_BENCH} failed (exit {rc})", out.strip()[-300:])
        return Sample("java", res["acked"], res["attempts"], wall, ru.ru_utime + ru.ru_stime)
    cmd = jvm_command(BENCH_PRODUCER, bench_args(ns, TOPIC, count, size, conc), heap_mb=heap_mb,
                      cp=classpath(paths.pinned_rocketmq_version()), user_home=workdir)
    out, wall, ru, rc = measure(cmd, dict(os.environ, ROCKETMQ_HOME=str(workdir)), timeout, workdir)
    done = bench_complete(out)
    if rc != 0 or done is None:
        raise UserError(f"RocketMQ's benchmark Producer failed (exit {rc})", out.strip()[-300:])
    total, failed, resp_failed = done
    return Sample("java", total - failed, total + resp_failed, wall, ru.ru_utime + ru.ru_stime)


def run_grpc(endpoint: str, count: int, size: int, conc: int, timeout: float, workdir: Path, bare: bool) -> Sample:
    """One GrpcProducer through the proxy, as fast as it goes: with its ledger ("python": the platform's
    side), or bare ("java": the 5.x client alone)."""
    v = paths.pinned_rocketmq_version()
    args = ["--endpoints", endpoint, "--topic", TOPIC, "--out", "-" if bare else str(workdir / "grpc-send.jsonl"),
            "--rate", "1000000", "--duration", "3600", "--messages", str(count), "--size", str(size),
            "--threads", str(conc), "--producer-id", "bench", "--timeout-ms", "10000"]
    cmd = jvm_command(GRPC_PRODUCER, args, cp=grpc_classpath(v), heap_mb=256, user_home=workdir)
    out, wall, ru, rc = measure(cmd, dict(os.environ), timeout, workdir)
    res = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if rc != 0 or res is None:
        raise UserError(f"{GRPC_PRODUCER} failed (exit {rc})", out.strip()[-300:])
    return Sample("java" if bare else "python", res["accepted"], res["attempts"], wall, ru.ru_utime + ru.ru_stime)


def compare(samples: list[Sample]) -> dict[str, float]:
    def tot(who: str) -> tuple[float, float, float]:
        s = [x for x in samples if x.who == who]
        return sum(x.acked for x in s), sum(x.wall_s for x in s), sum(x.cpu_s for x in s)
    pa, pw, pc = tot("python")
    ja, jw, jc = tot("java")
    return {"python_rate": pa / pw, "java_rate": ja / jw, "python_cpu_per_10k": pc / pa * 1e4,
            "java_cpu_per_10k": jc / ja * 1e4, "acked_per_cpu": (pa / pc) / (ja / jc), "acked_rate": (pa / pw) / (ja / jw)}


def bench_producer(ns: str, rounds: int, count: int, size: int, conc: int, timeout: float,
                   java_heap_mb: int = 256, mode: str = "normal", endpoint: str | None = None) -> list[Sample]:
    bench_topic(ns)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:
        wd = Path(td)

        def one(who: str, n: int) -> Sample:
            if mode == "grpc":
                assert endpoint is not None
                return run_grpc(endpoint, n, size, conc, timeout, wd, bare=who == "java")
            return (run_python(ns, n, size, conc, timeout, wd, mode) if who == "python"
                    else run_java(ns, n, size, conc, timeout, wd, java_heap_mb, mode))
        warm = max(1000, count // 10)
        say(f"warm-up: {warm} messages each (not counted)")
        one("python", warm)
        one("java", warm)
        for i in range(rounds):
            order = ("python", "java") if i % 2 == 0 else ("java", "python")
            for who in order:
                s = one(who, count)
                samples.append(s)
                say(f"round {i + 1}/{rounds} {who:6s}: {s.acked}/{s.attempts} acked in {s.wall_s:.1f}s "
                    f"({s.rate:.0f} msg/s), {s.cpu_s:.2f} CPU-s ({s.cpu_per_10k:.2f} per 10k acked)")
    return samples


def cmd_bench_producer(a: argparse.Namespace) -> int:
    run = None
    if a.mode == "grpc" and a.namesrv:
        raise UserError("--mode grpc sends through the proxy, and --namesrv does not say where it is",
                        "give --run-dir of a cluster with a proxy, or neither (the benchmark starts one)")
    scenario = str(paths.REPO / "scenarios" / "grpc-control.yaml") if a.mode == "grpc" and a.scenario is None \
        else a.scenario or str(paths.REPO / "scenarios" / "smoke.yaml")
    if a.namesrv or a.run_dir:
        ns, _ = namesrv_target(a.namesrv, a.run_dir)
    else:
        reap_orphans()
        run = create_run(scenario, None, mode="owned")
        say(f"starting a cluster for the benchmark from {scenario} (run directory {run.path})")
        ns = up.run(run)["namesrv"]
    try:
        endpoint = get_backend(run if run is not None else RunDir.open(a.run_dir)).proxy_grpc_addr() \
            if a.mode == "grpc" else None
        samples = bench_producer(ns, a.rounds, a.messages, a.size, a.concurrency, a.timeout, mode=a.mode,
                                 endpoint=endpoint)
    finally:
        if run is not None:
            down.run(run)
    r = compare(samples)
    per_round = [(p.cpu_per_10k and j.cpu_per_10k / p.cpu_per_10k, p.rate / j.rate)
                 for p, j in zip([s for s in samples if s.who == "python"], [s for s in samples if s.who == "java"])]
    print(f"producer benchmark ({a.mode}): {a.rounds} interleaved rounds x {a.messages} messages of {a.size} B, "
          f"{a.concurrency} concurrent sends, topic {TOPIC} on every broker")
    print(f"{'':8s} {'acked msg/s':>12s} {'CPU-s per 10k acked':>20s}")
    java_side = {"normal": BENCH_PRODUCER, "grpc": f"{GRPC_PRODUCER} --out -: the 5.x client alone"}.get(a.mode, SEND_BENCH)
    python_side = f"{GRPC_PRODUCER}: the platform's gRPC load" if a.mode == "grpc" else "rmqclient.Producer, gevent"
    print(f"{'python':8s} {r['python_rate']:12.0f} {r['python_cpu_per_10k']:20.3f}   ({python_side})")
    print(f"{'java':8s} {r['java_rate']:12.0f} {r['java_cpu_per_10k']:20.3f}   ({java_side})")
    print("per-round ratios (python/java) acked_per_cpu: "
          + ", ".join(f"{x:.2f}" for x, _ in per_round) + "; acked_rate: " + ", ".join(f"{y:.2f}" for _, y in per_round)
          + f" (median {statistics.median(x for x, _ in per_round):.2f} / {statistics.median(y for _, y in per_round):.2f})")
    print(f"ratio acked_per_cpu={r['acked_per_cpu']:.2f} acked_rate={r['acked_rate']:.2f}")
    return 0
