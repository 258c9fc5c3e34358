"""What a verdict says of power losses and failing disks: what a broker answered while its disk
failed, what a broker that lost power came back knowing, and the deliveries read again because its
consumer offsets went back, and how far before a cut the acknowledgements now in no store reach."""
from __future__ import annotations

from typing import Any

from analysis.durability.powercuts import not_started, power_cuts


def _faults(s: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {(e.get("params") or {}).get("fault_id"): e for e in s.get("events", [])
            if e.get("kind") == "fault" and (e.get("params") or {}).get("fault_kind") == kind}


def disk_error_phrases(s: dict[str, Any]) -> list[str]:
    """Per disk_error or disk_slow window: what its broker answered while its disk failed or was slow,
    e.g. 'while broker-a's fsyncs failed (eio-a: 2,540 EIO on 1 file): 120 sends acknowledged SEND_OK,
    34 not', 'while broker-a's fsyncs were held (slow-a: 40 held 300 ms each): ...'. An acknowledgement
    in the window is one whose flush may have failed or be pending: a power loss then may take it."""
    kinds = {**_faults(s, "disk_error"), **_faults(s, "disk_slow")}
    out = []
    for w in s.get("windows") or []:
        e = kinds.get(w.get("id"))
        if e is None or e.get("outcome") != "ok":
            continue
        ev = e["params"].get("evidence") or {}
        node = str(e.get("target"))
        group = (s["cluster"]["brokers"].get(node) or {}).get("brokerName", node)
        ans = (w.get("answers_by_broker") or {}).get(group) or {}
        acked = {a: n for a, n in ans.items() if a == "SEND_OK" or a.startswith("FLUSH_") or a == "SLAVE_NOT_AVAILABLE"}
        other = sum(n for a, n in ans.items() if a not in acked)
        op = ev.get("op", "fsync")
        if e["params"].get("fault_kind") == "disk_slow":
            held = sum(int(f.get("count") or 0) for f in ev.get("delays") or [])
            what = f"{op}s were held ({w['id']}: {held:,} held {ev.get('delay_ms')} ms each)"
        else:
            fails = sum(int(f.get("count") or 0) for f in ev.get("failures") or [])
            what = f"{op}s failed ({w['id']}: {fails:,} {ev.get('errno', '')} on {len(ev.get('failures') or [])} file(s))"
        out.append(f"while {node}'s {what}: "
                   + (", ".join(f"{n:,} sends acknowledged {a}" for a, n in acked.items()) or "no send acknowledged")
                   + f", {other:,} not")
    return out


def power_phrases(s: dict[str, Any]) -> list[str]:
    """Per broker that lost power, what its restart found in its config files against what it knew at
    the cut, e.g. 'broker-a came back with all 4 topics and 2 groups in its config files, its consumer
    offsets of 3 queue(s) 1,204 messages back (read again after power-a: 1,190 deliveries)'; and each node
    that did not start again, with the exception that ended it."""
    rb = s.get("offset_rollback") or {}
    out = []
    for fid, node, lost in power_cuts(s.get("events") or []):
        k = lost.get("knows") or {}
        f, before = k.get("forgot"), k.get("before")
        if f is None or before is None:
            continue
        gone = [f"{len(f[w])} of {before[t]} {t} ({', '.join(f[w][:3])}{', ...' if len(f[w]) > 3 else ''})"
                for w, t in (("topics_lost", "topics"), ("groups_lost", "groups")) if f[w]]
        # what its config files hold: a broker also recreates its built-in topics and groups at
        # start, and a consumer's heartbeat its group (autoCreateSubscriptionGroup)
        knew = "with config files that lack " + " and ".join(gone) if gone else \
            f"with all {before['topics']} topics and {before['groups']} groups in its config files"
        back = f["offsets_back"]
        offs = (f"its consumer offsets of {len(back)} queue(s) {f['messages_back']:,} messages back"
                if back else "its consumer offsets where they were")
        again = ""
        if back and rb:
            n = int((rb.get("by_fault") or {}).get(fid, 0))
            again = f" (read again after {fid}: {n:,} deliveries)"
        out.append(f"{node} came back {knew}, {offs}{again}")
    out += [f"{node} did not start again when its power came back: {why}"
            for node, why in not_started(s.get("events") or []).items()]
    return out + gone_window_phrases(s)


FLUSH_INTERVAL_DEFAULT_MS = 500  # MessageStoreConfig.flushIntervalCommitLog


def gone_window_phrases(s: dict[str, Any]) -> list[str]:
    """Per broker that lost power, how far before its cut the acknowledgements now in no store reach,
    against its flush interval (ASYNC_FLUSH), e.g. "broker-a's acknowledgements in no store came 1,950 ms
    to 3 ms before its cut (ASYNC_FLUSH every 2,000 ms)": what a machine crash takes is the unflushed
    tail, and the interval bounds it (a flush that took long, or a failed one, widens it)."""
    spans = (s.get("store_check") or {}).get("gone_acked_ms_by_broker") or {}
    if not spans:
        return []
    brokers = (s.get("cluster") or {}).get("brokers") or {}
    out = []
    for _, node, lost in power_cuts(s.get("events") or []):
        conf = brokers.get(node) or {}
        span, cut = spans.get(conf.get("brokerName", node)), lost.get("cut_ms")
        if not span or not cut:
            continue
        flush = (f"ASYNC_FLUSH every {int(conf.get('flushIntervalCommitLog') or FLUSH_INTERVAL_DEFAULT_MS):,} ms"
                 if conf.get("flushDiskType", "ASYNC_FLUSH") == "ASYNC_FLUSH" else conf["flushDiskType"])
        first, last = int(cut) - span[0], int(cut) - span[1]
        out.append(f"{node}'s acknowledgements in no store came {first:,} ms to {last:,} ms before its cut ({flush})"
                   if last >= 0 else
                   f"{node}'s acknowledgements in no store came from {first:,} ms before its cut to {-last:,} ms "
                   f"after it ({flush})")
    return out
