"""Pass gates of a pre-release load test, judged on an analyzed run's summary.json.

Every gate is a limit on one measured value; a run whose loss could not be verified (incomplete)
fails whatever its limits, and so does a gate whose value was not measured (no acknowledged send)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.runs import as_run
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir


def _busy_rate(s: dict[str, Any]) -> float | None:
    attempts = s["counts"]["attempts"]
    return round(s["errors"]["by_code"].get("2", 0) / attempts, 6) if attempts else None


#: gate name -> (what it limits, unit, how it is read from the summary)
GATES: dict[str, tuple[str, str, Callable[[dict[str, Any]], float | None]]] = {
    "max_lost": ("acknowledged keys never delivered", "keys", lambda s: s["counts"]["lost"]),
    "max_duplicated": ("keys delivered more than once", "keys", lambda s: s["counts"]["duplicated"]),
    "max_p99_send_ms": ("p99 send latency of acknowledged sends", "ms",
                        lambda s: (s["latency_ms"].get("send") or {}).get("p99")),
    "max_busy_error_rate": ("busy answers (code 2) per attempt", "", _busy_rate),
}


@dataclass
class GateResult:
    gate: str
    limit: float | None  # None: a relative gate whose baseline value was not measured
    measured: float | None
    passed: bool
    what: str
    unit: str

    def line(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        got = "not measured" if self.measured is None else f"{self.measured:g}{u}"
        lim = "unknown (the baseline's value was not measured)" if self.limit is None else f"{self.limit:g}{u}"
        return f"gate {self.gate} ({self.what}): limit {lim}, measured {got}"


def evaluate(run_dir: str | Path | RunDir, gates: dict[str, float | None]) -> dict[str, Any]:
    """The verdict of each gate set (None: not set). Raises UserError for an unknown gate."""
    r = as_run(run_dir)
    unknown = sorted(set(gates) - set(GATES))
    if unknown:
        raise UserError(f"unknown gate(s) {', '.join(unknown)}", f"gates: {', '.join(GATES)}")
    if not r.summary_file.exists():
        raise UserError(f"{r.path} has no analysis", "run the analyze stage first")
    s = json.loads(r.summary_file.read_text())
    results = []
    for name, limit in gates.items():
        if limit is None:
            continue
        what, unit, read = GATES[name]
        v = read(s)
        results.append(GateResult(name, float(limit), v, v is not None and v <= limit, what, unit))
    return {"complete": s["complete"], "incomplete_reasons": s["incomplete_reasons"],
            "passed": bool(s["complete"]) and all(g.passed for g in results),
            "gates": [asdict(g) | {"line": g.line()} for g in results]}


def enforce(run_dir: str | Path | RunDir, gates: dict[str, float | None]) -> dict[str, Any]:
    """evaluate(), and a UserError naming every crossed gate with its limit and measured value."""
    v = evaluate(run_dir, gates)
    crossed = [g["line"] for g in v["gates"] if not g["passed"]]
    if not v["complete"]:
        crossed.insert(0, "run incomplete, loss not verified: " + "; ".join(v["incomplete_reasons"]))
    if crossed:
        raise UserError("pre-release gate crossed: " + " | ".join(crossed), f"see the report of {as_run(run_dir).path}")
    return v


def judge(run_dir: str | Path | RunDir, gates: dict[str, float | None]) -> dict[str, Any]:
    """The pre-release verdict: a UserError if a stage of the run failed, else enforce() the gates."""
    from pipeline.workflows.matrix import failures
    failed = failures(run_dir, signature_misses="flag")  # the gates judge what it found, not its signature
    if failed:
        raise UserError("the run failed: " + "; ".join(failed), f"see the report of {as_run(run_dir).path}")
    return enforce(run_dir, gates)
