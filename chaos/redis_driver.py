"""A bounded Redis write load, run as its own process by the `redis_noise` fault (stdlib only).

usage: redis_driver.py PORTS RATE VALUE_BYTES SECONDS OUT_JSON [CONNECTIONS]

Each instance gets CONNECTIONS clients (default 1), one thread each, that together send `SET` at
RATE per second: each client one command at a time, at RATE / CONNECTIONS, the clients' slots
interleaved evenly. So with `appendfsync always` a command that arrives alone is its own write +
fsync in Redis; commands of several clients that arrive while Redis is busy share one (Redis fsyncs
once per event-loop turn), as an application's clients do. One client per instance cannot send its
next SET before its previous reply, so its rate is capped by the round trip: on a host whose other
core is busy, every wakeup waits, and one client reached 76 % of 150 or 200 SET/s. redis-benchmark
has no rate limit: flat out, it measures Redis, and it burns the CPU the broker needs. A client that
falls more than a second behind (the disk is slow) skips the missed slots instead of bursting. It
stops at SECONDS or on SIGTERM, and writes what it did to OUT_JSON: per instance its SETs, errors,
skipped slots, the slots it was due (`slots`), its active `seconds` (first slot to its end, the
longest of its clients), `sets_per_s` and `connections`.
"""
from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time

stop = threading.Event()


def drive(port: int, rate: float, value: bytes, until: float, offset: float, out: dict) -> None:
    sets = errors = skipped = 0
    worst = 0.0
    t0 = time.monotonic() + offset
    n = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            f = s.makefile("rb")
            while not stop.is_set():
                due = t0 + n / rate
                now = time.monotonic()
                if due >= until:
                    break
                if due > now:
                    if stop.wait(due - now):
                        break
                elif now - due > 1.0:
                    behind = int((now - t0) * rate) - n
                    skipped, n = skipped + behind, n + behind
                key = b"noise:%d" % (n % 100_000)
                t = time.monotonic()
                s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value))
                reply = f.readline()
                worst = max(worst, time.monotonic() - t)
                if reply.startswith(b"+OK"):
                    sets += 1
                else:
                    errors += 1
                n += 1
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    secs = max(0.0, time.monotonic() - t0)
    out.update(sets=sets, errors=errors, skipped=skipped, slots=n, seconds=round(secs, 3),
               sets_per_s=round(sets / secs, 2) if secs > 0 else 0.0, max_reply_ms=round(worst * 1000, 1))


def main() -> None:
    ports = [int(p) for p in sys.argv[1].split(",")]
    rate, size, seconds, out_file = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    conns = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    t_start = time.monotonic()
    until = t_start + seconds
    value = b"v" * size
    per_conn = rate / conns
    slots = len(ports) * conns  # every client of every instance gets its own offset within 1/rate
    results: dict[int, list[dict]] = {p: [{} for _ in range(conns)] for p in ports}
    threads = [threading.Thread(target=drive, args=(p, per_conn, value, until, (c * len(ports) + i) / (rate * slots),
                                                    results[p][c]), daemon=True)
               for i, p in enumerate(ports) for c in range(conns)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(0.1)  # the main thread stays free for the SIGTERM handler
    secs = time.monotonic() - t_start
    with open(out_file, "w") as fh:
        json.dump({"seconds": round(secs, 3), "rate_per_instance": rate, "value_bytes": size, "connections": conns,
                   "instances": {str(p): combine(r) for p, r in results.items()}}, fh)


def combine(clients: list[dict]) -> dict:
    """One instance's clients as one: counts summed, its active time the longest client's."""
    out: dict = {"connections": len(clients)}
    for k in ("sets", "errors", "skipped", "slots"):
        out[k] = sum(c.get(k, 0) for c in clients)
    out["seconds"] = max((c.get("seconds", 0.0) for c in clients), default=0.0)
    out["sets_per_s"] = round(out["sets"] / out["seconds"], 2) if out["seconds"] > 0 else 0.0
    out["max_reply_ms"] = max((c.get("max_reply_ms", 0.0) for c in clients), default=0.0)
    errs = [c["error"] for c in clients if "error" in c]
    if errs:
        out["error"] = errs[0] if len(errs) == 1 else f"{errs[0]} (and {len(errs) - 1} more clients)"
    return out


if __name__ == "__main__":
    main()
