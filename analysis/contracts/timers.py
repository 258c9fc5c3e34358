"""Timers (issue 51): for a timer load (each message's key records the time it is due at:
rmqchaos/ledger/schema.py `due_of`), whether each acknowledged message was delivered on time.

Per acknowledged key, by its first delivery (a later copy cannot be earlier):
- `early`: delivered before it was due, less `slack_ms` (a violation). The slack is the broker's
  own rounding: it files a deliver time into a slot of its timer wheel's precision, rounded down
  (TimerMessageStore; 0 for a delay level, which is counted from the store time, after the send);
- late by how much: the time from its due time to its first delivery, as a distribution
  (exact nearest-rank percentiles, and buckets a person reads);
- `lost`: the reconciliation's class (acknowledged, never delivered although the drain waited
  load.timer.wait past the last due time); `undelivered_at_stop` in a run whose drain did not finish.

Which fault caused what: a key is exposed to a fault whose window overlaps the time the key waited,
from its first send to its due time. Each early, lost or late-by-more-than LATE_MS key is counted
under the first fault it was exposed to, or under none."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.ledgers.latency import histogram, pct_result, percentiles
from rmqchaos.ledger.schema import DUE_SEP

LATE_MS = 5_000  # late enough to count against a fault (the wheel's usual lateness here is < 1.5 s)
#: lateness buckets, upper bounds in ms (the last is open)
BUCKETS = ((1_000, "<= 1 s"), (5_000, "1-5 s"), (30_000, "5-30 s"), (120_000, "30 s-2 min"), (None, "> 2 min"))
EXAMPLES = 5
FOREVER = 2 ** 62  # the end of a fault window that never closes (ms)


def is_timer_key() -> Any:
    """A timer load's key (rmqchaos/ledger/schema.py due_of), as a column expression."""
    return F.col("key").rlike(f"{DUE_SEP}[0-9]+$")


def with_due(df: DataFrame) -> DataFrame:
    """`due_ms` from the key (null for a key of another load)."""
    pat = f"^.*{DUE_SEP}([0-9]+)$"
    return df.withColumn("due_ms", F.when(F.col("key").rlike(pat), F.regexp_extract("key", pat, 1).cast("long")))


def fault_windows(events: list[dict[str, Any]]) -> list[tuple[str, str, str | None, int, int]]:
    """(fault id, kind, target, start_ms, end_ms) of each fault event of the timeline, by start."""
    out = []
    for e in events:
        if e.get("kind") != "fault":
            continue
        p = e.get("params") or {}
        # a fault whose effect outlasts it (a clock jump that stays) counts to the end of the run
        end = FOREVER if (p.get("evidence") or {}).get("persists") else int(e.get("end_ms") or e["start_ms"])
        out.append((str(p.get("fault_id") or e.get("target")), str(p.get("fault_kind") or "fault"), e.get("target"),
                    int(e["start_ms"]), end))
    return sorted(out, key=lambda w: (w[3], w[0]))


def timer_check(keys: DataFrame, events: list[dict[str, Any]], slack_ms: int = 0,
                send: DataFrame | None = None) -> dict[str, Any] | None:
    """{keys, delivered, early {keys, most_ms, examples}, late_ms {n, p50, p95, p99, max}, late_buckets,
    lost, undelivered_at_stop, late_over, by_fault [{id, kind, target, start_ms, end_ms, exposed,
    early, late, lost}], no_fault {exposed, early, late, lost}, slack_ms}; None when no key of the
    run is a timer's. `keys`: the key table (analysis/reconcile/keys.py). With the send ledger `send`, also
    `late_ms_by_broker`: the same distribution per broker group that acknowledged the key (first)."""
    k = with_due(keys.where(F.col("acked") == 1).select("key", "class", "first_start_ms", "first_receive_ms"))
    k = k.where(F.col("due_ms").isNotNull())
    if send is not None:  # the broker group that acknowledged it first: whose wheel held it
        held = send.where(sends.acked()).groupBy("key").agg(F.min_by("broker", "end_ms").alias("broker"))
        k = k.join(held, "key", "left")
    else:
        k = k.withColumn("broker", F.lit(None).cast("string"))
    got = F.col("first_receive_ms").isNotNull()
    early = got & (F.col("first_receive_ms") < F.col("due_ms") - slack_ms)
    late = F.when(got & ~early, F.greatest(F.lit(0), F.col("first_receive_ms") - F.col("due_ms")))
    lost = F.col("class").isin("lost", "undelivered_at_stop")
    k = k.select("key", "class", "broker", "first_start_ms", "due_ms", "first_receive_ms", early.alias("early"),
                 late.alias("late"), lost.alias("lost")).persist()
    try:
        tot = k.agg(F.count("*").alias("n"), F.sum(got.cast("int")).alias("got"),
                    F.sum(F.col("early").cast("int")).alias("early"),
                    F.max(F.when(F.col("early"), F.col("due_ms") - F.col("first_receive_ms"))).alias("most"),
                    F.sum((F.col("class") == "lost").cast("int")).alias("lost"),
                    F.sum((F.col("class") == "undelivered_at_stop").cast("int")).alias("stop"),
                    F.sum((F.col("late") > LATE_MS).cast("int")).alias("late_over"),
                    *[F.sum(_bucket(i).cast("int")).alias(f"b{i}") for i in range(len(BUCKETS))]).collect()[0]
        if not tot["n"]:
            return None
        pct = pct_result(percentiles(histogram(k, {"late": F.col("late")}, F.lit(0))), (0, "late"))
        per = percentiles(histogram(k.where(F.col("broker").isNotNull()), {"late": F.col("late")}, F.col("broker")))
        ex = [{"key": r["key"], "due_ms": int(r["due_ms"]), "receive_ms": int(r["first_receive_ms"]),
               "early_ms": int(r["due_ms"] - r["first_receive_ms"])}
              for r in k.where("early").orderBy(F.col("first_receive_ms") - F.col("due_ms"), "key").limit(EXAMPLES).collect()]
        return {"keys": int(tot["n"]), "delivered": int(tot["got"] or 0), "slack_ms": slack_ms,
                "early": {"keys": int(tot["early"] or 0), "most_ms": int(tot["most"]) if tot["most"] is not None else None,
                          "examples": ex},
                "late_ms": pct, "late_ms_by_broker": {g: pct_result(per, (g, m)) for g, m in sorted(per)},
                "late_buckets": {label: int(tot[f"b{i}"] or 0) for i, (_, label) in enumerate(BUCKETS)},
                "late_over": {"ms": LATE_MS, "keys": int(tot["late_over"] or 0)},
                "lost": int(tot["lost"] or 0), "undelivered_at_stop": int(tot["stop"] or 0),
                **_by_fault(k, fault_windows(events))}
    finally:
        k.unpersist()


def _bucket(i: int) -> Any:
    lo = BUCKETS[i - 1][0] if i else None
    hi = BUCKETS[i][0]
    c = F.col("late").isNotNull()
    if lo is not None:
        c = c & (F.col("late") > lo)
    if hi is not None:
        c = c & (F.col("late") <= hi)
    return c


def _by_fault(k: DataFrame, wins: list[tuple[str, str, str | None, int, int]]) -> dict[str, Any]:
    """Per fault window: keys exposed, and the early, late (> LATE_MS) and lost keys it was the first
    exposure of; `no_fault` the same for keys exposed to none."""
    first = F.lit(None).cast("int")
    for i, (_, _, _, s, e) in reversed(list(enumerate(wins))):  # the first window overlapping the wait
        first = F.when((F.col("first_start_ms") <= e) & (F.col("due_ms") >= s), F.lit(i)).otherwise(first)
    bad = {"early": F.col("early"), "late": F.coalesce(F.col("late") > LATE_MS, F.lit(False)), "lost": F.col("lost")}
    rows = k.groupBy(first.alias("w")).agg(F.count("*").alias("exposed"),
                                           *[F.sum(c.cast("int")).alias(n) for n, c in bad.items()]).collect()
    got = {r["w"]: {n: int(r[n] or 0) for n in ("exposed", *bad)} for r in rows}
    zero = {n: 0 for n in ("exposed", *bad)}
    return {"by_fault": [{"id": fid, "kind": kind, "target": tgt, "start_ms": s, "end_ms": e, **got.get(i, zero)}
                         for i, (fid, kind, tgt, s, e) in enumerate(wins)],
            "no_fault": got.get(None, zero)}


def timer_phrase(s: dict[str, Any]) -> str | None:
    """The verdict's clause on timers, e.g. 'timers: of 3,000 acknowledged, 12 delivered early (up to 58.2 s before
    due), 40 lost; late after due p50 0.4 s, p99 2.1 s, max 61.0 s (by fault: kill-a: 12 early)'; None
    for another load."""
    t = s.get("timers")
    if not t:
        return None
    bad = []
    if t["early"]["keys"]:
        bad.append(f"{t['early']['keys']:,} delivered early (up to {t['early']['most_ms'] / 1000:.1f} s before due)")
    if t["lost"]:
        bad.append(f"{t['lost']:,} lost")
    if t["undelivered_at_stop"]:
        bad.append(f"{t['undelivered_at_stop']:,} not delivered when the drain stopped (not verified)")
    head = (f"timers: of {t['keys']:,} acknowledged, {', '.join(bad)}" if bad
            else f"timers: none of {t['keys']:,} acknowledged early or lost")
    lm = t["late_ms"]
    late = (f"; late after due p50 {lm['p50'] / 1000:.1f} s, p99 {lm['p99'] / 1000:.1f} s, max {lm['max'] / 1000:.1f} s"
            if lm.get("n") else "")
    by = t.get("late_ms_by_broker") or {}
    if len(by) > 1:
        late += " (p99 by broker: " + ", ".join(f"{b} {v['p99'] / 1000:.1f} s" for b, v in by.items() if v.get("n")) + ")"
    over = f"late by over {t['late_over']['ms'] // 1000} s"
    caused = [f"{f['id']}: {', '.join(f'{f[c]:,} ' + (over if c == 'late' else c) for c in ('early', 'lost', 'late') if f[c])}"
              for f in t.get("by_fault", []) if f["early"] or f["lost"] or f["late"]]
    return head + late + (f" (by fault: {'; '.join(caused)})" if caused else "")


def timer_slack_ms(s: Any, brokers: dict[str, dict[str, str]]) -> int | None:
    """How much earlier than due a timer may come without being early: None without a timer load; 0 for
    a delay level; for a deliver time, the brokers' timerPrecisionMs as they ran (1000 where a
    broker.conf does not say), the largest, since the broker rounds a deliver time down to its slot."""
    t = s.load.timer if s.load else None
    if t is None:
        return None
    if t.delay_level is not None:
        return 0
    return max([int(c.get("timerPrecisionMs") or 1000) for c in brokers.values()] or [1000])
