"""The command line of `rmqchaos bench …`: one sub-command per benchmark (bench/__init__.py lists
them), its arguments checked as it parses them.
"""
from __future__ import annotations

import argparse

from bench import analyze, ledger, locust, powerfs, producer
from bench.load import UNPACED
from rmqchaos.machine import paths


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


def _seconds(lo: float, hi: float):  # type: ignore[no-untyped-def]
    def parse(v: str) -> float:
        try:
            t = float(v[:-1] if v.endswith("s") else v)
        except ValueError:
            t = -1.0
        if not lo <= t <= hi:
            raise argparse.ArgumentTypeError(f"{v}: expected {lo:g} to {hi:g} seconds")
        return t
    return parse


def _positive(hi: int):  # type: ignore[no-untyped-def]
    def parse(v: str) -> int:
        n = int(v) if v.isdigit() else 0
        if not 1 <= n <= hi:
            raise argparse.ArgumentTypeError(f"{v}: expected a whole number from 1 to {hi}")
        return n
    return parse


def _cluster_args(p: argparse.ArgumentParser, default: str | None = "smoke.yaml",
                  says: str = "scenarios/smoke.yaml") -> argparse._MutuallyExclusiveGroup:
    """Which cluster a benchmark measures: one it starts from --scenario, or a running one."""
    p.add_argument("--scenario", default=str(paths.REPO / "scenarios" / default) if default else None,
                   help=f"cluster to start for the benchmark (default {says})")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run-dir", help="use the running cluster of this run directory instead")
    return g


def add_parsers(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks that print ratios measured side by side")
    bsub = b.add_subparsers(dest="bench", required=True)
    p = bsub.add_parser("producer", help="the platform's producer vs RocketMQ's benchmark Producer",
                        description=producer.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    p.add_argument("--messages", type=int, default=200000, help="messages per process per round (default 200000)")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--concurrency", type=int, default=32, help="sends in flight / Java threads (default 32)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound per process run (default 300 s)")
    p.add_argument("--mode", choices=producer.MODES, default="normal",
                   help="normal (against RocketMQ's benchmark Producer), ordered (sharding keys hashed over the "
                        "queues) or transactional (half message, then commit), the last two against the Java "
                        "client's own API (io.rmqchaos.SendBench); grpc (the platform's gRPC load through the "
                        "proxy against the 5.x Java client alone); default normal")
    _cluster_args(p, None, "scenarios/smoke.yaml; scenarios/grpc-control.yaml with --mode grpc").add_argument(
        "--namesrv", help="use the running cluster with this namesrv (loopback) instead")
    p.set_defaults(fn=producer.cmd_bench_producer)
    pf = bsub.add_parser("powerfs", help="a broker with its store on the powerfs layer vs one on a plain directory",
                         description=powerfs.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pf.add_argument("--rate", type=_rate, default=1000.0,
                    help="messages/s of the load, both brokers together (default 1000, power-loss-async's rate); "
                         "raise it to see where the layer starts to cost throughput")
    pf.add_argument("--duration", type=_seconds(1, 3600), default=30.0,
                    help="seconds of each measured load (default 30)")
    pf.add_argument("--warmup", type=_seconds(0, 600), default=10.0,
                    help="seconds of uncounted load before each measured one (default 10; 0: none)")
    pf.add_argument("--rounds", type=_positive(20), default=2,
                    help="rounds, each a cluster of its own; the broker on the layer alternates ABBA (default 2)")
    pf.add_argument("--size", type=_positive(4 * 1024 * 1024), default=1024, help="message body bytes (default 1024)")
    pf.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                    help="flushDiskType of both brokers (default ASYNC_FLUSH, RocketMQ's default)")
    pf.add_argument("--scenario", default=str(paths.REPO / "scenarios" / "power-loss-async.yaml"),
                    help="the cluster (two broker groups) and the load's users, timeout and policy "
                         "(default scenarios/power-loss-async.yaml: 60 users, no retry)")
    pf.set_defaults(fn=powerfs.cmd_bench_powerfs)
    an = bsub.add_parser("analyze", help="Spark analyze vs a DuckDB reference on synthetic ledgers",
                         description=analyze.cmd_bench_analyze.__doc__)
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
    an.set_defaults(fn=analyze.cmd_bench_analyze)
    for name, fn, hlp, msgs, rounds in (("ledger", ledger.cmd_bench_ledger,
                                         "the same Locust load with the send ledger on and off", 50000, 4),
                                        ("locust", locust.cmd_bench_locust, "Locust-driven producer vs the bare producer",
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
