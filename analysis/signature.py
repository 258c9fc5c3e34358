"""Did a run show what its scenario exists to show? The scenario's `signature:` (rmqchaos/spec/expect.py
`Signature`): conditions on the run's own figures and failover checks, all of which must hold; and
beside them what every run must prove before it can claim anything: that it finished, that the
generator kept its load's schedule (analysis/pace.py: a load the broker held back is a finding, not a
miss) and that each fault did what it was asked (its evidence's `intent`). A scenario with `expect:` (a known upstream bug) is judged by that block instead
(analysis/expect.py): its signature is reached when the run came out as that version should.

The result goes into the summary (`signature`), the verdict's first clause, the combined report (misses
first), the nightly's verdict and the run history."""
from __future__ import annotations

from typing import Any

from analysis.expect import failover_evidence
from analysis.figures import evidence as condition_evidence
from rmqchaos.spec.expect import Signature


def fault_shortfalls(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each applied fault occurrence whose evidence says it fell short of what it was asked
    (`intent.short`): {what, holds: False, seen}."""
    out = []
    for e in s.get("events", []):
        p = e.get("params") or {}
        intent = (p.get("evidence") or {}).get("intent")
        if e.get("kind") == "fault" and e.get("outcome") == "ok" and isinstance(intent, dict) and intent.get("short"):
            out.append({"what": f"{p.get('fault_id') or p.get('fault_kind')} did what it was asked", "holds": False,
                        "seen": str(intent.get("words") or "short of its intent")})
    return out


def evaluate(sig: Signature | None, s: dict[str, Any]) -> dict[str, Any] | None:
    """{source ('signature' | 'expect'), shows, reached (True / False / None: not verifiable), evidence
    [{what, holds, seen}], misses (the evidence that did not hold, or could not be read), words (the
    verdict's first clause)}; None for a scenario with neither block."""
    exp = s.get("expect")
    if sig is None and exp:  # a known bug: reached when it came out as this version should
        reached = exp["as_expected"] if exp.get("as_expected") is not None else exp.get("reproduced")
        return {"source": "expect", "shows": exp["issue"], "reached": reached, "evidence": exp["evidence"],
                "misses": [e for e in exp["evidence"] if e["holds"] is not True] if reached is not True else [],
                "words": exp["words"]}
    if sig is None:
        return None
    evidence = condition_evidence(sig.conditions, s) + [failover_evidence(fo, s) for fo in sig.failovers]
    pace = s.get("load_pace")
    # a load the generator could not keep up is the platform's failure: the broker never saw the load the
    # scenario names. One the broker held back (synchronous users wait for its answers) is a finding of
    # the run, stated in the verdict, not a miss.
    if pace and pace.get("short") and pace.get("generator_bound"):
        evidence.append({"what": "the generator kept the load's schedule", "holds": False, "seen": pace["words"]})
    evidence += fault_shortfalls(s)
    if s.get("complete") is False:
        evidence.append({"what": "the run finished", "holds": None,
                         "seen": "; ".join(s.get("incomplete_reasons") or []) or "incomplete"})
    holds = [e["holds"] for e in evidence]
    # a run that did not finish is never NOT reproduced: what it missed may be what it never got to
    reached = None if s.get("complete") is False else False if False in holds else None if None in holds else True
    misses = [e for e in evidence if e["holds"] is not True]
    return {"source": "signature", "shows": sig.shows, "reached": reached, "evidence": evidence, "misses": misses,
            "words": words(reached, misses)}


def words(reached: bool | None, misses: list[dict[str, Any]]) -> str:
    """'reproduced', 'NOT reproduced: busy > 0 (busy = 0)', or 'NOT verified: the run finished (...)'."""
    if reached:
        return "reproduced"
    head = "NOT reproduced" if reached is False else "NOT verified"
    shown = [m for m in misses if m["holds"] is False] + [m for m in misses if m["holds"] is None]
    return head + ": " + "; ".join(f"{'unknown: ' if m['holds'] is None else ''}{m['what']} ({m['seen']})"
                                   for m in shown)


def missed(s: dict[str, Any]) -> bool:
    """Whether a run's summary says it did not reach its signature (or could not verify it)."""
    sig = s.get("signature")
    return bool(sig) and sig.get("reached") is not True
