"""The Python side of `rmqchaos bench producer`: COUNT sends of SIZE bytes with CONCURRENCY greenlets,
each sending one message after another (as the Java benchmark's threads do), no ledger. Prints one
JSON line with the counts; the parent measures wall and CPU time of this whole process."""
from __future__ import annotations

import argparse
import json
import os
import sys

import gevent
from gevent.pool import Pool

from rmqclient.producer import Producer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=3.0)
    a = p.parse_args(argv)
    prod = Producer(a.namesrv, group="rmqchaos_bench", timeout=a.timeout)
    prod.route(a.topic)
    body = os.urandom(a.size // 2 + 1).hex()[: a.size].encode()
    share = [a.count // a.concurrency + (1 if i < a.count % a.concurrency else 0) for i in range(a.concurrency)]
    acked = attempts = 0
    codes: dict[str, int] = {}

    def worker(w: int) -> None:
        nonlocal acked, attempts
        for i in range(share[w]):
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
