"""`rmqchaos bench powerfs`: what the powerfs layer (docs/powerfs.md) costs a broker. One cluster of
two broker groups with the same configuration, one broker's store on the layer and the other's in a
plain directory, under one load spread over all queues of the topic on both (each broker gets half).

Each round starts its own cluster from --scenario (the layer is a cluster setting) and the broker on
the layer alternates in ABBA order (broker-a, broker-b, broker-b, broker-a, ...), so that a broker's
position (its port, its place in the route) cancels. After an uncounted warm-up load, one load of
--duration at --rate is measured; per broker:
  acked      the send ledger's `ok` outcomes whose `broker` is that broker, per second of the load;
  CPU        user + system seconds over the measured load, read from /proc/<pid>/stat before and
             after: the broker JVM's, and on the layer's side also the powerfs server's (a process of
             its own, outside the node's cgroup). The kernel's writeback threads count on neither side.
The load is one set of users over both brokers: a broker that answers slowly holds users that would
send to the other one too, so the acknowledged rates stay alike until sends on the slow side fail;
its latency (p50/p99 of its acknowledged sends) shows a slowdown before that.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from analysis.judge.loadstep import p99
from bench.measure import cpu_per_10k, per_s
from bench.rounds import TOPIC
from pipeline.stages import down, load, up
from pipeline.runs import attach_run, create_run, load_scenario, reap_orphans
from rmqchaos.errors import UserError
from rmqchaos.ledger.journal_read import read_ledger
from rmqchaos.ledger.schema import ledger_files
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import dump_scenario


@dataclass
class Side:
    broker: str
    layer: bool
    acked: int
    attempts: int  # outcome records of this broker (a send with no answer at all names no broker)
    window_s: float
    jvm_s: float  # CPU-seconds of the broker JVM over the measured load
    server_s: float  # ... and of its powerfs server (0 on the plain side)
    p50_ms: int | None
    p99_ms: int | None

    @property
    def cpu_s(self) -> float:
        return self.jvm_s + self.server_s

    @property
    def rate(self) -> float:
        return per_s(self.acked, self.window_s)

    @property
    def cpu_per_10k(self) -> float:
        return cpu_per_10k(self.cpu_s, self.acked)


def cluster_scenario(scenario: str | Path, a: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The resolved --scenario as the bench's cluster (its faults, consumers, checks and signature
    dropped, --flush on both brokers) and the names of its two broker groups; one line if it has not
    exactly two single-node groups configured alike."""
    d = yaml.safe_load(dump_scenario(load_scenario(scenario)))
    brokers = d["cluster"]["brokers"]
    if len(brokers) != 2 or any(b.get("slave") or b.get("replicas") for b in brokers) or d["cluster"].get("controllers"):
        raise UserError(f"{scenario}: bench powerfs needs exactly two broker groups of one node each "
                        f"(this one has {len(brokers)}{', with replicas' if len(brokers) == 2 else ''})",
                        "pass a --scenario such as scenarios/power-loss-async.yaml")
    for b in brokers:
        b["config"] = {**(b.get("config") or {}), "flushDiskType": a.flush}
    if brokers[0]["config"] != brokers[1]["config"] or brokers[0].get("jvm") != brokers[1].get("jvm"):
        raise UserError(f"{scenario}: its brokers differ in more than flushDiskType, so the layer's cost "
                        "could not be told apart from theirs", "give both brokers the same config and jvm")
    d["name"] = "bench-powerfs"
    d["cluster"]["powerfs"] = []  # one broker's, per round (one_round)
    d.update(faults=[], consumers={"instances": []}, checks={})  # None would mean one default consumer
    for k in ("signature", "expect"):
        d.pop(k, None)
    d["load"] = {**(d.get("load") or {}), "topic": TOPIC, "rate": a.rate, "message_size": a.size, "messages": None}
    return d, [b["name"] for b in brokers]


def layered_broker(names: list[str], r: int) -> str:
    """The broker on the layer in round r (0-based): ABBA, so that position effects cancel."""
    return names[(r + r // 2) % 2]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (every thread, those ended included), in seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        raise UserError(f"process {pid} of the benchmark's cluster is gone", "see its run directory under runs/") from None
    rest = f[f.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _pid(run: RunDir, name: str) -> int:
    rec = run.processes.latest(name)
    if rec is None:
        raise UserError(f"no process {name} in {run.processes.path}", "is the cluster up? (rmqchaos cluster status)")
    return rec.pid


def per_broker(step: Path) -> dict[str, dict[str, Any]]:
    """Per broker: acked, attempts (its outcome records) and the send latencies (ms) of the acked, and
    the ledger's window (first start to last end, s) under the key ''."""
    out: dict[str, dict[str, Any]] = {}
    first = last = None
    for f in ledger_files(step, "send"):
        for r in read_ledger(f).records:
            if r.get("rec") != "outcome":
                continue
            b = out.setdefault(r.get("broker") or "(no broker)", {"acked": 0, "attempts": 0, "lat": []})
            b["attempts"] += 1
            if r.get("outcome") == "ok":
                b["acked"] += 1
                b["lat"].append(r["end_ms"] - r["start_ms"])
            first = r["start_ms"] if first is None else min(first, r["start_ms"])
            last = r["end_ms"] if last is None else max(last, r["end_ms"] or 0)
    out[""] = {"window_s": (last - first) / 1000 if first is not None and last is not None else 0.0}
    return out


def _load_step(cluster: RunDir, name: str, duration: float) -> RunDir:
    """A run of its own attached to the round's cluster: its load for `duration` seconds."""
    d = yaml.safe_load((cluster.path / "scenario.yaml").read_text())
    d["name"] = f"bench-powerfs-{name}"
    d["load"]["duration"] = duration
    steps = cluster.path / "bench"
    steps.mkdir(exist_ok=True)
    f = steps / f"{name}.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return attach_run(f, steps / name, cluster)


def one_round(a: argparse.Namespace, d: dict[str, Any], names: list[str], r: int) -> list[Side]:
    """One cluster with `layered_broker(names, r)` on the layer: warm-up, then the measured load."""
    on = layered_broker(names, r)
    d = {**d, "name": f"bench-powerfs-r{r + 1}", "cluster": {**d["cluster"], "powerfs": [on]}}
    with tempfile.TemporaryDirectory(prefix="rmqchaos-bench-") as td:  # resolved: no `extends:` to find
        f = Path(td) / "bench-powerfs.yaml"
        f.write_text(yaml.safe_dump(d, sort_keys=False))
        run = create_run(f, None, mode="owned")
    say(f"round {r + 1}/{a.rounds}: {on} on the layer; starting its cluster (run directory {run.path})")
    try:
        up.run(run)
        if a.warmup:
            say(f"warm-up: {a.warmup:g} s of load (not counted; a fresh broker is slow at first)")
            load.run(_load_step(run, "warmup", a.warmup))
        step = _load_step(run, "measured", a.duration)
        pids = {n: (_pid(run, n), _pid(run, f"powerfs-{n}") if n == on else None) for n in names}
        before = {n: (cpu_seconds(j), cpu_seconds(s) if s else 0.0) for n, (j, s) in pids.items()}
        load.run(step)
        after = {n: (cpu_seconds(j), cpu_seconds(s) if s else 0.0) for n, (j, s) in pids.items()}
    finally:
        down.run(run)
    got = per_broker(step.path)
    window = max(a.duration, got[""]["window_s"])
    sides = []
    for n in (on, *[x for x in names if x != on]):
        g = got.get(n, {"acked": 0, "attempts": 0, "lat": []})
        lat = sorted(g["lat"])
        sides.append(Side(n, n == on, g["acked"], g["attempts"], window, after[n][0] - before[n][0],
                          after[n][1] - before[n][1], lat[len(lat) // 2] if lat else None, p99(lat)))
    for s in sides:
        say(f"round {r + 1}/{a.rounds} {'layer' if s.layer else 'plain'} {s.broker}: {s.acked}/{s.attempts} acked "
            f"({s.rate:.0f} msg/s), {s.cpu_s:.2f} CPU-s (JVM {s.jvm_s:.2f} + server {s.server_s:.2f}), "
            f"{s.cpu_per_10k:.2f} per 10k acked, p50/p99 {s.p50_ms}/{s.p99_ms} ms")
    return sides


def _ratios(layer: Side | list[Side], plain: Side | list[Side]) -> tuple[float, float]:
    """(acked_rate, acked_per_cpu), layer / plain, over one round or summed over rounds."""
    ls, ps = (layer if isinstance(layer, list) else [layer]), (plain if isinstance(plain, list) else [plain])
    la, pa = sum(s.acked for s in ls), sum(s.acked for s in ps)
    lc, pc = sum(s.cpu_s for s in ls), sum(s.cpu_s for s in ps)
    lw, pw = sum(s.window_s for s in ls), sum(s.window_s for s in ps)
    rate = (la / lw) / (pa / pw) if pa and lw and pw else 0.0
    cpu = (la / lc) / (pa / pc) if pa and lc > 0 and pc > 0 else 0.0
    return rate, cpu


def cmd_bench_powerfs(a: argparse.Namespace) -> int:
    d, names = cluster_scenario(a.scenario, a)
    d["load"]["duration"] = a.duration
    reap_orphans()
    rounds = [one_round(a, d, names, r) for r in range(a.rounds)]
    layer = [s for rs in rounds for s in rs if s.layer]
    plain = [s for rs in rounds for s in rs if not s.layer]
    if not all(s.acked and s.cpu_s > 0 for s in layer + plain):
        raise UserError("a broker acknowledged nothing, or no CPU was measured for it",
                        "see the round lines above and the run directories under runs/")
    per = [_ratios(l, p) for l, p in zip(layer, plain)]
    rate, cpu = _ratios(layer, plain)
    users = d["load"].get("users")
    print(f"powerfs benchmark: {a.rounds} round(s), the layer on " + ", ".join(s.broker for s in layer)
          + f" (ABBA); each a {a.duration:g} s load at {a.rate:g} msg/s of {a.size} B over both brokers "
          f"({users} users, topic {TOPIC}), {a.flush} on both, after {a.warmup:g} s of warm-up")
    print(f"{'':6s} {'acked/attempts':>17s} {'acked msg/s':>12s} {'CPU-s per 10k acked':>20s} {'of it server':>13s} "
          f"{'p50/p99 ms':>11s}   (per broker; latency: the median over the rounds)")
    for name, xs in (("layer", layer), ("plain", plain)):
        acked, att = sum(s.acked for s in xs), sum(s.attempts for s in xs)
        c = sum(s.cpu_s for s in xs)
        print(f"{name:6s} {f'{acked}/{att}':>17s} {acked / sum(s.window_s for s in xs):12.0f} {c / acked * 1e4:20.3f} "
              f"{sum(s.server_s for s in xs) / acked * 1e4:13.3f} "
              f"{'/'.join(f'{statistics.median(v):g}' for v in ([s.p50_ms for s in xs], [s.p99_ms for s in xs])):>11s}")
    print("per-round ratios (layer/plain) acked_rate: " + ", ".join(f"{x:.2f}" for x, _ in per)
          + "; acked_per_cpu: " + ", ".join(f"{y:.2f}" for _, y in per))
    both = sum(s.acked for s in layer + plain) / sum(s.window_s for s in layer)
    print(f"both brokers together acknowledged {both:.0f} msg/s of the {a.rate:g} offered")
    if both < 0.95 * a.rate:
        print("the load fell short of --rate: the cluster (or the load process) is saturated on this host; the "
              "slower side holds the shared users, so compare the latencies and failed attempts, not only acked_rate")
    elif (failed := sum(s.attempts - s.acked for s in layer + plain)) <= 0.001 * sum(s.attempts for s in layer + plain):
        print(f"{'every attempt' if not failed else f'all but {failed} attempt(s)'} acknowledged on both sides: at "
              f"{a.rate:g} msg/s the layer costs CPU, not throughput, so acked_per_cpu is the telling figure "
              "(a higher --rate shows where it starts to cost throughput)")
    print(f"ratio acked_per_cpu={cpu:.2f} acked_rate={rate:.2f} (goal: at least 0.8 of plain)")
    return 0
