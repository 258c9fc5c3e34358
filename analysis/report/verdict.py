"""The verdict in words: one sentence per run (what was done to the cluster, what it lost, what it
found) and the sentences that compare runs."""
from __future__ import annotations

import time
from typing import Any

from analysis.evidence.findings import (NONE, busy_refusals, fault_intents, lasting_outages, outage_seconds, reached_pct,
                                        replica_catchup)
from analysis.contracts.order import order_phrase
from analysis.contracts.pop import pop_phrase
from analysis.contracts.timers import timer_phrase
from analysis.contracts.transactions import transaction_phrase
from analysis.report.power_words import disk_error_phrases, power_phrases

FAULT_WORDS = {"oom_kill": ("kernel OOM kill", "kernel OOM kills"), "jvm_oom": ("JVM OutOfMemoryError", "JVM OutOfMemoryErrors"),
               "kill": ("SIGKILL", "SIGKILLs"), "pause": ("pause", "pauses"), "restart": ("restart", "restarts"),
               "blkio_throttle": ("disk throttle", "disk throttles"), "page_cache_limit": ("page-cache limit", "page-cache limits"),
               "redis_noise": ("Redis disk noise", "Redis disk noise"), "es_like_noise": ("fio disk noise", "fio disk noise"),
               "topic_flood": ("%RETRY% topic flood", "%RETRY% topic floods"),
               "cleanup_retry_topics": ("%RETRY% topic cleanup", "%RETRY% topic cleanups"),
               "partition": ("network partition", "network partitions"), "link": ("link fault", "link faults"),
               "power_loss": ("power loss", "power losses"), "disk_error": ("disk error window", "disk error windows"),
               "disk_slow": ("slow disk window", "slow disk windows"), "clock": ("clock fault", "clock faults")}
_NUM = {1: "one", 2: "two", 3: "three"}
SETTINGS = ("brokerRole", "flushDiskType", "transientStorePoolEnable")  # named in every verdict


def _n(n: int, one: str, many: str) -> str:
    return f"{_NUM.get(n, n)} {one if n == 1 else many}"


def faults_phrase(s: dict[str, Any], intent: bool = True) -> str:
    """The faults applied in a run, e.g. 'one kernel OOM kill of broker-a' ('' for none). A fault that
    fell short of what it was asked (its evidence's `intent`, chaos/intent.py) is named so, e.g. 'one
    pause of broker-a (short of intent: froze 1.2 of 5 s)', 'Redis disk noise (short of intent: 6 %)',
    never as if it ran as named (without `intent`: named as asked, to tell which faults a run was given)."""
    seen: dict[tuple[str, str], int] = {}
    short: dict[tuple[str, str], list[dict[str, Any]]] = {}  # its occurrences short of their intent
    for e in s.get("events", []):
        if e.get("kind") == "fault" and e.get("outcome") == "ok":
            k = (e.get("params", {}).get("fault_kind") or "fault", str(e.get("target")))
            groups = ((e.get("params") or {}).get("evidence") or {}).get("groups")
            if k[0] == "partition" and groups:  # named by its sides: 'broker-a | namesrv'
                k = (k[0], " | ".join(", ".join(g) for g in groups))
            ev = (e.get("params") or {}).get("evidence") or {}
            if k[0] == "link" and ev.get("from"):  # named by its ends: 'producers -> broker-a'
                k = (k[0], f"{ev['from']} -> {ev['to']}")
            if k[0] == "power_loss" and len(ev.get("nodes") or []) > 1:  # every node that lost power at once
                k = (k[0], " and ".join(ev["nodes"]))
            if (e.get("params") or {}).get("role"):  # the node hit and the role it held when hit
                k = (k[0], f"{k[1]} ({e['params']['role']})")
            seen[k] = seen.get(k, 0) + 1
            it = ev.get("intent")
            if intent and isinstance(it, dict) and it.get("short"):
                short.setdefault(k, []).append(it)
    killed = {t.split(" (")[0] for k, t in seen if k in ("oom_kill", "jvm_oom", "kill")}

    def part(k: str, t: str, n: int) -> str:
        words = named(k, t, n)
        if (k, t) not in short:
            return words
        why = short_of(short[(k, t)], n)  # inside the name's own parentheses, if it ends with them
        return words[:-1] + f"; {why})" if words.endswith(")") else words + f" ({why})"

    def named(k: str, t: str, n: int) -> str:
        one, many = FAULT_WORDS.get(k, (k, k + "s"))
        words = one if one == many else _n(n, one, many)  # noise is a mass noun: no count
        if k == "partition":
            return words + f" ({t})" if " | " in t else words
        if k == "link":
            return words + f" ({t})" if " -> " in t else words
        if k == "clock":  # the node's own clock, not the node
            return words + f" on {t}"
        return words + ("" if t in ("cluster", "None") else f" of {t}")  # noise has no target of its own
    # the restart after a kill is its recovery, not a fault of its own (unless it fell short)
    parts = [part(k, t, n) for (k, t), n in seen.items() if not (k == "restart" and t in killed and (k, t) not in short)]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def short_of(its: list[dict[str, Any]], n: int) -> str:
    """How a fault's `n` occurrences fell short, by the worst of the short ones `its`: 'short of intent:
    froze 1.2 of 5 s' (its `brief`), 'short of intent: 6 %' (a noise's reach), '2 of 3 short of intent: ...'."""
    worst = min(its, key=lambda i: i["reached"] if isinstance(i.get("reached"), (int, float)) else float("inf"))
    got = reached_pct(worst)
    what = worst.get("brief") or (pct(got) if got is not None else "")
    head = "short of intent" if len(its) >= n else f"{len(its)} of {n} short of intent"
    return f"{head}: {what}" if what else head


def pct(p: float | None) -> str:
    """A percentage as the verdicts write it: 11 %, 3.9 %, 0.4 %, <0.1 %."""
    if p is None:
        return NONE
    if p and p < 0.1:
        return "<0.1 %"
    return f"{p:.0f} %" if p >= 10 or p == 0 else f"{p:.1f} %".replace(".0 %", " %")


def share(n: int, of: int) -> str:
    return pct(100 * n / of if of else None)


def settings(s: dict[str, Any]) -> dict[str, str]:
    """What decides loss, per run: the masters' role, flush and TSP settings, and the send policy."""
    masters = [c for c in s["cluster"]["brokers"].values() if c.get("brokerRole", "ASYNC_MASTER") != "SLAVE"]
    out = {k: "/".join(sorted({c.get(k, {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                         "transientStorePoolEnable": "false"}[k]) for c in masters})) for k in SETTINGS}
    out["policy"] = str(((s.get("load") or {}).get("policy") or {}).get("kind", NONE))
    # the controllers or DLedger decide the roles: the settings that decide replication instead
    nodes = s["cluster"]["brokers"].values()
    if any(str(c.get("enableControllerMode")).lower() == "true" for c in nodes):
        named = [(k, "/".join(sorted({str(c.get(k, d)) for c in nodes}))) for k, d in REPLICATION + ASKED_ONLY]
        out["brokerRole"] = "controller mode (" + ", ".join(
            f"{k}={v}" for k, v in named if (k, v) not in ASKED_ONLY) + ")"
    elif any(str(c.get("enableDLegerCommitLog")).lower() == "true" for c in nodes):
        out["brokerRole"] = "DLedger (a majority acknowledges, before any flush)"
        # DLedgerCommitLog never calls the flush service: DLedger msyncs its log every 10 ms on its own
        # thread (DLedgerConfig.flushFileInterval, not passed through), apart from its acks
        out["flushDiskType"] = "DLedger's own flush every 10 ms (flushDiskType unused)"
    if s["cluster"].get("powerfs"):  # a power loss forgets what these never synced (docs/powerfs.md)
        out["powerfs"] = ", ".join(s["cluster"]["powerfs"])
    return out


# what decides a controller-mode group's replication, with RocketMQ's defaults (MessageStoreConfig)
REPLICATION = (("allAckInSyncStateSet", "false"), ("inSyncReplicas", "1"))
# named only when a run sets them otherwise: minInSyncReplicas refuses a send (IN_SYNC_REPLICAS_NOT_ENOUGH)
# while the SyncStateSet is smaller (CommitLog.asyncPutMessage)
ASKED_ONLY = (("minInSyncReplicas", "1"),)


def _settings_words(st: dict[str, str]) -> str:
    return f"{st['brokerRole']}, {st['flushDiskType']}, transientStorePoolEnable={st['transientStorePoolEnable']} " \
           f"and the {st['policy']} send policy" + (f" (on the powerfs layer: {st['powerfs']})" if st.get("powerfs") else "")


def lost_phrase(s: dict[str, Any]) -> str:
    c, sc = s["counts"], s.get("store_check")
    out = f"lost {_n(c['lost'], 'acknowledged message', 'acknowledged messages')}"
    if not c["lost"]:
        return out
    if sc is None:
        return out + " (not checked against the brokers' stores)"
    by = sc.get("lost_by_broker") or {}
    if len(by) > 1:  # several groups acknowledged them (the checked keys): how many each
        out += " (acknowledged by " + ", ".join(f"{b} {n:,}" for b, n in by.items()) + ")"
    cut = sc.get("lost_truncated") or 0
    absent = "verified absent from every broker's store" if not cut else \
        "in no broker's log" + (f", {cut:,} of them" if cut < sc["lost_from_store"] else ", all") + \
        " truncated from a replica's log when it followed a leader that never had them"
    if sc["lost_from_store"] == c["lost"]:
        return out + f" ({absent})"
    return out + f" ({sc['lost_from_store']} {absent}, {sc['lost_in_delivery']} stored but never delivered)"


def truncated_words(sc: dict[str, Any]) -> str:
    """The store check's lost_truncated in parentheses, or nothing (none, or an older analysis)."""
    n = sc.get("lost_truncated") or 0
    return f" ({n:,} truncated from a replica's log)" if n else ""


def verdict(s: dict[str, Any]) -> str:
    """One sentence a release manager reads: what was done to the cluster, what it lost and duplicated,
    and then what else the run found (`found`), clauses separated by semicolons."""
    c, sc = s["counts"], s.get("store_check")
    sig = (s.get("signature") or {}).get("words")  # first: reproduced, or NOT and why (analysis/judge/signature.py)
    head = f"{s['scenario']}: {sig + '; ' if sig else ''}with {_settings_words(settings(s))}, " \
           f"{faults_phrase(s) or 'a run without faults'}"
    if s.get("complete") is False:
        return (f"{head}: the run did not finish ({'; '.join(s.get('incomplete_reasons') or [])}), so loss is not "
                f"verified: {c.get('undelivered_at_stop', 0)} acknowledged messages were not delivered before the "
                "consumers stopped" + "".join(f"; {x}" for x in found(s)) + ".")
    causes = {k: v for k, v in s["duplicates_by_cause"].items() if v}
    dup = (f"{c['duplicated']} delivered more than once (extra deliveries: "
           + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in causes.items()) + ")") if c["duplicated"] else \
        "none delivered twice"
    extra = []
    if c.get("acked_weak"):
        weak = {k: n for k, n in ((s.get("errors") or {}).get("by_status") or {}).items() if k not in ("SEND_OK", "None") and n}
        named = ": " + ", ".join(f"{k} {n:,}" for k, n in sorted(weak.items(), key=lambda kv: -kv[1])) if weak else ""
        gone_weak = sum(n for k, n in ((sc or {}).get("gone_by_status") or {}).items() if k != "SEND_OK")
        extra.append(f"{c['acked_weak']:,} acknowledged only with a weak flush/slave status{named} "
                     f"({c['acked_weak_lost']} of them lost"
                     + (f"; {gone_weak:,} in no broker's store now" if gone_weak else "") + ")")
    if sc and sc.get("indeterminate_stored"):
        extra.append(f"{sc['indeterminate_stored']} unanswered sends were stored and never delivered")
    if c.get("corrupted_deliveries"):
        extra.append(f"{c['corrupted_deliveries']} damaged deliveries")
    if c.get("unexpected"):
        extra.append(f"{c['unexpected']} deliveries of keys never sent")
    ro = s.get("reused_queue_offsets")
    if ro and ro["positions"]:
        extra.append(f"{ro['positions']:,} queue positions acknowledged to two messages each "
                     f"({ro['lost']:,} of those messages lost)")
    if sc and sc.get("erased_after_delivery"):
        extra.append(f"{sc['erased_after_delivery']:,} acknowledged messages were delivered and then lost by the "
                     "store (in no broker's store now: a later reader would never see them)")
    return f"{head} {lost_phrase(s)}; {dup}" + "".join(f"; {x}" for x in extra + found(s)) + "."


def busy_phrase(s: dict[str, Any]) -> str:
    """e.g. '4,402 of 40,000 sends (11 %) refused busy: REJECTREQUEST 3,390, PCBUSY_CLEAN_QUEUE 433'
    ('' without busy refusals)."""
    b = busy_refusals(s)
    if not b["total"]:
        return ""
    return (f"{b['total']:,} of {b['attempts']:,} sends ({share(b['total'], b['attempts'])}) refused busy: "
            + ", ".join(f"{k} {n:,}" for k, n in b["by_kind"].items()))


def outage_phrases(s: dict[str, Any]) -> list[str]:
    """e.g. "broker-a was missing from namesrv's route for 20 s while 1,839 sends were acknowledged on it"."""
    out = []
    fe = ([m for m in s.get("monitor") or [] if "frame_errors" in m] or [{}])[-1].get("frame_errors") or {}
    for o in lasting_outages(s):
        length = f"for {outage_seconds(o, s)} s" if o["end_ms"] else \
            f"for {outage_seconds(o, s)} s, until the end of the run"
        on = f"while {o['acked_on_it']:,} sends were acknowledged on it" if o["acked_on_it"] else \
            "and no send was acknowledged on it"
        out.append(f"{o['broker']} was missing from namesrv's route {length} {on}")
    if out and fe.get("count"):
        out[-1] += f" (namesrv refused {_n(fe['count'], 'frame', 'frames')} as too long)"
    return out


def catchup_phrases(s: dict[str, Any]) -> list[str]:
    """e.g. "broker-a-s fell 41.2 MB behind its master during cut-a-slave and held all of it 6.0 s after the heal"."""
    out = []
    for r in replica_catchup(s):
        when = f"held all of it {r['caught_up_s']} s after the heal" if r["caught_up_ms"] else \
            "had not caught up at the last sample"
        out.append(f"{r['slave']} fell {r['max_behind_bytes'] / 1e6:.1f} MB behind its master during {r['fault_id']} "
                   f"and {when}")
    return out


def found(s: dict[str, Any]) -> list[str]:
    """What a run found beyond loss and duplication, each a clause of its verdict: whether it reproduced
    the known bug of its `expect:` block (analysis/judge/expect.py), each failover of a replicated group
    (analysis/replication/failover.py) and its two-master seconds, the busy refusals by kind and rate, each route
    outage and its length, the %RETRY% redeliveries by batch position, and a noise that fell short of
    its intent, in its own words (any other fault short of its intent is said so where it is named)."""
    # a known bug's words lead the verdict as its signature (analysis/judge/signature.py): not twice
    exp = None if (s.get("signature") or {}).get("source") == "expect" else (s.get("expect") or {}).get("words")
    out = [x for x in [exp] if x] + failover_phrases(s) \
        + [x for x in [busy_phrase(s)] if x] + outage_phrases(s) + link_phrases(s) + catchup_phrases(s) \
        + disk_error_phrases(s) + power_phrases(s) + [x for x in [order_phrase(s), transaction_phrase(s), timer_phrase(s), pop_phrase(s)] if x]
    rb = s.get("retried_keys_by_batch_position") or {}
    if any(rb.values()) and not s.get("pop"):  # a POP redelivery is the pop phrase's, in its own words
        out.append(f"keys redelivered through %RETRY%: {rb['later_in_batch']:,} at index 1..n-1 of their listener "
                   f"batches, {rb['first_in_batch']:,} at index 0" + (f", {rb['never_first']:,} never delivered "
                                                                     "first-hand" if rb.get("never_first") else ""))
    pace = s.get("load_pace") or {}
    said = " ".join(m["seen"] for m in (s.get("signature") or {}).get("misses") or [])
    if pace.get("short") and pace["words"] not in said:  # the signature's miss names it already
        out.append(pace["words"])
    return out + short_intents(s, detail=True)


def short_intents(s: dict[str, Any], detail: bool = False) -> list[str]:
    """A run's faults that fell short of their intent, each in its own words (e.g. 'Redis noise reached
    6 % of its 200 SET/s (worst of 8 instances)', 'pause of broker-a: froze 1.2 of 5 s'); nothing for
    a fault that does not report its intent. `detail`: only those whose words say more than the
    verdict's head does (a noise's rates: where, of how many); the head gives the others' `brief`."""
    return [str(x["intent"].get("words") or f"{FAULT_WORDS.get(x['fault_kind'], (x['fault_kind'],))[0]} reached "
                f"{pct(reached_pct(x['intent']))} of its intent").replace("; ", ", ")  # one clause of the verdict
            for x in fault_intents(s) if x["intent"].get("short") and not (detail and x["intent"].get("brief"))]


def link_phrases(s: dict[str, Any]) -> list[str]:
    """Per link fault window, each broker's acked sends' round trip inside it against outside it, e.g.
    'during link fault slow-a, acked sends took p50 251 / p99 352 ms on broker-a (outside it 2 / 9 ms),
    p50 2 / p99 8 ms on broker-b (outside it 2 / 9 ms)'."""
    kinds = {(e.get("params") or {}).get("fault_id"): (e.get("params") or {}).get("fault_kind")
             for e in s.get("events", []) if e.get("kind") == "fault"}
    out = []
    for w in s.get("windows") or []:
        by = w.get("send_ms_by_broker") or {}
        if kinds.get(w["id"]) != "link" or not by:
            continue
        out.append(f"during link fault {w['id']}, acked sends took " + ", ".join(
            f"p50 {d['during']['p50']} / p99 {d['during']['p99']} ms on {b} (outside it {d['outside']['p50']} / "
            f"{d['outside']['p99']} ms)" for b, d in by.items() if d["during"]["n"]))
    return out


def hms(t: int) -> str:
    """An epoch second as the verdicts name it (UTC): 23:04:05."""
    return time.strftime("%H:%M:%S", time.gmtime(t))


def _seconds_named(ts: list[int], windows: dict[int, dict[str, int]]) -> str:
    named = [f"{hms(t)} ({', '.join(f'{n} {k:,}' for n, k in windows[t].items())})" for t in ts[:3]]
    return ", ".join(named) + (f" and {len(ts) - 3} more" if len(ts) > 3 else "")


def failover_phrases(s: dict[str, Any]) -> list[str]:
    """Per failover (analysis/replication/failover.py), e.g. 'broker-a after the SIGKILL of broker-a-0 (its master):
    detected after 2.0 s, broker-a-1 elected after 5.0 s, first ack on it after 7.3 s, 1 acknowledged
    message lost in the switch, two masters acknowledged in 1 s: 22:13:40 (broker-a-0 1, broker-a-1 1)';
    then the two-master seconds outside any failover. Nothing for a run without replicated groups."""
    fo = s.get("failover")
    if not fo:
        return []
    wins = {(w["group"], w["t"]): w["nodes"] for w in fo.get("two_master_windows") or []}
    out, named = [], set()
    for f in fo.get("failovers") or []:
        r = f.get("reasons") or {}
        what = f"{FAULT_WORDS.get(f['fault_kind'], (f['fault_kind'],))[0]} of {f['old_master']}" + \
            (" (its master)" if f.get("was_master") else " (not its master)" if f.get("was_master") is False else "")
        new = f.get("new_master")
        parts = [f"detected after {f['detection_s']} s" if f.get("detection_s") is not None else
                 f"not detected ({r.get('detection')})",
                 f"{new} elected after {f['election_s']} s" if new else f"no election ({r.get('election')})"]
        if new:
            parts.append(f"first ack on it after {f['first_ack_new_master_s']} s"
                         if f.get("first_ack_new_master_s") is not None else f"no ack on it ({r.get('first_ack_new_master')})")
        if f.get("first_ack_any_node") and f["first_ack_any_node"] != new:
            parts.append(f"first ack on any node after {f['first_ack_any_s']} s ({f['first_ack_any_node']})")
        n = f.get("lost_in_switch")
        parts.append("loss in the switch not checked against the stores" if n is None else
                     f"{_n(n, 'acknowledged message', 'acknowledged messages')} lost in the switch")
        if f.get("stale_reads"):
            parts.append(f"{_n(f['stale_reads'], 'message', 'messages')} it stored after {new} was elected "
                         "delivered to consumers (read from a deposed master)")
        if f.get("duplicates_after_switch"):
            parts.append(f"{_n(f['duplicates_after_switch'], 'delivery', 'deliveries')} read again from another node "
                         "than the first time (a duplicate of the switch)")
        ts = f.get("two_master_seconds") or []
        named.update((f["group"], t) for t in ts)
        parts.append(f"two masters acknowledged in {len(ts)} s: {_seconds_named(ts, {t: wins[(f['group'], t)] for t in ts})}"
                     if ts else "no second with two acknowledging nodes")
        out.append(f"{f['group']} after the {what}: " + ", ".join(parts))
    rest: dict[str, list[int]] = {}
    for g, t in sorted(wins):
        if (g, t) not in named:
            rest.setdefault(g, []).append(t)
    for g, ts in rest.items():
        out.append(f"two nodes of {g} acknowledged in the same second {_n(len(ts), 'time', 'times')}: "
                   + _seconds_named(ts, {t: wins[(g, t)] for t in ts}))
    return out
