"""The sentences that compare runs: neighbours in the report that differ only in the settings that
decide loss, and each remedy (a scenario that `extends:` another) against its base when both are in
the report: what changed, and what it did to what the base found."""
from __future__ import annotations

from typing import Any

from analysis.evidence.findings import NONE, busy_refusals, lasting_outages, outage_seconds
from analysis.report.verdict import faults_phrase, lost_phrase, settings, share, short_intents

# broker.conf keys that name or place a node, not how it behaves (cluster/plan/nodes.py)
IDENTITY = ("brokerClusterName", "brokerName", "brokerId", "listenPort", "haListenPort", "namesrvAddr",
            "brokerIP1", "brokerIP2", "bindAddress")
ARROW = " \u2192 "


def comparisons(sums: list[dict[str, Any]]) -> list[str]:
    """The neighbours' sentences (`loss_pairs`), then one per remedy and its base (`remedy`) that the
    first did not already compare."""
    first = list({s["scenario"]: s for s in reversed(sums)}.values())[::-1]  # each scenario's first run
    out, compared = [], set()
    for a, b, sentence in loss_pairs(first):
        out.append(sentence)
        compared |= {(a, b), (b, a)}
    by_name = {s["scenario"]: s for s in first}
    for s in first:
        base = by_name.get(s.get("extends") or "")
        if base is None or base is s or (base["scenario"], s["scenario"]) in compared:
            continue
        if base.get("complete") is False or s.get("complete") is False:
            continue  # an unfinished run is compared with nothing
        out.append(remedy(base, s))
    return out


def loss_pairs(first: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(a, b, sentence) per pair of different scenarios, taken in order, that had the same faults and
    differ in at most three of the settings that decide loss: the difference, and what each lost."""
    out = []
    for a, b in zip(first, first[1:]):
        if faults_phrase(a) != faults_phrase(b) or a.get("complete") is False or b.get("complete") is False:
            continue
        remedies = b.get("extends") and b["extends"] in (a["scenario"], a.get("extends"))
        if remedies and not (a["counts"]["lost"] or b["counts"]["lost"]):
            continue  # neither lost: each remedy's own sentence says what the change did (timeouts, duplicates)
        sa, sb = settings(a), settings(b)
        diff = [k for k in sa if sa[k] != sb[k]]
        if not 0 < len(diff) <= 3:
            continue
        d = ", ".join(f"{k}={sa[k]}" for k in diff)
        other = ", ".join(f"{k}={sb[k]}" for k in diff)
        under = f"Under {faults_phrase(a)}" if faults_phrase(a) else "Without faults"
        out.append((a["scenario"], b["scenario"], f"{under}: with {d} ({a['scenario']}) the cluster {lost_phrase(a)}; "
                                                  f"with {other} ({b['scenario']}), {b['counts']['lost']}."))
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, str]:
    if not isinstance(d, dict):
        return {prefix: str(d)}
    out: dict[str, str] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def changes(base: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """What a run changed against its base, e.g. 'waitTimeMillsInSendQueue 50 → 750', 'send policy
    no_retry → java_default', 'faults: … → none': broker.conf keys (each key's values over the
    brokers), the load section, and the faults applied (named as asked)."""
    def conf(x: dict[str, Any]) -> dict[str, str]:
        nodes = list((x.get("cluster") or {}).get("brokers", {}).values())
        keys = {k for c in nodes for k in c if k not in IDENTITY and not k.startswith("storePath")}
        return {k: "/".join(sorted({c.get(k, "unset") for c in nodes})) for k in keys}
    out = []
    ca, cb = conf(base), conf(s)
    out += [f"{k} {ca.get(k, 'unset')}{ARROW}{cb.get(k, 'unset')}" for k in sorted(set(ca) | set(cb))
            if ca.get(k, "unset") != cb.get(k, "unset")]
    la, lb = _flat(base.get("load") or {}), _flat(s.get("load") or {})
    words = {"policy.kind": "send policy"}
    out += [f"{words.get(k, k)} {la.get(k, 'unset')}{ARROW}{lb.get(k, 'unset')}" for k in sorted(set(la) | set(lb))
            if la.get(k, "unset") != lb.get(k, "unset")]
    fa, fb = faults_phrase(base, intent=False), faults_phrase(s, intent=False)
    if fa != fb:
        out.append(f"faults: {fa or 'none'}{ARROW}{fb or 'none'}")
    return out


def _busy(s: dict[str, Any]) -> str:
    b = busy_refusals(s)
    return f"{b['total']:,} of {b['attempts']:,} ({share(b['total'], b['attempts'])})"


def _outage(s: dict[str, Any]) -> str:
    out = lasting_outages(s)
    return " + ".join(f"{o['broker']} {outage_seconds(o, s)} s" for o in out) if out else "none"


def _timeouts(s: dict[str, Any]) -> int:
    return int(((s.get("errors") or {}).get("by_outcome") or {}).get("timeout", 0))


def _p99(s: dict[str, Any]) -> Any:
    p = ((s.get("latency_ms") or {}).get("send_from_intended") or {}).get("p99")
    return NONE if p is None else f"{p:,.0f}" if isinstance(p, (int, float)) else p


def remedy(base: dict[str, Any], s: dict[str, Any]) -> str:
    """One sentence: a run against its base, what changed, and what it did to the refusals (count and
    rate), the timed-out attempts and the keys delivered though their sends failed, loss, duplication,
    the route outages and the p99 send latency from the intended time, base first; a fault (a noise) short
    of its intent is said so, not taken for the named one."""
    ch = changes(base, s)
    head = f"{s['scenario']} against its base {base['scenario']} ({', '.join(ch) if ch else 'nothing changed'})"
    parts = []
    if busy_refusals(base)["total"] or busy_refusals(s)["total"]:
        parts.append(f"busy refusals {_busy(base)}{ARROW}{_busy(s)}")
    cb, cs = base["counts"], s["counts"]
    tb, ts = _timeouts(base), _timeouts(s)
    if tb or ts:  # a policy's question: how many attempts went unanswered, and what became of them
        parts.append(f"attempts timed out {tb:,}{ARROW}{ts:,}")
    if cb.get("recovered") or cs.get("recovered"):
        parts.append(f"delivered though the application was told they failed {cb.get('recovered', 0):,}{ARROW}"
                     f"{cs.get('recovered', 0):,}")
    parts.append(f"lost {cb['lost']:,}{ARROW}{cs['lost']:,}")
    parts.append(f"duplicated {cb['duplicated']:,}{ARROW}{cs['duplicated']:,}")
    if cb.get("acked_weak") or cs.get("acked_weak"):
        parts.append(f"acknowledged only weakly {cb.get('acked_weak', 0):,}{ARROW}{cs.get('acked_weak', 0):,}")
    if lasting_outages(base) or lasting_outages(s):
        parts.append(f"out of namesrv's route {_outage(base)}{ARROW}{_outage(s)}")
    if _p99(base) != NONE or _p99(s) != NONE:
        parts.append(f"p99 send latency from the intended time {_p99(base)}{ARROW}{_p99(s)} ms")
    for x in (base, s):
        for words in short_intents(x):
            parts.append(f"but in {x['scenario']} {words}, short of its intent, so that run did not have the "
                         "fault it names")
    return f"{head}: " + "; ".join(parts) + "."
