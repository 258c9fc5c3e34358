"""Which brokers serve the consumers' reads: the status file each Java consumer rewrites
(java/src/main/java/io/rmqchaos/ServingStatus.java: per broker, reads served and refused by answer
code, and the spans of time it served), read by the serving gate (loadgen/serving.py) and the
analysis (analysis/judge/serving.py). Pure logic on those files; docs/client.md says why they exist.

Two writers, one shape (`keyed_by` says which):
- the remoting consumer (Serving.java), keyed by broker address: a pull answered with messages
  (SUCCESS), with no new message (PULL_NOT_FOUND) or with none matching the filter
  (PULL_RETRY_IMMEDIATELY) is served: the broker accepted the consumer's subscription;
- a POP consumer through the proxy (PopServing.java), keyed by broker name: a receive answered with
  messages is served by the broker each message's receipt handle names (`counts.messages`); one
  answered "no new message" (MESSAGE_NOT_FOUND) by the broker it asked (`counts.no_new_message`);
  a receive answered with another broker's messages than it asked counts `redirected` on the one
  asked (the proxy's route did not list it). `unwatched` says why nothing could be recorded.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the serving gate's bound: every consumer group served by every master of its topics within this
#: many seconds of the consumers' start, or no fault is applied. The client's own cure for the code-25
#: race (its scheduled heartbeat, heartbeatBrokerInterval) comes 30 s after start: past this bound.
SERVE_BOUND_S = 30.0
#: after a broker node's restart, its broker group serves every consumer group it served before within
#: this many seconds, or the run is incomplete: a consumer finds a restarted broker only at its next
#: route poll (pollNameServerInterval, 30 s by default) and rebalance (20 s), plus the broker's boot
RESTART_SERVE_S = 60.0
NOT_LATEST = 25  # SUBSCRIPTION_NOT_LATEST: "the subscription is not latest"


def status_path(consumers_dir: Path, consumer_id: str) -> Path:
    return Path(consumers_dir) / f"serving-{consumer_id}.json"


def read_statuses(consumers_dir: Path) -> list[dict[str, Any]]:
    """Every consumer's last status (written by rename: never torn; a file that does not parse is skipped)."""
    out = []
    for f in sorted(Path(consumers_dir).glob("serving-*.json")):
        try:
            v = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(v, dict) and isinstance(v.get("brokers"), dict):
            out.append(v)
    return out


def by_group(statuses: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The statuses merged per consumer group: {group: {started_ms, stopped_ms (the last status
    written), consumers, keyed_by [address | broker_name], unwatched {consumer: why}, heartbeats {sent,
    lock_busy, failed, resent}, brokers {key: {served, first_served_ms, last_served_ms, refused {code: n},
    not_latest, counts {what: n}, spans, spans_truncated}}}}; the group's consumers divide its queues,
    so a broker served the group when it served any of them."""
    out: dict[str, dict[str, Any]] = {}
    for st in statuses:
        g = out.setdefault(st.get("group") or "?", {"started_ms": None, "stopped_ms": None, "consumers": [],
                                                   "keyed_by": [], "unwatched": {},
                                                   "heartbeats": {"sent": 0, "lock_busy": 0, "failed": 0,
                                                                  "resent": 0},
                                                   "brokers": {}})
        g["consumers"].append(st.get("consumer_id"))
        g["keyed_by"] = sorted({*g["keyed_by"], st.get("keyed_by") or "address"})  # written before POP: addresses
        if st.get("unwatched"):
            g["unwatched"][st.get("consumer_id") or "?"] = st["unwatched"]
        g["started_ms"] = _min(g["started_ms"], st.get("started_ms"))
        g["stopped_ms"] = max(g["stopped_ms"] or 0, st.get("written_ms") or 0) or None
        for k in g["heartbeats"]:
            g["heartbeats"][k] += int((st.get("heartbeats") or {}).get(k) or 0)
        for addr, b in st["brokers"].items():
            m = g["brokers"].setdefault(addr, {"served": 0, "first_served_ms": None, "last_served_ms": None,
                                               "refused": {}, "not_latest": 0, "counts": {}, "spans": [],
                                               "spans_truncated": False})
            m["served"] += int(b.get("served") or 0)
            m["first_served_ms"] = _min(m["first_served_ms"], b.get("first_served_ms"))
            m["last_served_ms"] = max(m["last_served_ms"] or 0, b.get("last_served_ms") or 0) or None
            for code, n in (b.get("refused") or {}).items():
                m["refused"][str(code)] = m["refused"].get(str(code), 0) + int(n)
            m["not_latest"] = m["refused"].get(str(NOT_LATEST), 0)
            for what, n in (b.get("counts") or {}).items():
                m["counts"][what] = m["counts"].get(what, 0) + int(n)
            m["spans"] = sorted(m["spans"] + [list(s) for s in b.get("spans") or []])
            m["spans_truncated"] = m["spans_truncated"] or bool(b.get("spans_truncated"))
    return out


def unserved(groups: dict[str, dict[str, Any]], wanted: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(consumer group, node, key) for each broker of a group's topics (`wanted`: group -> {key: node},
    the key an address for a remoting group, a broker name for a POP group) that has not served that
    group yet."""
    out = []
    for group, masters in sorted(wanted.items()):
        have = (groups.get(group) or {}).get("brokers", {})
        for addr, node in sorted(masters.items(), key=lambda kv: kv[1]):
            if (have.get(addr) or {}).get("first_served_ms") is None:
                out.append((group, node, addr))
    return out


def served_from(spans: list[list[int]], t_ms: int) -> int | None:
    """The first time at or after `t_ms` the broker served, to ServingStatus.SPAN_GAP_MS (3 s: within a span
    answers come at most that far apart); None when it did not. (A status whose spans were truncated,
    past 2,000 of them, says so: its last span then stands for everything after it.)"""
    for first, last in spans:
        if last >= t_ms:
            return max(first, t_ms)
    return None


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
