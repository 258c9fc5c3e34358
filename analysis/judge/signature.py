"""Did a run show what its scenario exists to show? The scenario's `signature:` (rmqchaos/spec/expect.py
`Signature`): conditions on the run's own figures and failover checks, all of which must hold; and
beside them what every run must prove before it can claim anything (`run_checks`): that it finished,
that the generator kept its load's schedule (analysis/reconcile/pace.py: a load the broker held back is a
finding, not a miss), that each fault of the scenario was applied and did what it was asked (its
evidence's `intent`). A scenario with `expect:` (a known upstream bug) is judged by that block
(analysis/judge/expect.py) through the same checks, and its `premise` (the bug's setup) must hold on every
version: "not reproduced, as expected" on a fixed version counts only when the fault took hold and the
setup was there, else the run reads NOT verified.

The result goes into the summary (`signature`), the verdict's first clause, the combined report (misses
first), the nightly's verdict and the run history."""
from __future__ import annotations

from typing import Any

from analysis.judge.expect import failover_evidence
from analysis.judge.figures import evidence as condition_evidence, fault_events
from rmqchaos.spec.expect import Signature

# (fault id or None, kind) of each fault the scenario names: the faults a run must show applied
Planned = list[tuple[str | None, str]]


def fault_shortfalls(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each applied fault occurrence whose evidence says it fell short of what it was asked
    (`intent.short`): {what, holds: False, seen}."""
    out = []
    for e in fault_events(s):
        p = e.get("params") or {}
        intent = (p.get("evidence") or {}).get("intent")
        if isinstance(intent, dict) and intent.get("short"):
            out.append({"what": f"{p.get('fault_id') or p.get('fault_kind')} did what it was asked", "holds": False,
                        "seen": str(intent.get("words") or "short of its intent")})
    return out


def faults_unapplied(s: dict[str, Any], planned: Planned | None) -> list[dict[str, Any]]:
    """Each fault of the scenario with no occurrence applied in this run (no `fault` event ending ok
    under its id, or under its kind for a fault without one): {what, holds: False, seen}. A run that
    did not finish is judged by `complete` instead (its faults may not have come due)."""
    if not planned or s.get("complete") is False:
        return []
    ok = [(e.get("params") or {}) for e in fault_events(s)]
    out = []
    for fid, kind in planned:
        if fid is not None:
            hit = any(p.get("fault_id") == fid or str(p.get("fault_id", "")).startswith(fid + "#") for p in ok)
        else:
            hit = any(p.get("fault_kind") == kind for p in ok)
        if not hit:
            out.append({"what": f"fault {fid or kind} was applied", "holds": False,
                        "seen": "no occurrence of it ended ok in the timeline"})
    return out


def run_checks(s: dict[str, Any], planned: Planned | None = None) -> list[dict[str, Any]]:
    """What any run must prove before its figures say anything: the generator kept the schedule, each
    fault was applied and did what it was asked, the run finished. Evidence the figures are judged beside."""
    out = []
    pace = s.get("load_pace")
    # a load the generator could not keep up is the platform's failure: the broker never saw the load the
    # scenario names. One the broker held back (synchronous users wait for its answers) is a finding of
    # the run, stated in the verdict, not a miss.
    if pace and pace.get("short") and pace.get("generator_bound"):
        out.append({"what": "the generator kept the load's schedule", "holds": False, "seen": pace["words"]})
    out += fault_shortfalls(s) + faults_unapplied(s, planned)
    if s.get("complete") is False:
        out.append({"what": "the run finished", "holds": None,
                    "seen": "; ".join(s.get("incomplete_reasons") or []) or "incomplete"})
    return out


def own_evidence(sig: Signature, s: dict[str, Any]) -> list[dict[str, Any]]:
    """The signature's own conditions and failover checks on a summary, without the run checks: what
    a run without the scenario's fault must fail (tests/test_no_fault_twins.py)."""
    return condition_evidence(sig.conditions, s) + [failover_evidence(fo, s) for fo in sig.failovers]


def evaluate(sig: Signature | None, s: dict[str, Any], planned: Planned | None = None) -> dict[str, Any] | None:
    """{source ('signature' | 'expect'), shows, reached (True / False / None: not verifiable), evidence
    [{what, holds, seen}], misses (the evidence that did not hold, or could not be read), words (the
    verdict's first clause)}; None for a scenario with neither block. `planned`: the scenario's faults
    (each must show applied)."""
    exp = s.get("expect")
    if sig is None and exp:
        return _expect(exp, s, planned)
    if sig is None:
        return None
    evidence = own_evidence(sig, s) + run_checks(s, planned)
    holds = [e["holds"] for e in evidence]
    # a run that did not finish is never NOT reproduced: what it missed may be what it never got to
    reached = None if s.get("complete") is False else False if False in holds else None if None in holds else True
    misses = [e for e in evidence if e["holds"] is not True]
    return {"source": "signature", "shows": sig.shows, "reached": reached, "evidence": evidence, "misses": misses,
            "words": words(reached, misses)}


def _expect(exp: dict[str, Any], s: dict[str, Any], planned: Planned | None) -> dict[str, Any]:
    """A known bug: reached when it came out as this version should, the run's checks held and the bug's
    setup (`premise`) was there. A check or premise that did not hold leaves it NOT verified: "not
    reproduced" beside a fault that never took hold says nothing about the fix."""
    came_out = exp["as_expected"] if exp.get("as_expected") is not None else exp.get("reproduced")
    checks = run_checks(s, planned) + list(exp.get("premise") or [])
    failed = [e for e in checks if e["holds"] is not True]
    reached = None if failed else came_out
    evidence = list(exp["evidence"]) + checks
    misses = failed + ([e for e in exp["evidence"] if e["holds"] is not True] if came_out is not True else [])
    w = exp["words"] if not failed else words(None, failed) + f"; the run otherwise: {exp['words']}"
    return {"source": "expect", "shows": exp["issue"], "reached": reached, "evidence": evidence,
            "misses": misses, "words": w}


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
