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
    last_t = max((r["t"] for r in s["series"]), default=0)
    for o in out:
        # still out at the last sample: every send from its start on counts
        end_t = o["end_ms"] // 1000 if o["end_ms"] else last_t + 1
        rows = [r for r in s["series"] if o["start_ms"] // 1000 <= r["t"] < end_t]
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
