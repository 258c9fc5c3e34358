"""Per-key order (issue 50): for an ordered load (each message's key names its sharding key and its
sequence in it: rmqchaos/ledger/schema.py `shard_of`), whether each sharding key's messages were delivered
in the order they were sent, in Jepsen's and OpenChaos's terms.

Deliveries of one sharding key are taken in the order they were received (receive time, then queue
offset, then consumer). Each delivery is one of:
- `in_order`: the first delivery of its sequence number, above every number delivered before it;
- `reordered`: the first delivery of its number, below one delivered before it (an inversion);
- `repeat_out_of_order`: a number delivered again after a higher one (a redelivery that breaks order,
  e.g. a queue re-read from an older offset after a rebalance);
- `repeat_in_order`: delivered again, not after a higher one (at-least-once, order kept).
A `gap` is an acknowledged number never delivered although a higher one of its key was (a loss inside
the stream; a loss after the last delivered number is the reconciliation's plain loss). A key is
judged by every anomaly it shows; the windows are the seconds in which order broke, merged."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.evidence.findings import time_origin
from rmqchaos.ledger.schema import ORDER_SEP

KINDS = ("reordered", "repeat_out_of_order", "gap")
WINDOW_JOIN_S = 2  # anomalous seconds closer than this form one window
EXAMPLES = 5


def with_shard(df: DataFrame) -> DataFrame:
    """`shard_key` and `shard_seq` from the key (null for a key of an unordered load)."""
    pat = f"^(.*){ORDER_SEP}([0-9]+)$"
    return (df.withColumn("shard_key", F.when(F.col("key").rlike(pat), F.regexp_extract("key", pat, 1)))
              .withColumn("shard_seq", F.when(F.col("key").rlike(pat), F.regexp_extract("key", pat, 2).cast("long"))))


def deliveries(recv: DataFrame) -> DataFrame:
    """Every delivery of an ordered key with its class (module docstring)."""
    # the receive ledger's used columns (analysis/ledgers/schemas.py RECEIVE_USED): no consumer id; a tie in
    # time on one queue goes by its offset
    d = with_shard(recv.select("key", "receive_ms", "queue_offset", "broker")).where(F.col("shard_key").isNotNull())
    order = ["receive_ms", "queue_offset", "broker"]
    before = Window.partitionBy("shard_key").orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
    nth = Window.partitionBy("shard_key", "shard_seq").orderBy(*order)
    d = d.withColumn("prev_max", F.max("shard_seq").over(before)).withColumn("nth", F.row_number().over(nth))
    first, higher_before = F.col("nth") == 1, F.col("prev_max").isNotNull() & (F.col("shard_seq") < F.col("prev_max"))
    return d.withColumn("order", F.when(first & higher_before, "reordered").when(first, "in_order")
                        .when(higher_before, "repeat_out_of_order").otherwise("repeat_in_order"))


def gaps(send: DataFrame, delivered: DataFrame) -> DataFrame:
    """(shard_key, shard_seq, key) acknowledged, never delivered, below the key's highest delivered number."""
    acked = with_shard(send.where(sends.acked()).select("key").distinct()).where(F.col("shard_key").isNotNull())
    top = delivered.groupBy("shard_key").agg(F.max("shard_seq").alias("top"))
    seen = delivered.select("shard_key", "shard_seq").distinct()
    return (acked.join(seen, ["shard_key", "shard_seq"], "left_anti").join(top, "shard_key")
            .where(F.col("shard_seq") < F.col("top")).select("shard_key", "shard_seq", "key"))


def homes(send: DataFrame) -> DataFrame:
    """Per sharding key: `home`, the broker its first acknowledged message went to, and `queues`, how
    many queues its acknowledged messages went to (more than one: the key moved, a route or queue-count
    change)."""
    acked = with_shard(send.where(sends.acked()).select("key", "end_ms", "broker", "queue_id")).where(
        F.col("shard_key").isNotNull())
    return acked.groupBy("shard_key").agg(F.min_by("broker", "end_ms").alias("home"),
                                          F.countDistinct("broker", "queue_id").alias("queues"))


def causes(bad: DataFrame, send: DataFrame) -> dict[str, Any]:
    """The keys that broke order (`bad`: shard_key, msgs: its anomalous messages) by cause: `moved`
    (sent to more than one queue: the order a key had on its old queue is not the order on its new one)
    or `stayed` (one queue all along: a redelivery or a rebalance broke it), and by home broker; the
    same for their anomalous messages (`messages`)."""
    h = bad.join(homes(send), "shard_key", "left")
    rows = h.groupBy("home", (F.col("queues") > 1).alias("moved")).agg(
        F.count("*").alias("n"), F.sum("msgs").alias("msgs")).collect()
    keys: dict[str, Any] = {"moved": 0, "stayed": 0, "by_home_broker": {}}
    msgs: dict[str, Any] = {"moved": 0, "stayed": 0, "by_home_broker": {}}
    for r in rows:
        home, how = r["home"] or "unknown", "moved" if r["moved"] else "stayed"
        for out, n in ((keys, int(r["n"])), (msgs, int(r["msgs"] or 0))):
            out["by_home_broker"][home] = out["by_home_broker"].get(home, 0) + n
            out[how] += n
    for out in (keys, msgs):
        out["by_home_broker"] = dict(sorted(out["by_home_broker"].items()))
    return {**keys, "messages": msgs}


def windows(seconds: list[int]) -> list[dict[str, int]]:
    """Sorted anomalous seconds -> [{start_ms, end_ms}] (merged when closer than WINDOW_JOIN_S)."""
    out: list[dict[str, int]] = []
    for s in seconds:
        if out and s - out[-1]["end_ms"] // 1000 <= WINDOW_JOIN_S:
            out[-1]["end_ms"] = (s + 1) * 1000
        else:
            out.append({"start_ms": s * 1000, "end_ms": (s + 1) * 1000})
    return out


def window_seconds(s: dict[str, Any]) -> list[tuple[int, int]] | None:
    """The order windows as (from, to) seconds on the report plots' time axis (second 0: the first
    attempt), for the verdict and the report alike; None when the run has no time axis."""
    if not s.get("series"):
        return None
    t0 = time_origin(s)
    return [(w["start_ms"] // 1000 - t0, w["end_ms"] // 1000 - t0) for w in (s.get("order") or {}).get("windows") or []]


def order_check(send: DataFrame, recv: DataFrame) -> dict[str, Any] | None:
    """{keys, messages, keys_in_order, keys_by_anomaly {kind: n}, messages_by_anomaly {kind: n},
    windows [{start_ms, end_ms}], examples [{shard_key, anomaly, seqs}], causes {moved, stayed,
    by_home_broker, messages {moved, stayed, by_home_broker}} (of the keys that broke order, and of their
    anomalous messages), keys_by_home_broker, keys_moved (of every key)};
    None when no key of the run is an ordered one."""
    d = deliveries(recv).persist()
    try:
        if d.limit(1).count() == 0:
            return None
        g = gaps(send, d).persist()
        per = d.groupBy("order").agg(F.count("*").alias("n"), F.countDistinct("shard_key").alias("keys")).collect()
        msgs = {r["order"]: int(r["n"]) for r in per}
        keys_by = {r["order"]: int(r["keys"]) for r in per}
        grow = g.agg(F.count("*").alias("n"), F.countDistinct("shard_key").alias("keys")).collect()[0]
        bad = (d.where(F.col("order").isin("reordered", "repeat_out_of_order")).select("shard_key")
               .union(g.select("shard_key")).groupBy("shard_key").agg(F.count("*").alias("msgs"))).persist()
        bad_keys = bad.select("shard_key")
        n_keys = d.select("shard_key").distinct().count()
        secs = sorted(int(r["s"]) for r in d.where(F.col("order").isin("reordered", "repeat_out_of_order"))
                      .select((F.col("receive_ms") / 1000).cast("long").alias("s")).distinct().collect())
        ex_keys = [r["shard_key"] for r in bad_keys.orderBy("shard_key").limit(EXAMPLES).collect()]
        ex = {k: [int(r["shard_seq"]) for r in d.where(F.col("shard_key") == k).orderBy("receive_ms", "queue_offset",
                                                                                          "broker").collect()]
              for k in ex_keys}
        out = {"keys": n_keys, "messages": sum(msgs.values()),
               "keys_in_order": n_keys - bad_keys.count(),
               "keys_by_anomaly": {"reordered": keys_by.get("reordered", 0),
                                   "repeat_out_of_order": keys_by.get("repeat_out_of_order", 0),
                                   "gap": int(grow["keys"])},
               "messages_by_anomaly": {"reordered": msgs.get("reordered", 0),
                                       "repeat_out_of_order": msgs.get("repeat_out_of_order", 0),
                                       "gap": int(grow["n"]), "repeat_in_order": msgs.get("repeat_in_order", 0)},
               "windows": windows(secs), "examples": [{"shard_key": k, "seqs": ex[k]} for k in ex_keys],
               "causes": causes(bad, send)}
        h = homes(send).groupBy("home").agg(F.count("*").alias("n"), F.sum((F.col("queues") > 1).cast("int")).alias("m"))
        rows = h.collect()
        out["keys_by_home_broker"] = {r["home"] or "unknown": int(r["n"]) for r in rows}
        out["keys_moved"] = sum(int(r["m"] or 0) for r in rows)  # every key sent to more than one queue
        g.unpersist()
        bad.unpersist()
        return out
    finally:
        d.unpersist()


def order_phrase(s: dict[str, Any]) -> str | None:
    """The verdict's clause on order, e.g. 'order: 12 of 80 sharding keys broke it (reordered: 5 keys, 9
    messages; repeated out of order: 7 keys, 40 messages; gaps: 1 key, 1 message), in 2 window(s)
    lasting 3 s and 1 s (at 20-23 s and 41-42 s since the first attempt)'; None for an unordered load."""
    o = s.get("order")
    if not o:
        return None
    bad = o["keys"] - o["keys_in_order"]
    moved = f"; {o['keys_moved']:,} of them moved to another queue" if o.get("keys_moved") else ""
    if not bad:
        return f"order: all {o['keys']:,} sharding keys in order ({o['messages']:,} deliveries){moved}"
    k, m = o["keys_by_anomaly"], o["messages_by_anomaly"]
    parts = [f"{w}: {k[a]:,} key(s), {m[a]:,} message(s)" for a, w in
             (("reordered", "reordered"), ("repeat_out_of_order", "repeated out of order"), ("gap", "gaps")) if k.get(a)]
    ws = o.get("windows") or []
    lasting = " and ".join(f"{(w['end_ms'] - w['start_ms']) // 1000} s" for w in ws[:3]) + (", ..." if len(ws) > 3 else "")
    at = window_seconds(s)
    if ws and at is not None:  # when, on the report plots' time axis, so a reader can set it beside the faults
        lasting += (" (at " + " and ".join(f"{a}-{b} s" for a, b in at[:3])
                    + (", ..." if len(ws) > 3 else "") + " since the first attempt)")
    c = o.get("causes") or {}
    why = ""
    if c and bad:
        homes_ = ", ".join(f"{n:,} on {b}" for b, n in c["by_home_broker"].items())
        why = (f"; {c['moved']:,} had moved to another queue, {c['stayed']:,} stayed on theirs"
               + (f" (first sent to: {homes_})" if homes_ else ""))
    return (f"order: {bad:,} of {o['keys']:,} sharding keys broke it ({'; '.join(parts)})"
            + (f", in {len(ws)} window(s) lasting {lasting}" if ws else "") + why)
