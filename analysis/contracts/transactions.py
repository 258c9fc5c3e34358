"""Transactions (issue 50): what became of every half message a transactional load stored, from the
send ledger (the half's answer), the transaction ledger (the application's decision and its answers
to check-backs: rmqchaos/ledger/schema.py TXN_FIELDS) and the receive ledger. Each key is one of:

- `committed_delivered`: committed (the application's own end, or its answer to a check-back) and
  delivered, once or more (the extra deliveries counted apart);
- `committed_lost`: committed, never delivered (only where the receive side finished; else
  `committed_undelivered_at_stop`);
- `rolled_back_delivered`: rolled back and delivered all the same (a violation);
- `rolled_back`: rolled back, not delivered;
- `unknown_in_time` / `unknown_late`: ended unknown, or never ended (`abandoned`: the producer
  crashed between the half message and its end), and resolved by a check-back within `bound_ms` of
  the half message's answer (the broker's transactionTimeOut plus one transactionCheckInterval,
  plus 5 s) or after it;
- `unknown_never`: ended unknown, no check-back answered before the run ended;
- `undecided`: stored, but the application recorded no decision (a producer that died between the
  half message and its end) and no check-back resolved it;
- `discarded`: of those two (never resolved), the ones the broker gave up on after transactionCheckMax
  check-backs: their half is in its TRANS_CHECK_MAX_TIME_TOPIC (looked up in the brokers' stores,
  cluster/stored/messages.py; without a store, or past STORE_LOOKUP_MAX keys, they stay where they were).

A violation outranks timeliness: a key resolved by a check-back is `rolled_back_delivered` or
`committed_lost` before it is in time or late.

Also the keys the broker asked about after the application had already committed or rolled them
back (`checked_after_end`: its END_TRANSACTION did not take, e.g. apache/rocketmq#8313, or a master
that died before it), and the same by the broker group that stored the half, the second it did and the
second of the last check-back (`checked_after_end_by_second`): with the run's faults, the halves a
group stored before a fault hit it and was asked about again after it (figure txn_checked_after_fault)."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.durability.store_check import STORE_LOOKUP_MAX
from rmqchaos.spec.expect import TXN_CLASSES as CLASSES  # the figures' names (transactions.<class>): one source

SLACK_MS = 5000
# where a broker puts a half message it has checked transactionCheckMax times (TopicValidator
# .RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC; DefaultTransactionalMessageCheckListener.resolveDiscardMsg keeps
# its properties, KEYS among them)
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
AFTER_END_ROWS = 100_000  # (group, second stored, second asked) rows of checked_after_end_by_second kept


def txn_keys(txn: DataFrame) -> DataFrame:
    """Per key of a transactional load, for the key table: `committed` (the application's own end
    committed it without an error, or it answered a check-back commit) and `rechecked` (committed more
    than once: the broker asked about it after the application's own end, or it answered commit to
    several check-backs, each about another re-appended copy of the half: a second copy the broker then
    stores is a re-commit, not a producer's resend)."""
    app = F.col("source") == "app"
    return txn.groupBy("key").agg(
        F.max(F.when((app & (F.col("decision") == "commit") & F.col("error").isNull())
                     | (~app & (F.col("answer") == "commit")), 1).otherwise(0)).alias("committed"),
        F.min(F.when(app & F.col("decision").isin("commit", "rollback"), F.col("decided_ms"))).alias("ended_ms"),
        F.max(F.when(~app, F.col("decided_ms"))).alias("last_check_ms"),
        F.sum(F.when(~app & (F.col("answer") == "commit"), 1).otherwise(0)).alias("check_commits")).select(
        "key", (F.col("committed") == 1).alias("committed"),
        (F.coalesce(F.col("last_check_ms") > F.col("ended_ms"), F.lit(False)) | (F.col("check_commits") > 1))
        .alias("rechecked"))


def transaction_check(send: DataFrame, txn: DataFrame, recv: DataFrame, receive_complete: bool,
                      timeout_ms: int = 6000, interval_ms: int = 30000, store: Any = None) -> dict[str, Any]:
    """{keys, classes {class: keys}, extra_deliveries, checks, checked_after_end,
    checked_after_end_by_second {broker group: [[second stored, second of the last check-back, halves]]},
    bound_ms, examples}. With `store` (cluster/stored/messages.py's), the keys never resolved are looked up in its
    discard topic."""
    bound = timeout_ms + interval_ms + SLACK_MS
    # the broker group that stored the half (its first acknowledgement)
    group = F.col("broker") if "broker" in send.columns else F.lit(None).cast("string")
    half = (send.where(sends.acked()).groupBy("key").agg(F.min("end_ms").alias("half_ms"),
                                                         F.min_by(group, F.col("end_ms")).alias("half_group")))
    app = F.col("source") == "app"
    t = txn.groupBy("key").agg(
        F.first(F.when(app, F.col("decision")), ignorenulls=True).alias("decided"),
        F.min(F.when(app, F.col("decided_ms"))).alias("ended_ms"),
        F.max(F.when(app & F.col("error").isNotNull(), 1).otherwise(0)).alias("end_failed"),
        F.sum(F.when(~app, 1).otherwise(0)).alias("checks"),
        F.min(F.when(~app & F.col("answer").isin("commit", "rollback"), F.col("decided_ms"))).alias("resolved_ms"),
        F.max(F.when(~app & (F.col("answer") == "commit"), 1).otherwise(0)).alias("check_commit"),
        F.max(F.when(~app & (F.col("answer") == "rollback"), 1).otherwise(0)).alias("check_rollback"),
        F.max(F.when(~app, F.col("decided_ms"))).alias("last_check_ms"))
    d = recv.groupBy("key").agg(F.count("*").alias("deliveries"))
    k = half.join(t, "key", "left").join(d, "key", "left").fillna({"deliveries": 0, "checks": 0})
    committed = ((F.col("decided") == "commit") & (F.col("end_failed") == 0)) | (F.col("check_commit") == 1)
    rolled = ((F.col("decided") == "rollback") & (F.col("end_failed") == 0)) | (F.col("check_rollback") == 1)
    got = F.col("deliveries") > 0
    unknown = F.col("decided") == "unknown"
    # no end from the application (it crashed first): to the broker as unknown as an unknown end
    left = unknown | F.col("decided").isNull()
    # the violations first: what became of a key outranks how soon it was resolved
    cls = (F.when(rolled & got, "rolled_back_delivered")
           .when(committed & ~got, "committed_lost" if receive_complete else "committed_undelivered_at_stop")
           .when(F.col("decided").isNull() & F.col("resolved_ms").isNull(), "undecided")
           .when(unknown & F.col("resolved_ms").isNull(), "unknown_never")
           .when(left & (F.col("resolved_ms") - F.col("half_ms") <= bound), "unknown_in_time")
           .when(left, "unknown_late")
           .when(committed, "committed_delivered")
           .otherwise("rolled_back"))
    k = k.withColumn("class", cls).persist()
    # asked about after the application's own end (its END, or the broker's op record of it, did not take)
    after_end = F.col("decided").isin("commit", "rollback") & (F.col("last_check_ms") > F.col("ended_ms"))
    try:
        by = {r["class"]: int(r["n"]) for r in k.groupBy("class").agg(F.count("*").alias("n")).collect()}
        row = k.agg(F.count("*").alias("keys"), F.sum(F.greatest(F.col("deliveries") - 1, F.lit(0))).alias("extra"),
                    F.sum("checks").alias("checks"),
                    F.sum(F.when(F.col("decided").isNull(), 1).otherwise(0)).alias("abandoned"),
                    F.sum(F.when(after_end, 1).otherwise(0)).alias("after_end")).collect()[0]
        # the same halves by the group that stored them, the second it did and the second of their last
        # check-back: a fault on that group between the two is what made the broker ask again
        # (figure txn_checked_after_fault, analysis/judge/figures.py); bounded by the run's length squared
        after: dict[str, list[list[int]]] = {}
        for r in (k.where(after_end).groupBy(F.coalesce(F.col("half_group"), F.lit("")).alias("g"),
                                              F.floor(F.col("half_ms") / 1000).alias("h"),
                                              F.floor(F.col("last_check_ms") / 1000).alias("c"))
                  .agg(F.count("*").alias("n")).orderBy("g", "h", "c").limit(AFTER_END_ROWS).collect()):
            after.setdefault(r["g"], []).append([int(r["h"]), int(r["c"]), int(r["n"])])
        ex = {c: [r["key"] for r in k.where(F.col("class") == c).orderBy("key").limit(3).collect()]
              for c in ("rolled_back_delivered", "committed_lost", "unknown_late", "unknown_never") if by.get(c)}
        if store is not None:
            never = [(r["key"], r["class"]) for r in k.where(F.col("class").isin("unknown_never", "undecided"))
                     .select("key", "class").orderBy("key").limit(STORE_LOOKUP_MAX).collect()]
            gone = [(key, c) for key, c in never if store.find(DISCARD_TOPIC, key)]
            for key, c in gone:
                by[c] -= 1
            by["discarded"] = len(gone)
            if gone:
                ex["discarded"] = [key for key, _ in gone[:3]]
                if "unknown_never" in ex:
                    out = {key for key, _ in gone}
                    ex["unknown_never"] = [key for key, c in never if c == "unknown_never" and key not in out][:3]
    finally:
        k.unpersist()
    return {"keys": int(row["keys"]), "classes": {c: by.get(c, 0) for c in CLASSES},
            "extra_deliveries": int(row["extra"] or 0), "checks": int(row["checks"] or 0),
            "abandoned": int(row["abandoned"] or 0),
            "checked_after_end": int(row["after_end"] or 0), "checked_after_end_by_second": after,
            "bound_ms": bound, "examples": ex}


def transaction_phrase(s: dict[str, Any]) -> str | None:
    """The verdict's clause on transactions; None for a load without them."""
    t = s.get("transactions")
    if not t:
        return None
    c = t["classes"]
    unknown = c["unknown_in_time"] + c["unknown_late"] + c["unknown_never"]
    parts = [f"{c['committed_delivered']:,} committed and delivered"
             + (f" ({t['extra_deliveries']:,} extra deliveries)" if t["extra_deliveries"] else ""),
             f"{c['committed_lost']:,} committed and LOST" if c["committed_lost"] else "",
             f"{c['committed_undelivered_at_stop']:,} committed, undelivered at stop (not verified)"
             if c["committed_undelivered_at_stop"] else "",
             f"{c['rolled_back'] + c['rolled_back_delivered']:,} rolled back"
             + (f" ({c['rolled_back_delivered']:,} DELIVERED all the same)" if c["rolled_back_delivered"] else ""),
             f"{unknown:,} ended unknown ({c['unknown_in_time']:,} resolved by a check-back in time, "
             f"{c['unknown_late']:,} late, {c['unknown_never']:,} never)" if unknown else "",
             f"{t.get('abandoned', 0):,} left without an end by a producer crash" if t.get("abandoned") else "",
             f"{c['undecided']:,} with no decision recorded" if c["undecided"] else "",
             f"{c['discarded']:,} discarded by the broker after transactionCheckMax check-backs"
             if c.get("discarded") else "",
             f"{t['checked_after_end']:,} asked about after their end" if t["checked_after_end"] else ""]
    return f"transactions: {t['keys']:,} half messages stored: " + ", ".join(x for x in parts if x)
