"""The Python side of `rmqchaos bench producer`: COUNT sends of SIZE bytes with CONCURRENCY greenlets,
each sending one message after another (as the Java benchmark's threads do), no ledger. Prints one
JSON line with the counts; the parent measures wall and CPU time of this whole process.

--mode ordered: each greenlet owns --keys sharding keys, sent in turn, each to the queue its key
hashes to (Producer.send by_hash, as SelectMessageQueueByHash); --mode transactional: a half message
then its commit (END_TRANSACTION, oneway), as TransactionMQProducer with a local transaction that
commits at once. The Java side of these two is io.rmqchaos.SendBench."""
from __future__ import annotations

import argparse
import json
import os
import sys

import gevent
from gevent.pool import Pool

from rmqclient.producer import Producer
from rmqclient.transaction import TransactionalProducer

MODES = ("normal", "ordered", "transactional")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--mode", choices=MODES, default="normal")
    p.add_argument("--keys", type=int, default=4, help="sharding keys per greenlet (--mode ordered)")
    a = p.parse_args(argv)
    prod = (TransactionalProducer(a.namesrv, group="rmqchaos_bench_txn", decide=lambda k, u: "commit", timeout=a.timeout)
            if a.mode == "transactional" else Producer(a.namesrv, group="rmqchaos_bench", timeout=a.timeout))
    prod.route(a.topic)
    body = os.urandom(a.size // 2 + 1).hex()[: a.size].encode()
    share = [a.count // a.concurrency + (1 if i < a.count % a.concurrency else 0) for i in range(a.concurrency)]
    acked = attempts = 0
    codes: dict[str, int] = {}

    def worker(w: int) -> None:
        nonlocal acked, attempts
        for i in range(share[w]):
            shard = f"b{w}-k{i % a.keys}"
            if a.mode == "ordered":
                r = prod.send(a.topic, body, key=f"{shard}~{i}", by_hash=shard)
            elif a.mode == "transactional":
                r = prod.send_half(a.topic, body, key=f"{shard}~{i}")  # type: ignore[attr-defined]
                if r.ok:
                    prod.end(a.topic, r, "commit")  # type: ignore[attr-defined]
            else:
                r = prod.send(a.topic, body, key=f"b{w}-{i}")
            attempts += 1
            if r.ok:
                acked += 1
            else:
                k = f"{r.outcome}:{r.code}"
                codes[k] = codes.get(k, 0) + 1

    Pool(a.concurrency).map(worker, range(a.concurrency))
    prod.close()
    gevent.sleep(0)
    print(json.dumps({"acked": acked, "attempts": attempts, "failures": codes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
