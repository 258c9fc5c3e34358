"""The named figures of a run's summary that `expect:` and `signature:` conditions test
(rmqchaos/spec/expect.py names them: FIGURES, DERIVED and `<family>.<name>`), and a list of such
conditions as evidence: {what, holds (None: no evidence for the figure), seen}."""
from __future__ import annotations

import operator
from typing import Any

from analysis.evidence.findings import busy_refusals, is_busy
from analysis.durability.powercuts import not_started, power_cuts
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
    if name in ("frames_refused", "frame_refused_bytes"):
        fe = [m["frame_errors"] for m in s.get("monitor") or [] if isinstance(m.get("frame_errors"), dict)]
        if name == "frame_refused_bytes":
            return fe[-1].get("last_length") if fe else None
        return int(fe[-1].get("count") or 0) if fe else None
    if name == "read_again_after_rollback":
        rb = s.get("offset_rollback")
        if rb is None:  # a run without a power loss: nothing rolled an offset back (with one: not recorded)
            return 0 if "events" in s and not fault_events(s, ("power_loss",), ok=False) else None
        return int(rb.get("deliveries") or 0)
    if name == "not_started_after_power_loss":
        cuts = list(power_cuts(s.get("events") or []))
        return None if not cuts else len(not_started(s.get("events") or []))
    if name == "dledger_terms_reused":
        from analysis.evidence.log_marks import terms_reused
        return terms_reused(s)
    if name == "dledger_terms_forgotten":
        from analysis.evidence.log_marks import terms_forgotten
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
    if name in _PREMISES:
        return _PREMISES[name](s)
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
    if fam in ("route_absent_samples", "route_absent_seconds", "route_back"):
        mon = [m for m in s.get("monitor") or [] if "brokers" in m]
        if not mon:
            return None
        out = [bool((b := (m["brokers"] or {}).get(arg) or {}).get("up") and b.get("registered") is False) for m in mon]
        if fam == "route_absent_samples":
            return sum(out)
        if fam == "route_back":  # after its last absent sample, the last sample that reached it lists it
            if not any(out):
                return None
            last_out = max(i for i, o in enumerate(out) if o)
            seen = [b.get("registered") for m in mon[last_out + 1:] if (b := (m["brokers"] or {}).get(arg) or {}).get("up")]
            return int(bool(seen) and seen[-1] is True)
        # each absent sample counts until the next sample (the last one: one interval, 1 s)
        ts = [int(m["ts_ms"]) for m in mon] + [int(mon[-1]["ts_ms"]) + 1000]
        return round(sum(b - a for a, b, gone in zip(ts, ts[1:], out) if gone) / 1000)
    if fam == "frames_refused_by":
        fe = [m["frame_errors"] for m in s.get("monitor") or [] if isinstance(m.get("frame_errors"), dict)]
        if not fe:
            return None
        by = fe[-1].get("by_namesrv")
        return int(by.get(arg, 0)) if by is not None else int(fe[-1].get("count") or 0) if arg == "namesrv" else 0
    if fam == "link_p50_added_ms":
        kinds = {(e.get("params") or {}).get("fault_id"): (e.get("params") or {}).get("fault_kind")
                 for e in s.get("events", []) if e.get("kind") == "fault"}
        added = [d["during"]["p50"] - d["outside"]["p50"] for w in s.get("windows") or [] if kinds.get(w["id"]) == "link"
                 if (d := (w.get("send_ms_by_broker") or {}).get(arg)) and d["during"].get("p50") is not None
                 and d["outside"].get("p50") is not None]
        if not added and "events" in s and not fault_events(s, ("link",), ok=False):
            return 0  # a run without a link fault: no link added anything
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
    if fam == "pop":  # pop.<class>, or pop.<class>.<cause> (analysis/contracts/pop.py)
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
        from analysis.evidence.log_marks import total
        return total(s, arg)
    raise AssertionError(f"figure family {fam} validated by the spec but not computed")


# ---------------------------------------------------------------- what a fault did (a signature's premise)

def fault_events(s: dict[str, Any], kinds: tuple[str, ...] | None = None, ok: bool = True) -> list[dict[str, Any]]:
    """The run's fault events, of these kinds when given (applied ones, ended ok, only with `ok`)."""
    return [e for e in s.get("events") or [] if e.get("kind") == "fault"
            and (kinds is None or (e.get("params") or {}).get("fault_kind") in kinds)
            and (not ok or e.get("outcome") == "ok")]


def broker_faults(s: dict[str, Any], kinds: tuple[str, ...] | None = None) -> list[tuple[str, int, int]]:
    """(broker group, start ms, end ms) of each fault applied to a broker node (its target, a role
    resolved to the node it hit), of `kinds` when given; the restart after a kill is its recovery, not
    a fault of its own."""
    brokers = (s.get("cluster") or {}).get("brokers") or {}
    out = []
    for e in fault_events(s, kinds):
        p = e.get("params") or {}
        node = e.get("target")
        if p.get("fault_kind") == "restart" or e.get("start_ms") is None or node not in brokers:
            continue
        start = int(e["start_ms"])
        out.append(((brokers[node] or {}).get("brokerName", node), start, int(e.get("end_ms") or start)))
    return out


def _attempts_failed(s: dict[str, Any]) -> int | None:
    err = value(s, "errors_not_busy")
    return None if err is None else err + int(_family(s, "outcome", "timeout") or 0)


def _busy_stored(s: dict[str, Any]) -> int | None:
    ans = s.get("answers")
    return None if ans is None else sum(int(a.get("stored") or 0) for a in ans if is_busy(str(a.get("answer"))))


def _end_to_end_max(s: dict[str, Any]) -> int | None:
    m = ((s.get("latency_ms") or {}).get("end_to_end") or {}).get("max")
    return None if m is None else int(m)


def _retry_topics_max(s: dict[str, Any]) -> int | None:
    seen = [int((b.get("topics") or {}).get("retry") or 0) for m in s.get("monitor") or []
            for b in (m.get("brokers") or {}).values() if isinstance(b, dict) and isinstance(b.get("topics"), dict)]
    return max(seen) if seen else None


def _consumer_clock_timed_out(s: dict[str, Any]) -> int | None:
    """The consumer_clock faults' `client_requests_timed_out` summed: 0 without such a fault, None
    when one could not read its client's log."""
    if "events" not in s:
        return None
    got = [((e.get("params") or {}).get("evidence") or {}).get("client_requests_timed_out")
           for e in fault_events(s, ("consumer_clock",))]
    return None if any(n is None for n in got) else sum(int(n) for n in got)


def _txn_checked_after_fault(s: dict[str, Any]) -> int | None:
    """Of the halves asked about after their end (summary.transactions.checked_after_end_by_second:
    per broker group that stored the half, [half's second, last check-back's second, halves]), those
    stored before a fault on a node of that group and asked about after the fault began. Whole seconds
    either side of the fault's start only: a half or check-back in its second counts for neither side."""
    t = s.get("transactions")
    if not t or t.get("checked_after_end_by_second") is None:
        return None
    faults = broker_faults(s)
    return sum(int(n) for g, rows in t["checked_after_end_by_second"].items() for h, c, n in rows
               if any(g == fg and (int(h) + 1) * 1000 <= start <= int(c) * 1000 for fg, start, _ in faults))


def _gone_ok_sync_flush(s: dict[str, Any]) -> int | None:
    sc = s.get("store_check")
    if sc is None or sc.get("gone_ok_by_broker") is None:
        return None
    sync = {c.get("brokerName", n) for n, c in ((s.get("cluster") or {}).get("brokers") or {}).items()
            if (c or {}).get("flushDiskType") == "SYNC_FLUSH"}
    return sum(int(n) for g, n in sc["gone_ok_by_broker"].items() if g in sync)


def _gone_in_disk_fault(s: dict[str, Any]) -> int | None:
    """Keys in no store now by the broker group that acknowledged them, their last acknowledgement by it
    in a slot (store_check.gone_ack_slots_by_broker, `gone_ack_slot_ms` wide) wholly inside a disk_error
    or disk_slow window of a node of that group."""
    sc = s.get("store_check")
    if sc is None or sc.get("gone_ack_slots_by_broker") is None:
        return None
    width = int(sc.get("gone_ack_slot_ms") or 1)
    wins = broker_faults(s, ("disk_error", "disk_slow"))
    return sum(int(n) for g, slots in sc["gone_ack_slots_by_broker"].items() for slot, n in slots.items()
               if any(g == fg and a <= int(slot) and int(slot) + width - 1 <= b for fg, a, b in wins))


_PREMISES = {"attempts_failed": _attempts_failed, "busy_stored": _busy_stored, "end_to_end_max_ms": _end_to_end_max,
             "retry_topics_max": _retry_topics_max, "consumer_clock_timed_out": _consumer_clock_timed_out,
             "txn_checked_after_fault": _txn_checked_after_fault, "gone_ok_sync_flush": _gone_ok_sync_flush,
             "gone_in_disk_fault": _gone_in_disk_fault}
