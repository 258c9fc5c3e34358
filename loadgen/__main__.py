"""`python -m loadgen RUN_DIR`: run the scenario's load in this process (the platform's load stage
starts it so), or with --worker, one Locust worker process of a distributed run."""
from __future__ import annotations

import argparse
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadgen", description=__doc__)
    p.add_argument("run_dir")
    p.add_argument("--ledger", choices=["on", "off"], help="override the scenario's load.ledger")
    p.add_argument("--ledger-turns", type=float, default=0.0, metavar="SECONDS",
                   help="(bench ledger --alternate) the ledger on and off in turns of this many seconds")
    p.add_argument("--worker", type=int, help="(internal) worker index of a distributed run")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--master-port", type=int)
    p.add_argument("--deadline", type=float)
    a = p.parse_args(argv)
    # Ctrl-C is the platform's to handle: it ends this process (SIGTERM) as part of its cleanup. An
    # attempt in flight then has an intent without outcome: indeterminate, never lost.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ledger = None if a.ledger is None else a.ledger == "on"
    from loadgen import runner  # imports Locust: monkey-patches this process for gevent
    from rmqchaos.errors import UserError
    try:
        if a.worker is not None:
            runner.run_worker(a.run_dir, a.worker, a.workers, a.master_port, a.deadline, ledger)
        else:
            runner.run_load(a.run_dir, ledger, a.ledger_turns)
    except UserError as e:
        print(f"loadgen: error: {e.line()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
