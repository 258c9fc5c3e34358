"""What one load step of a maximum-rate search achieved, read from its own send ledgers (a few
seconds of load: plain Python, no Spark): attempts, acknowledged sends, errors, the achieved rate and
the p99 send latency of the acknowledged sends (nearest rank, as analysis/ledgers/latency.py)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rmqchaos.ledger.journal_read import read_ledger
from rmqchaos.ledger.schema import ledger_files


def p99(values: list[int]) -> int | None:
    """Nearest-rank p99: the smallest value with at least 99 % of the values at or below it."""
    if not values:
        return None
    v = sorted(values)
    return v[math.ceil(len(v) * 99 / 100) - 1]


def measure(run_dir: str | Path, duration_s: float) -> dict[str, Any]:
    """attempts (intents), acked (outcome ok), errors (an error or timeout answer, or no answer at
    all: busy refusals are errors with code 2), busy, error_rate (errors / attempts), achieved_rate
    (acked per second over the step's duration, or over the ledger's window if the load ran longer)
    and p99_send_ms (end - start of the acknowledged sends)."""
    intents: set[tuple[str, int]] = set()
    outcomes: dict[tuple[str, int], dict[str, Any]] = {}
    first, last = None, None
    for f in ledger_files(Path(run_dir), "send"):
        for r in read_ledger(f).records:
            k = (r.get("producer_id"), r.get("attempt_id"))
            if r.get("rec") == "intent":
                intents.add(k)
            elif r.get("rec") == "outcome":
                outcomes[k] = r
                intents.add(k)
            s, e = r.get("start_ms"), r.get("end_ms") or r.get("start_ms")
            if s is not None:
                first = s if first is None else min(first, s)
                last = e if last is None else max(last, e)
    ok = [r for r in outcomes.values() if r.get("outcome") == "ok"]
    attempts = len(intents)
    errors = attempts - len(ok)
    busy = sum(1 for r in outcomes.values() if r.get("outcome") == "error" and r.get("code") == 2)
    window = max(duration_s, ((last - first) / 1000) if first is not None and last is not None else 0.0)
    return {"attempts": attempts, "acked": len(ok), "errors": errors, "busy": busy,
            "error_rate": round(errors / attempts, 6) if attempts else None,
            "achieved_rate": round(len(ok) / window, 1) if window else 0.0,
            "p99_send_ms": p99([r["end_ms"] - r["start_ms"] for r in ok
                                if r.get("end_ms") is not None and r.get("start_ms") is not None])}
