"""Regression flags: one run's result against its own scenario's trailing runs in the history
(analysis/history/history.py rows), by a stated rule (docs/history.md, "Regression flags"). Pure: rows in,
flags out; nothing here reads the history file or decides a DAG's state.

The rule (`Rule`):
- the baseline is the scenario's last `nights` complete runs that started before this one (an
  unfinished run verified no loss, so it is neither judged nor part of a baseline);
- **new loss**: this run lost acknowledged messages and none of its baseline runs (at least
  `min_nights_loss` of them) lost any: a regression of a zero-loss scenario, the one kind that fails
  a nightly (`fails`);
- **beyond the spread**: a count, rate or latency above the baseline's maximum by more than the
  largest of `spread_k` x (max - min), `rel` x max and the figure's absolute floor (`FLOORS`), with at
  least `min_nights` baseline values. Only upward: fewer losses or a faster p99 is not a regression.
  A lossy scenario that loses more than usual is flagged this way, as a finding, not a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# figure -> (words, absolute floor of the margin): a night must exceed the trailing maximum by at
# least this much, so that a run of identical nights (spread 0) does not flag noise-level moves
FLOORS: dict[str, tuple[str, float]] = {
    "lost": ("lost acknowledged messages", 10),
    "duplicated": ("duplicated keys", 10),
    "indeterminate": ("indeterminate keys", 10),
    "corrupted_deliveries": ("damaged deliveries", 0),
    "busy_rate": ("share of sends refused busy", 0.005),
    "send_p99_ms": ("p99 send latency (ms)", 50),
    "intended_p99_ms": ("p99 latency from the intended send time (ms)", 50),
    "e2e_p99_ms": ("p99 end-to-end latency (ms)", 50),
    "max_rto_s": ("longest recovery after a fault (s)", 2),
}


@dataclass(frozen=True)
class Rule:
    nights: int = 14           # the baseline: this many of the scenario's latest complete runs before this one
    min_nights: int = 3        # fewer baseline values than this: no spread flag for that figure
    min_nights_loss: int = 1   # "has never lost" needs at least this many baseline runs
    spread_k: float = 0.5      # margin: k x the baseline's range (max - min) ...
    rel: float = 0.25          # ... or this share of its maximum ...
    floors: dict[str, float] = field(default_factory=lambda: {k: f for k, (_, f) in FLOORS.items()})  # ... or this

    def margin(self, figure: str, lo: float, hi: float) -> float:
        return max(self.spread_k * (hi - lo), self.rel * abs(hi), self.floors.get(figure, 0.0))

    def words(self) -> str:
        return (f"against the scenario's last {self.nights} complete runs: any loss where none of them lost (at least "
                f"{self.min_nights_loss}); a figure above their maximum by more than max({self.spread_k:g} x their "
                f"range, {self.rel:.0%} of their maximum, the figure's floor), with at least {self.min_nights} of them")


def baseline(current: dict[str, Any], rows: list[dict[str, Any]], rule: Rule = Rule()) -> list[dict[str, Any]]:
    """The scenario's last `rule.nights` complete runs that started before `current`, oldest first."""
    before = [r for r in rows if r["scenario"] == current["scenario"] and r["run_id"] != current["run_id"]
              and r.get("complete") is True and r.get("started_ms") is not None
              and current.get("started_ms") is not None and r["started_ms"] < current["started_ms"]]
    return sorted(before, key=lambda r: (r["started_ms"], r["run_id"]))[-rule.nights:]


def regressions(current: dict[str, Any], rows: list[dict[str, Any]], rule: Rule = Rule()) -> dict[str, Any]:
    """current: a history row; rows: the history (any scenarios; `current` may be among them).
    Returns {run_id, scenario, baseline (run ids), flags: [{figure, kind ('new_loss' | 'spread'),
    value, baseline {n, min, max}, limit, fails, words}], fails (a new loss: the nightly fails),
    notes (why something was not judged, settings that changed)}."""
    base = baseline(current, rows, rule)
    out: dict[str, Any] = {"run_id": current["run_id"], "scenario": current["scenario"],
                           "baseline": [r["run_id"] for r in base], "flags": [], "fails": False, "notes": [],
                           "rule": rule.words()}
    if current.get("complete") is not True:
        out["notes"].append("this run did not finish: loss not verified, nothing judged")
        return out
    if not base:
        out["notes"].append("no earlier complete run of this scenario: nothing to compare with")
        return out
    digests = {r.get("settings_digest") for r in base}
    if current.get("settings_digest") not in digests or len(digests) > 1:
        out["notes"].append("the scenario's settings differ between this run and its baseline (settings digest)")
    short = [x for x in current.get("noise") or [] if x.get("short")]
    if short:
        out["notes"].append("its noise fell short of its intent: " + "; ".join(str(x.get("words") or x["fault_kind"])
                                                                              for x in short))
    lost = current.get("lost") or 0
    new_loss = lost > 0 and len(base) >= rule.min_nights_loss and all((r.get("lost") or 0) == 0 for r in base)
    if new_loss:
        out["flags"].append({"figure": "lost", "kind": "new_loss", "value": lost,
                             "baseline": {"n": len(base), "min": 0, "max": 0}, "limit": 0, "fails": True,
                             "words": f"lost {lost} acknowledged message(s) in a scenario that lost none in its "
                                      f"last {len(base)} complete run(s)"})
    for fig, (what, _) in FLOORS.items():
        x = current.get(fig)
        vals = [r[fig] for r in base if r.get(fig) is not None]
        if x is None or len(vals) < rule.min_nights or (fig == "lost" and new_loss):
            continue
        lo, hi = min(vals), max(vals)
        limit = hi + rule.margin(fig, lo, hi)
        if x > limit:
            out["flags"].append({"figure": fig, "kind": "spread", "value": x,
                                 "baseline": {"n": len(vals), "min": lo, "max": hi}, "limit": round(limit, 6),
                                 "fails": False,
                                 "words": f"{what} {_num(x)}, beyond its last {len(vals)} runs' {_num(lo)}..{_num(hi)} "
                                          f"(limit {_num(limit)})"})
    out["fails"] = any(f["fails"] for f in out["flags"])
    return out


def flag_line(judged: dict[str, Any], flag: dict[str, Any]) -> str:
    """One flag of a `regressions` result on one line: the scenario, the run, the figure, its value
    and the range it left (the nightly verdict's log, the report)."""
    kind = "REGRESSION of a zero-loss scenario" if flag["fails"] else "beyond its range"
    return f"{judged['scenario']} (run {judged['run_id']}): {kind}: {flag['words']}"


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
