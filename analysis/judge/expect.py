"""Whether a run reproduced the known bug its scenario's `expect:` block describes
(rmqchaos/spec/expect.py): every condition on the summary's figures, every probe of the live
cluster (cluster/watch/end_probes.py, taken before `down`) and every failover check (on summary.failover,
analysis/replication/failover.py) must hold. The result goes into the summary
(`expect`) and the verdict sentence; a run on a version the bug was reported on that does not
reproduce it, or one on a fixed version that does, is `as_expected: false`: a failure of the
platform (or news about the fix), never a pass."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.judge.figures import evidence as condition_evidence
from rmqchaos.spec.expect import Expect, FailoverCheck


def read_probes(f: Path) -> list[dict[str, Any]] | None:
    """The probes a run took (None: not taken, e.g. the cluster never came up)."""
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def evaluate(expect: Expect, summary: dict[str, Any], probes: list[dict[str, Any]] | None,
             version: str) -> dict[str, Any]:
    """{issue, version, expected ('reproduced' on a shows_on version, 'not reproduced' on a gone_in
    one, None otherwise), reproduced (True / False / None: some evidence could not be read and the
    rest holds), as_expected, evidence [{what, holds, seen}], words (the verdict's clause)}."""
    evidence = condition_evidence(expect.conditions, summary)
    by_index = {p.get("probe"): p for p in probes or []}
    for i, p in enumerate(expect.probes):
        got = by_index.get(i)
        evidence.append({"what": p.words(), "holds": got.get("holds") if got else None,
                         "seen": (got.get("seen") or got.get("error")) if got else "probe not taken: the cluster "
                                                                                   "was not up at the end of the run"})
    evidence += [failover_evidence(fo, summary) for fo in expect.failovers]
    holds = [e["holds"] for e in evidence]
    reproduced = False if False in holds else None if None in holds else True
    expected = "reproduced" if version in expect.shows_on else "not reproduced" if version in expect.gone_in else None
    as_expected = None if reproduced is None or expected is None else (reproduced == (expected == "reproduced"))
    return {"issue": expect.issue, "version": version, "shows_on": expect.shows_on, "gone_in": expect.gone_in,
            "expected": expected, "reproduced": reproduced, "as_expected": as_expected, "evidence": evidence,
            # the bug's setup: analysis/judge/signature.py counts the run only when it held
            "premise": [{**e, "what": f"the bug's setup: {e['what']}"}
                        for e in condition_evidence(expect.premise, summary)],
            "words": words(expect.issue, version, reproduced, expected, evidence)}


def failover_evidence(fo: FailoverCheck, summary: dict[str, Any]) -> dict[str, Any]:
    """Whether a node other than the one the fault hit was master within fo.elected_within of it
    (summary.failover.failovers: the monitor's per-second groups record), for every occurrence of the
    fault (a repeated fault's are `<id>#1`, `<id>#2`, ...): holds when each holds, false when one does
    not, unknown otherwise. Not elected counts only when the monitor watched the group that long after
    the fault; else unknown."""
    fos = (summary.get("failover") or {}).get("failovers") or []
    mine = [x for x in fos if x.get("fault_id") == fo.fault or str(x.get("fault_id", "")).startswith(fo.fault + "#")]
    if not mine:
        why = "no replicated group in this run" if not summary.get("failover") else \
            f"fault {fo.fault} hit no node of a replicated group (or was not applied)"
        return {"what": fo.words(), "holds": None, "seen": f"no failover record: {why}"}
    each = [_one_failover(fo, f) for f in mine]
    holds = [h for h, _ in each]
    verdict = False if False in holds else None if None in holds else True
    return {"what": fo.words(), "holds": verdict, "seen": "; ".join(seen for _, seen in each)}


def _one_failover(fo: FailoverCheck, f: dict[str, Any]) -> tuple[bool | None, str]:
    elected, seen = _elected(fo, f)
    if not fo.first_ack_between:
        return elected, seen
    lo, hi = fo.first_ack_between
    ack = f.get("first_ack_any_s")
    if ack is None:
        return (False if elected is not None else None), seen + "; " + str(
            (f.get("reasons") or {}).get("first_ack_any") or "no ack after the fault")
    in_range = lo <= ack <= hi
    both = False if False in (elected, in_range) else None if elected is None else True
    return both, seen + f"; first ack {ack:g} s after it ({f.get('first_ack_any_node')})"


def _elected(fo: FailoverCheck, f: dict[str, Any]) -> tuple[bool | None, str]:
    el, observed, old, fid = f.get("election_s"), f.get("observed_s"), f.get("old_master"), f.get("fault_id")
    elected = el is not None and el <= fo.elected_within
    if el is not None:
        seen = f"{f.get('new_master')} master {el:g} s after fault {fid} on {old} (epoch {f.get('epoch')})"
    else:
        seen = (f.get("reasons") or {}).get("election") or f"no node other than {old} was master"
    if not elected and (observed is None or observed < fo.elected_within):
        return None, f"{seen}; the monitor watched {f.get('group')} for {observed} s only"
    return elected == (fo.reproduced_when == "elected"), seen


def words(issue: str, version: str, reproduced: bool | None, expected: str | None,
          evidence: list[dict[str, Any]]) -> str:
    """e.g. 'reproduced apache/rocketmq#9403 on 5.3.3, as expected (a version it was reported on):
    topic T absent from broker-a-s (broker-a-s holds 9 topics, T not among them)'."""
    name = issue_name(issue)
    head = {True: "reproduced", False: "did not reproduce", None: "could not tell whether it reproduced"}[reproduced]
    if expected is not None and reproduced is not None:
        ok = reproduced == (expected == "reproduced")
        head += f" {name} on {version}, " + ("as expected" if ok else "NOT as expected") + \
            (" (a version it was reported on)" if expected == "reproduced" else " (a version with the fix)")
    elif reproduced is not None:
        head += f" {name} on {version} (a version upstream reports nothing for: a measurement, not a judgment)"
    else:
        head += f" {name} on {version}"
    shown = [e for e in evidence if e["holds"] is not True] if reproduced is not True else evidence
    return head + ": " + ", ".join(_clause(e) for e in shown)


def _clause(e: dict[str, Any]) -> str:
    """One piece of evidence: 'topic T absent from broker-a-s (broker-a-s holds 13 topics, T not
    among them)', 'not lost > 0 (lost = 0)', 'unknown: ... (why)'."""
    return {True: "", False: "not ", None: "unknown: "}[e["holds"]] + f"{e['what']} ({e['seen']})"


def issue_name(url: str) -> str:
    """https://github.com/apache/rocketmq/issues/9403 -> apache/rocketmq#9403 (else the URL)."""
    parts = url.rstrip("/").split("/")
    if len(parts) >= 7 and parts[2] == "github.com" and parts[5] in ("issues", "pull"):
        return f"{parts[3]}/{parts[4]}#{parts[6]}"
    return url
