"""The named figures of a run's summary that `expect:` and `signature:` conditions test
(rmqchaos/spec/expect.py names them: FIGURES, DERIVED and `<family>.<name>`), and a list of such
conditions as evidence: {what, holds (None: no evidence for the figure), seen}."""
from __future__ import annotations

import operator
from typing import Any

from analysis.findings import busy_refusals
from analysis.powercuts import not_started, power_cuts
from rmqchaos.spec.expect import DERIVED, FAMILIES, POP_BY_FAULT, POP_TOTALS, TXN_TOTALS, figure, parse_condition

_OPS = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def evidence(conditions: list[str], s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each condition with the figure it read, e.g. {"what": "busy > 0", "holds": False, "seen": "busy = 0"}."""
    out = []
    for c in conditions:
        name, op, want = parse_condition(c)
        got = value(s, name)
        out.append({"what": c, "holds": None if got is None else _OPS[op](got, want),
                    "seen": f"{name} = {got:,}" if got is not None else f"{name}: no evidence in this run"})
    return out


def value(s: dict[str, Any], name: str) -> int | None:
    """A figure of a summary by its name (FIGURES, DERIVED or `<family>.<name>`); None when the run has
    no evidence for it (no monitor, no store check, no link window)."""
    if name not in DERIVED and "." in name and name.split(".", 1)[0] in FAMILIES:
        fam, arg = name.split(".", 1)
        return _family(s, fam, arg)
    if name == "busy":
        return busy_refusals(s)["total"]
    if name == "errors_not_busy":  # an error answer is a busy refusal or another failure: the others
        return _family(s, "outcome", "error") - busy_refusals(s)["total"]  # type: ignore[operator]
    if name == "frames_refused":
        fe = [m["frame_errors"] for m in s.get("monitor") or [] if isinstance(m.get("frame_errors"), dict)]
        return int(fe[-1].get("count") or 0) if fe else None
    if name == "read_again_after_rollback":
        rb = s.get("offset_rollback")
        return None if rb is None else int(rb.get("deliveries") or 0)
    if name == "not_started_after_power_loss":
        cuts = list(power_cuts(s.get("events") or []))
        return None if not cuts else len(not_started(s.get("events") or []))
    if name == "dledger_terms_reused":
        from analysis.log_marks import terms_reused
        return terms_reused(s)
    if name == "dledger_terms_forgotten":
        from analysis.log_marks import terms_forgotten
        return terms_forgotten(s)
    if name == "two_master_seconds":
        fo = s.get("failover")
        return None if fo is None else len(fo.get("two_master_windows") or [])
    if name in ("keys_out_of_order", "order_reordered", "order_repeats_out_of_order", "order_gaps",
                "order_keys_moved", "order_broken_moved", "order_broken_stayed"):
        o = s.get("order")
        if not o:
            return None
        if name == "keys_out_of_order":
            return int(o["keys"]) - int(o["keys_in_order"])
        if name == "order_keys_moved":
            return None if "keys_moved" not in o else int(o["keys_moved"])
        if name in ("order_broken_moved", "order_broken_stayed"):
            c = o.get("causes")
            return None if c is None else int(c[name.removeprefix("order_broken_")])
        return int(o["messages_by_anomaly"].get({"order_reordered": "reordered", "order_gaps": "gap",
                                                 "order_repeats_out_of_order": "repeat_out_of_order"}[name], 0))
    if name.startswith("timers_"):
        t = s.get("timers")
        if not t:
            return None
        return {"timers_early": t["early"]["keys"], "timers_lost": t["lost"], "timers_late_over_5s": t["late_over"]["keys"],
                "timers_lost_no_fault": t["no_fault"]["lost"],
                "timers_late_max_ms": t["late_ms"].get("max")}[name]
    if name.startswith("retried_"):
        rb = s.get("retried_keys_by_batch_position")
        return None if rb is None else int(rb.get(name.removeprefix("retried_"), 0))
    return figure(s, name)


def _family(s: dict[str, Any], fam: str, arg: str) -> int | None:
    err = s.get("errors") or {}
    if fam in ("status", "outcome"):
        return int((err.get(f"by_{fam}") or {}).get(arg, 0))
    if fam == "busy":
        return int(busy_refusals(s)["by_kind"].get(arg, 0))
    if fam == "duplicates":
        return int((s.get("duplicates_by_cause") or {}).get(arg, 0))
    if fam == "route_absent_samples":
        mon = [m for m in s.get("monitor") or [] if "brokers" in m]
        if not mon:
            return None
        return sum(1 for m in mon if (b := (m["brokers"] or {}).get(arg) or {}).get("up")
                   and b.get("registered") is False)
    if fam == "link_p50_added_ms":
        kinds = {(e.get("params") or {}).get("fault_id"): (e.get("params") or {}).get("fault_kind")
                 for e in s.get("events", []) if e.get("kind") == "fault"}
        added = [d["during"]["p50"] - d["outside"]["p50"] for w in s.get("windows") or [] if kinds.get(w["id"]) == "link"
                 if (d := (w.get("send_ms_by_broker") or {}).get(arg)) and d["during"].get("p50") is not None
                 and d["outside"].get("p50") is not None]
        return max(added) if added else None
    if fam in ("lost_on", "gone_on", "gone_status"):
        sc = s.get("store_check")
        field = {"lost_on": "lost_by_broker", "gone_on": "gone_by_broker", "gone_status": "gone_by_status"}[fam]
        return None if sc is None or field not in sc else int((sc.get(field) or {}).get(arg, 0))
    if fam == "transactions":
        t = s.get("transactions")
        if not t:
            return None
        if arg in TXN_TOTALS:
            return int(t.get(arg, 0))
        return int(t["classes"].get(arg, 0))
    if fam == "pop":  # pop.<class>, or pop.<class>.<cause> (analysis/pop.py)
        p = s.get("pop")
        if not p:
            return None
        if arg in POP_TOTALS:  # pop.acks_refused: the totals
            return int(p.get(arg, 0))
        if arg.startswith(POP_BY_FAULT):  # pop.by_fault.<fault id>: redeliveries forced by that fault on the proxy
            return int((p.get("by_fault") or {}).get(arg.removeprefix(POP_BY_FAULT), 0))
        cls, _, cause = arg.partition(".")
        return int((p["causes"].get(cls) or {}).get(cause, 0) if cause else p["classes"].get(cls, 0))
    if fam == "order_broken_on":
        o = s.get("order")
        c = (o or {}).get("causes")
        return None if c is None else int(c["by_home_broker"].get(arg, 0))
    if fam == "log":
        from analysis.log_marks import total
        return total(s, arg)
    raise AssertionError(f"figure family {fam} validated by the spec but not computed")
