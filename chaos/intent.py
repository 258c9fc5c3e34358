"""What a fault achieved against what it was asked for: the `intent` block of every kind's evidence.

A measure is one thing asked and what was measured of it: a rate (a noise's SET/s), a length (the
seconds a pause froze), a count (rules held, topics deleted) or a yes/no effect (the process died),
which is asked 1 and achieved 0 or 1. The intent is the worst measure's share of its ask; below
SHORT_BELOW the fault fell short, and the analysis names it so in the verdict (analysis/evidence/findings.py
`fault_intents`). A kind measures what it did (the pid gone, the freezer's state, the rules in the
chain, a probe through the proxy), never what it asked for.
"""
from __future__ import annotations

from typing import Any

from rmqchaos.shortfall import SHORT_BELOW



def measure(what: str, where: str, asked: float, achieved: float, words: str = "") -> dict[str, Any]:
    """One thing a fault was asked to do, e.g. ("SET/s", "redis 16379", 200, 12.1) or ("s frozen",
    "broker-a", 5, 1.2, "froze 1.2 of 5 s"). `words`: how it reads in a sentence (the verdict's
    "short of intent: ..." uses the worst measure's)."""
    m = {"what": what, "where": where, "asked": round(float(asked), 3), "achieved": round(float(achieved), 2)}
    return {**m, "words": words} if words else m


def happened(what: str, where: str, ok: bool, words: str) -> dict[str, Any]:
    """A yes/no effect as a measure: asked 1, achieved 1 or 0 (e.g. "died", "pid 4242", ...)."""
    return measure(what, where, 1, 1.0 if ok else 0.0, words)


def num(x: float) -> str:
    """A measured number as the intent's words give it: 200, 16.8, 1.2, 0.01."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def intent(measures: list[dict[str, Any]], label: str, of: str = "measures", note: str = "",
           none: str = "no intended rate to compare with", cliff: bool = False) -> dict[str, Any]:
    """What a fault achieved against what it was asked for, for its evidence: {measures, reached (the
    worst achieved/asked, 3 decimals), short (reached < SHORT_BELOW), words (one phrase)}, and `brief`
    (the worst measure's own words) when the measures carry words. Measures without words read as a
    rate: "<label> reached 6 % of its 200 SET/s (worst of 8 instances: redis 16380)", its first number
    the reached percentage; with words: "<label>: froze 1.2 of 5 s", worst first. `of` names the
    measures ("instances", "jobs"); `note` is appended (e.g. which jobs a byte budget ended). No
    measure: reached None, short False (nothing measured is called neither), `none` says why.
    `cliff`: the effect needs more than the whole ask (a table past a frame limit): short at or below
    100 %, compared on the unrounded measures, instead of below SHORT_BELOW."""
    ms = [m for m in measures if m["asked"] > 0]
    if not ms:
        return {"measures": [], "reached": None, "short": False,
                "words": f"{label}: {none}" + (f"; {note}" if note else "")}
    order = sorted(ms, key=lambda m: m["achieved"] / m["asked"])  # stable: ties keep the kind's order
    worst = order[0]
    reached = round(worst["achieved"] / worst["asked"], 3)
    short = worst["achieved"] <= worst["asked"] if cliff else reached < SHORT_BELOW
    out: dict[str, Any] = {"measures": ms, "reached": reached, "short": short}
    if all(m.get("words") for m in ms):
        out["words"] = f"{label}: " + "; ".join(m["words"] for m in order) + (f"; {note}" if note else "")
        out["brief"] = worst["words"]
        return out
    pct = reached * 100
    where = f"worst of {len(ms)} {of}: {worst['where']}" if len(ms) > 1 else worst["where"]
    out["words"] = (f"{label} reached {pct:.0f}" if pct >= 1 or pct == 0 else f"{label} reached {pct:.1f}") + \
        f" % of its {num(worst['asked'])} {worst['what']} ({where})" + (f"; {note}" if note else "")
    return out
