"""A bounded Redis write load, run as its own process by the `redis_noise` fault (stdlib only).

usage: redis_driver.py PORTS RATE VALUE_BYTES SECONDS OUT_JSON

One thread per instance sends `SET` at RATE per second, one command at a time and spread evenly,
so with `appendfsync always` each command is its own write + fsync in Redis (Redis fsyncs once per
event-loop turn; pipelined commands would share one). redis-benchmark has no rate limit: flat out,
it measures Redis, and it burns the CPU the broker needs. A driver that falls more than a second
behind (the disk is slow) skips the missed slots instead of bursting. It stops at SECONDS or on
SIGTERM, and writes what it did to OUT_JSON: per instance its SETs, errors, skipped slots, the
slots it was due (`slots`), its active `seconds` (first slot to its end) and `sets_per_s`.
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
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    t_start = time.monotonic()
    until = t_start + seconds
    value = b"v" * size
    results: dict[int, dict] = {p: {} for p in ports}
    threads = [threading.Thread(target=drive, args=(p, rate, value, until, i / (rate * len(ports)), results[p]),
                                daemon=True) for i, p in enumerate(ports)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(0.1)  # the main thread stays free for the SIGTERM handler
    secs = time.monotonic() - t_start
    with open(out_file, "w") as fh:
        json.dump({"seconds": round(secs, 3), "rate_per_instance": rate, "value_bytes": size,
                   "instances": {str(p): r for p, r in results.items()}}, fh)


if __name__ == "__main__":
    main()
