"""`make test-flaky N=5`: the real tier as `make test` runs it (every test neither fast, long nor
alone, on two workers: scripts/test.sh) N times, then each test's failure rate over those N sessions
(tests/_outcomes.py reads the JSON file each session wrote).

A session with failures is a result, not an error: all N run. Ctrl-C (pytest then stops as it
does) or a session that ends with no result (collection or usage errors) stops the loop; the
report covers the sessions so far. Exit status 1 if any test failed in any session (or a
session did not end with a result), after the report; 0 otherwise.

usage: scripts/test_flaky.py N [pytest arguments, default: -m "not fast and not long and not alone" -n 2 --dist loadgroup tests]
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import _outcomes  # noqa: E402

TIER = ["-m", "not fast and not long and not alone", "-n", "2", "--dist", "loadgroup", "tests"]


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    n, args = int(argv[0]), argv[1:] or TIER
    out = REPO / ".cache" / "test-runs" / f"flaky-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}"
    out.mkdir(parents=True)
    env = {**os.environ, _outcomes.ENV: str(out)}
    cmd = [sys.executable, "-m", "pytest", "-q", *args]
    stopped: list[int] = []
    # Ctrl-C reaches pytest too (the terminal's process group): it tears its clusters down and exits 2;
    # this process only notes it (a handler, not SIG_IGN, which pytest would inherit)
    signal.signal(signal.SIGINT, lambda signum, frame: stopped.append(signum))
    for i in range(1, n + 1):
        print(f"== session {i}/{n}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.Popen(cmd, cwd=REPO, env=env).wait()
        print(f"== session {i}/{n}: exit {rc} in {time.monotonic() - t0:.0f} s", flush=True)
        if stopped or rc not in (0, 1):  # interrupted, or collection/usage errors N more would repeat
            print(f"== stopped after session {i}/{n}: the report covers the sessions so far", flush=True)
            break
    files = sorted(out.glob("*.json"))
    print(f"\n== failure rates ({len(files)} sessions, {out}):")
    return _outcomes.report(files)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
