"""What a run's summary shows, as facts the verdict, the plots and the HTML report share: where the
route broke, which evidence there is, the time axis's origin, the kills (no wording, no matplotlib)."""
from __future__ import annotations

from typing import Any


NONE = "\u2014"  # what an absent value reads as (never Python's None)


def fmt(x: Any) -> Any:
    return NONE if x is None else x


def has_host_evidence(s: dict[str, Any]) -> bool:
    return bool(s.get("disk")) or any(v.get("write_memory") or v.get("pagecachert")
                                      for v in (s.get("broker_evidence") or {}).values())


def time_origin(s: dict[str, Any]) -> int:
    """Second 0 of a run's time axes: its first attempt, else the first disk or monitor sample."""
    if s["series"]:
        return int(s["series"][0]["t"])
    first = [x[0]["ts_ms"] // 1000 for x in (s.get("disk"), s.get("monitor")) if x]
    return min(first, default=0)


def route_outages(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each stretch in which the monitor saw a broker answer while namesrv did not list it:
    {broker, start_ms, end_ms (None: still out at the last sample), acked_on_it, acked_elsewhere}."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    mon = [m for m in s.get("monitor") or [] if "brokers" in m]
    for m in mon:
        for b, st in m["brokers"].items():
            if st.get("registered") is False and st.get("up") and b not in open_:
                open_[b] = {"broker": b, "start_ms": m["ts_ms"], "end_ms": None}
            elif st.get("registered") and b in open_:
                o = open_.pop(b)
                o["end_ms"] = m["ts_ms"]
                out.append(o)
    out += open_.values()
    ser = s.get("series") or []
    last_t = max((r["t"] for r in ser), default=0)
    for o in out:
        # still out at the last sample: every send from its start on counts
        end_t = o["end_ms"] // 1000 if o["end_ms"] else last_t + 1
        rows = [r for r in ser if o["start_ms"] // 1000 <= r["t"] < end_t]
        group = o["broker"].removesuffix("-s")
        o["acked_on_it"] = sum((r.get("acked_by_broker") or {}).get(group, 0) for r in rows)
        o["acked_elsewhere"] = sum(n for r in rows for b, n in (r.get("acked_by_broker") or {}).items() if b != group)
        o["failed"] = sum(r["errors"] + r["timeouts"] for r in rows)
    return out


def has_cluster_evidence(s: dict[str, Any]) -> bool:
    """Whether the cluster monitor saw what its plot is for: many %RETRY% topics, a broker out of
    namesrv's registrations, a refused frame, or messages going through %RETRY%."""
    for m in s.get("monitor") or []:
        if (m.get("frame_errors") or {}).get("count"):
            return True
        for b in (m.get("brokers") or {}).values():
            if b.get("registered") is False or (b.get("topics") or {}).get("retry", 0) > 100:
                return True
        if any(g.get("retry_stored") for g in (m.get("backlog") or {}).values()):
            return True
    return False


def kills(s: dict[str, Any]) -> int:
    """Process-ending faults applied in the run (oom_kill, jvm_oom, kill)."""
    return sum(1 for e in s.get("events", []) if e.get("kind") == "fault" and e.get("outcome") == "ok"
               and e.get("params", {}).get("fault_kind") in ("oom_kill", "jvm_oom", "kill"))


def outage_seconds(o: dict[str, Any], s: dict[str, Any]) -> int:
    """How long a route outage lasted, in whole seconds; one still open at the last monitor sample
    counts up to that sample."""
    end = o["end_ms"] or max((m["ts_ms"] for m in s.get("monitor") or []), default=o["start_ms"])
    return round((end - o["start_ms"]) / 1000)


MIN_OUTAGE_S = 3  # a restarted broker answers ~1 s before its first registration: not a finding


def lasting_outages(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The route outages a verdict names: those of MIN_OUTAGE_S or more (the report's body shows all)."""
    return [o for o in route_outages(s) if outage_seconds(o, s) >= MIN_OUTAGE_S]


def is_busy(answer: str) -> bool:
    """Whether an answer label (analysis/reconcile/answers.py answer_label) is a busy refusal (code 2)."""
    return answer.startswith("[") or answer == "code 2"


def busy_refusals(s: dict[str, Any]) -> dict[str, Any]:
    """The sends the broker refused as busy (code 2): {total, attempts, by_kind: {text without brackets:
    n}, most first}. From `answers` (exactly the code-2 answers), else from the error counts."""
    if s.get("answers") is not None:
        kinds = {a["answer"]: a["attempts"] for a in s["answers"] if is_busy(a["answer"]) and a["attempts"]}
    else:  # a summary without answers: the code-2 count, by its texts
        err = s.get("errors") or {}
        kinds = dict((err.get("by_remark_prefix") or {}))
        rest = int((err.get("by_code") or {}).get("2", 0)) - sum(kinds.values())
        if rest > 0:
            kinds["code 2"] = rest
    by_kind = {k.strip("[]"): n for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])}
    return {"total": sum(by_kind.values()), "attempts": s["counts"].get("attempts", 0), "by_kind": by_kind}


NOISE_KINDS = ("redis_noise", "es_like_noise")


def fault_intents(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The faults applied in a run that report what they achieved against what they were asked (their
    evidence's `intent`, chaos/intent.py: measures, reached, short, words, and `brief` when the
    measures carry words), each {fault_kind, fault_id, target, intent}, in the timeline's order; faults
    of older runs, which do not report it, are left out."""
    out = []
    for e in s.get("events", []):
        p = e.get("params") or {}
        if e.get("kind") == "fault" and e.get("outcome") == "ok":
            intent = (p.get("evidence") or {}).get("intent")
            if isinstance(intent, dict):
                out.append({"fault_kind": p.get("fault_kind") or "fault", "fault_id": p.get("fault_id"),
                            "target": str(e.get("target")), "intent": intent})
    return out


def noise_intents(s: dict[str, Any]) -> list[dict[str, Any]]:
    """fault_intents of the disk noise (the run history keeps their reach: analysis/history/history.py)."""
    return [x for x in fault_intents(s) if x["fault_kind"] in NOISE_KINDS]


def reached_pct(intent: dict[str, Any]) -> float | None:
    """The share of its intent a fault reached, in percent: the one a noise's words give, else
    `reached` (a fraction; a noise's above 1: a percentage, as older runs gave it)."""
    import re
    r = intent.get("reached")
    if intent.get("brief"):  # measures with words of their own: `reached` is the fraction, even above 1
        return None if r is None else float(r) * 100
    m = re.search(r"(\d+(?:\.\d+)?)\s*%", str(intent.get("words") or ""))
    if m:
        return float(m.group(1))
    if r is None:
        return None
    return float(r) * 100 if float(r) <= 1 else float(r)  # short of intent, above 1: given in percent


def _commit_max(m: dict[str, Any], node: str) -> int | None:
    return (m["brokers"].get(node) or {}).get("commit_max")


def replica_catchup(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each slave a partition fault put behind its master, from the monitor's `commit_max` of both
    (cluster/watch/monitor.py): {slave, fault_id, max_behind_bytes (during the fault), heal_ms, caught_up_ms
    (the first sample from the heal on in which the slave held everything its master had stored at
    the heal; None: never, up to the last sample), caught_up_s}. Nothing for a slave never behind."""
    mon = [m for m in s.get("monitor") or [] if "brokers" in m]
    pairs = {n: n.removesuffix("-s") for b in mon[:1] for n in b["brokers"] if n.endswith("-s")}
    out = []
    for e in s.get("events", []):
        p = e.get("params") or {}
        if e.get("kind") != "fault" or p.get("fault_kind") != "partition" or e.get("outcome") != "ok" or not e.get("end_ms"):
            continue
        for slave, master in pairs.items():
            during = [_commit_max(m, master) - _commit_max(m, slave) for m in mon if e["start_ms"] <= m["ts_ms"] <= e["end_ms"]
                      and _commit_max(m, master) is not None and _commit_max(m, slave) is not None]
            before = [_commit_max(m, master) for m in mon if m["ts_ms"] <= e["end_ms"] and _commit_max(m, master) is not None]
            if not during or not before or max(during) <= 0:
                continue
            caught = next((m["ts_ms"] for m in mon if m["ts_ms"] >= e["end_ms"] and (_commit_max(m, slave) or -1) >= before[-1]),
                          None)
            out.append({"slave": slave, "fault_id": p.get("fault_id"), "max_behind_bytes": max(during),
                        "heal_ms": e["end_ms"], "caught_up_ms": caught,
                        "caught_up_s": None if caught is None else round((caught - e["end_ms"]) / 1000, 1)})
    return out
