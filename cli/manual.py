"""`rmqchaos send` and `rmqchaos consume`: the client layer by hand, bounded in count and time."""
from __future__ import annotations

import argparse
import collections
import json
import signal
import time
from dataclasses import asdict
from pathlib import Path

from cluster import get_backend
from pipeline.runs import namesrv_target
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir

MAX_COUNT = 10_000_000
MAX_TIME_S = 3600.0


def target(a: argparse.Namespace) -> tuple[str, RunDir | None]:
    return namesrv_target(a.namesrv, a.run_dir)


def _bounded(name: str, v: float, hi: float) -> None:
    if not 0 < v <= hi:
        raise UserError(f"--{name} {v:g} is out of range", f"use 1..{hi:g}")


def summarize(results: list) -> list[str]:
    by = collections.Counter()
    for r in results:
        if r.outcome == "ok":
            by[f"ok {r.status}"] += 1
        elif r.outcome == "timeout":
            by["timeout"] += 1
        elif r.code is not None:
            by[f"error code {r.code}: {(r.remark or r.error or '').splitlines()[0][:100]}"] += 1
        else:
            by[f"error: {(r.error or '')[:100]}"] += 1
    return [f"{n:>9}  {k}" for k, n in by.most_common()]


def cmd_send(a: argparse.Namespace) -> int:
    import gevent
    from gevent.pool import Pool
    from rmqclient.admin import RemotingError
    from rmqclient.producer import Producer

    _bounded("count", a.count, MAX_COUNT)
    _bounded("max-time", a.max_time, MAX_TIME_S)
    _bounded("concurrency", a.concurrency, 4096)
    ns, _ = target(a)
    if a.create_topic:
        from rmqclient.admin import AdminClient
        try:
            made = AdminClient(ns).create_topic_everywhere(a.topic, queues=a.queues)
        except RemotingError as e:
            raise UserError(f"cannot create topic {a.topic}: {e}", "is the cluster up? (rmqchaos cluster status)")
        say(f"topic {a.topic} created/updated on {', '.join(made)}")
        time.sleep(0.5)  # brokers register the new topic with namesrv on their next heartbeat or at once
    prod = Producer(ns, group=a.group, timeout=a.timeout)
    body = (b"rmqchaos-" * (a.size // 9 + 1))[: a.size]
    results: list = []
    out = open(a.out, "a") if a.out else None
    deadline = time.monotonic() + a.max_time
    t0 = time.monotonic()

    def one(i: int) -> None:
        if time.monotonic() > deadline:
            return
        r = prod.send(a.topic, body, key=f"{a.key_prefix}{i}", tags=a.tags)
        results.append(r)
        if out:
            out.write(json.dumps(asdict(r), separators=(",", ":")) + "\n")

    def progress() -> None:
        while True:
            gevent.sleep(1.0)
            ok = sum(1 for r in results if r.outcome == "ok")
            dt = time.monotonic() - t0
            say(f"sent {len(results)}/{a.count}: ok {ok}, not ok {len(results) - ok} ({len(results) / dt:.0f}/s)")

    ticker = gevent.spawn(progress)
    try:
        Pool(a.concurrency).map(one, range(a.count))
    finally:
        ticker.kill()
        prod.close()
        if out:
            out.close()
    dt = time.monotonic() - t0
    ok = sum(1 for r in results if r.outcome == "ok")
    print(f"{len(results)} attempts to {a.topic} in {dt:.1f}s ({len(results) / dt:.0f}/s), {ok} acknowledged"
          + ("" if len(results) == a.count else f"; stopped by --max-time {a.max_time:g}s"))
    print("\n".join(summarize(results)))
    if a.out:
        print(f"every attempt: {a.out}")
    return 0 if ok == len(results) == a.count else 3


def cmd_consume(a: argparse.Namespace) -> int:
    from loadgen.consumer import ConsumerOptions, JavaConsumer

    _bounded("duration", a.duration, MAX_TIME_S)
    ns, run = target(a)
    out = Path(a.out) if a.out else Path.cwd() / f"deliveries-{a.group}.jsonl"
    workdir = run.consumers_dir if run else paths.state_home() / "consumers"
    c = JavaConsumer(ns, ConsumerOptions(group=a.group, topics=a.topic, mode=a.mode, batch_size=a.batch_size,
                                         delay_ms=a.delay_ms, duration_s=a.duration, idle_s=a.idle,
                                         consumer_id=a.consumer_id),
                     out, workdir, run_id=run.run_id if run else "",
                     launcher=get_backend(run).spawn_client if run else None,
                     proc_log=run.processes if run else None)
    before = c.deliveries()
    say(f"starting the Java consumer (group {a.group}, topics {', '.join(a.topic)}, mode {a.mode}); "
        f"deliveries go to {out}")
    c.start()
    interrupted = False
    prev = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while c.running():
            time.sleep(2.0)
            say(f"{c.deliveries() - before} deliveries")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, prev)
        summary = c.stop()
    n = c.deliveries() - before
    why = "interrupted" if interrupted else ("idle" if a.idle else "duration reached")
    print(f"{n} deliveries recorded in {out} ({why}; consumer {summary.get('how', '?')}, offsets persisted)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    rd_help = "run directory of the cluster (default: .rmqchaos/default, the one `cluster up` made)"
    s = sub.add_parser("send", help="send messages through the platform's producer, by hand",
                       description="Send COUNT messages (each one attempt, no retries) and print what the "
                                   "brokers answered, grouped by outcome, status, code and remark.")
    s.add_argument("--topic", default="RMQCHAOS_MANUAL")
    s.add_argument("--count", type=int, default=1000, help=f"messages to send (default 1000, at most {MAX_COUNT})")
    s.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    s.add_argument("--concurrency", type=int, default=16, help="sends in flight (default 16)")
    s.add_argument("--timeout", type=float, default=3.0, help="per-attempt timeout in seconds (default 3)")
    s.add_argument("--max-time", type=float, default=120.0, help="stop scheduling sends after this (default 120 s)")
    s.add_argument("--key-prefix", default="manual-", help="business key = prefix + index")
    s.add_argument("--tags")
    s.add_argument("--group", default="rmqchaos_manual_producer", help="producer group")
    s.add_argument("--create-topic", action="store_true", help="create the topic on every master first")
    s.add_argument("--queues", type=int, default=4, help="queues per broker for --create-topic (default 4)")
    s.add_argument("--out", help="append every attempt's result as one JSON line to this file")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--run-dir", help=rd_help)
    g.add_argument("--namesrv", help="namesrv address on loopback, e.g. 127.0.0.1:9876")
    s.set_defaults(fn=cmd_send)

    c = sub.add_parser("consume", help="run the Java receive witness (DefaultMQPushConsumer) by hand",
                       description="Consume with the real Java client, recording every delivery as one "
                                   "JSON line. Stops after --duration, after --idle seconds without "
                                   "a delivery, or on Ctrl-C; offsets are persisted on stop.")
    c.add_argument("--topic", action="append", required=True, help="topic to subscribe (repeatable)")
    c.add_argument("--group", default="rmqchaos_manual_consumer")
    c.add_argument("--mode", choices=["all", "ack_first_of_batch"], default="all",
                   help="all: ack every message; ack_first_of_batch: ackIndex 0 (incident 004's SDK bug)")
    c.add_argument("--batch-size", type=int, default=1, help="consumeMessageBatchMaxSize (default 1)")
    c.add_argument("--delay-ms", type=int, default=0, help="processing time per message (default 0)")
    c.add_argument("--duration", type=float, default=60.0, help="stop after this many seconds (default 60)")
    c.add_argument("--idle", type=float, default=0.0, help="stop after this many seconds without a delivery")
    c.add_argument("--consumer-id", default="manual")
    c.add_argument("--out", help="deliveries file (default ./deliveries-<group>.jsonl; appended)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--run-dir", help=rd_help)
    g.add_argument("--namesrv", help="namesrv address on loopback, e.g. 127.0.0.1:9876")
    c.set_defaults(fn=cmd_consume)
