"""The verdict in words: one sentence per run (what was done to the cluster, what it lost, what it
found) and the sentences that compare runs."""
from __future__ import annotations

from typing import Any

from analysis.findings import NONE

FAULT_WORDS = {"oom_kill": ("kernel OOM kill", "kernel OOM kills"), "jvm_oom": ("JVM OutOfMemoryError", "JVM OutOfMemoryErrors"),
               "kill": ("SIGKILL", "SIGKILLs"), "pause": ("pause", "pauses"), "restart": ("restart", "restarts"),
               "blkio_throttle": ("disk throttle", "disk throttles"), "page_cache_limit": ("page-cache limit", "page-cache limits"),
               "redis_noise": ("Redis disk noise", "Redis disk noise"), "es_like_noise": ("fio disk noise", "fio disk noise"),
               "topic_flood": ("%RETRY% topic flood", "%RETRY% topic floods"),
               "cleanup_retry_topics": ("%RETRY% topic cleanup", "%RETRY% topic cleanups")}
_NUM = {1: "one", 2: "two", 3: "three"}
SETTINGS = ("brokerRole", "flushDiskType", "transientStorePoolEnable")  # named in every verdict


def _n(n: int, one: str, many: str) -> str:
    return f"{_NUM.get(n, n)} {one if n == 1 else many}"


def faults_phrase(s: dict[str, Any]) -> str:
    """The faults applied in a run, e.g. 'one kernel OOM kill of broker-a' ('' for none)."""
    seen: dict[tuple[str, str], int] = {}
    for e in s.get("events", []):
        if e.get("kind") == "fault" and e.get("outcome") == "ok":
            k = (e.get("params", {}).get("fault_kind") or "fault", str(e.get("target")))
            seen[k] = seen.get(k, 0) + 1
    killed = {t for k, t in seen if k in ("oom_kill", "jvm_oom", "kill")}
    # the restart after a kill is its recovery, not a fault of its own
    parts = [_n(n, *FAULT_WORDS.get(k, (k, k + "s"))) + f" of {t}" for (k, t), n in seen.items()
             if not (k == "restart" and t in killed)]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def settings(s: dict[str, Any]) -> dict[str, str]:
    """What decides loss, per run: the masters' role, flush and TSP settings, and the send policy."""
    masters = [c for c in s["cluster"]["brokers"].values() if c.get("brokerRole", "ASYNC_MASTER") != "SLAVE"]
    out = {k: "/".join(sorted({c.get(k, {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                         "transientStorePoolEnable": "false"}[k]) for c in masters})) for k in SETTINGS}
    out["policy"] = str(((s.get("load") or {}).get("policy") or {}).get("kind", NONE))
    return out


def _settings_words(st: dict[str, str]) -> str:
    return f"{st['brokerRole']}, {st['flushDiskType']}, transientStorePoolEnable={st['transientStorePoolEnable']} " \
           f"and the {st['policy']} send policy"


def lost_phrase(s: dict[str, Any]) -> str:
    c, sc = s["counts"], s.get("store_check")
    out = f"lost {_n(c['lost'], 'acknowledged message', 'acknowledged messages')}"
    if not c["lost"]:
        return out
    if sc is None:
        return out + " (not checked against the brokers' stores)"
    if sc["lost_from_store"] == c["lost"]:
        return out + " (verified absent from every broker's store)"
    return out + f" ({sc['lost_from_store']} verified absent from every broker's store, {sc['lost_in_delivery']} " \
                 "stored but never delivered)"


def verdict(s: dict[str, Any]) -> str:
    """One sentence a release manager reads: what was done to the cluster, and what it lost."""
    c, sc = s["counts"], s.get("store_check")
    head = f"{s['scenario']}: with {_settings_words(settings(s))}, {faults_phrase(s) or 'a run without faults'}"
    if s.get("complete") is False:
        return (f"{head}: the run did not finish ({'; '.join(s.get('incomplete_reasons') or [])}), so loss is not "
                f"verified: {c.get('undelivered_at_stop', 0)} acknowledged messages were not delivered before the "
                "consumers stopped.")
    causes = {k: v for k, v in s["duplicates_by_cause"].items() if v}
    dup = (f"{c['duplicated']} delivered more than once (extra deliveries: "
           + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in causes.items()) + ")") if c["duplicated"] else \
        "none delivered twice"
    extra = []
    if c.get("acked_weak"):
        extra.append(f"{c['acked_weak']} acknowledged only with a weak flush/slave status ({c['acked_weak_lost']} of them lost)")
    if sc and sc.get("indeterminate_stored"):
        extra.append(f"{sc['indeterminate_stored']} unanswered sends were stored and never delivered")
    if c.get("corrupted_deliveries"):
        extra.append(f"{c['corrupted_deliveries']} damaged deliveries")
    if c.get("unexpected"):
        extra.append(f"{c['unexpected']} deliveries of keys never sent")
    return f"{head} {lost_phrase(s)}; {dup}" + "".join(f"; {x}" for x in extra) + "."


def comparisons(sums: list[dict[str, Any]]) -> list[str]:
    """A sentence per pair of different scenarios, taken in order, that had the same faults and differ in
    at most three of the settings that decide loss: the difference, and what each lost."""
    out = []
    first = list({s["scenario"]: s for s in reversed(sums)}.values())[::-1]  # each scenario's first run
    for a, b in zip(first, first[1:]):
        if faults_phrase(a) != faults_phrase(b) or a.get("complete") is False or b.get("complete") is False:
            continue
        sa, sb = settings(a), settings(b)
        diff = [k for k in sa if sa[k] != sb[k]]
        if not 0 < len(diff) <= 3:
            continue
        d = ", ".join(f"{k}={sa[k]}" for k in diff)
        other = ", ".join(f"{k}={sb[k]}" for k in diff)
        under = f"Under {faults_phrase(a)}" if faults_phrase(a) else "Without faults"
        out.append(f"{under}: with {d} ({a['scenario']}) the cluster {lost_phrase(a)}; with {other} "
                   f"({b['scenario']}), {b['counts']['lost']}.")
    return out
