"""The key table: one row per key (attempted or received) with its class (analysis/ledgers/rules.py) and the
causes of its duplicate deliveries, from one shuffle of each ledger by key."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.contracts.timers import is_timer_key

RECV_KEYED = ("key", "origin_topic", "broker", "queue_id", "queue_offset", "receive_ms", "batch_index")


def key_table(send: DataFrame, recv: DataFrame, receive_complete: bool = True, txn: DataFrame | None = None) -> DataFrame:
    """One row per key (attempted or received) with its class and duplicate causes. With the
    receive side incomplete, an acknowledged key never delivered is `undelivered_at_stop`, not
    `lost` (analysis/judge/completeness.py). `txn` (a transactional load: analysis/contracts/transactions.py txn_keys):
    an acknowledged half message the application did not commit and that was never delivered is
    `not_committed`, never lost; an extra copy of a key committed more than once (checked after its
    end, or answered commit to several check-backs) is a re-commit (`transaction_recommit`); one of a timer
    message sent once, a re-put by the broker's wheel (`timer_reput`)."""
    # Per (key, topic), then per key: only numeric aggregation buffers, so Spark hash-aggregates;
    # one shuffle by key on each side serves every aggregation and the join (measured: ~1.5x
    # faster than letting Spark shuffle by (key, topic) first, then by key). Each send record is
    # cut to its flags before the shuffle (fewer bytes shuffled than its text columns).
    # The msgIds ride along as the seal's numeric halves (msg_hi/msg_lo: exact, hash-aggregatable): a
    # key whose one answered attempt was delivered under its own msgId, and under no other, needs no
    # msgId join in analysis/reconcile/answers.py (`own_msgid_delivered`).
    outcome = sends.is_outcome()
    flags = send.select("key", "topic", sends.is_intent().cast("long").alias("i"), sends.acked().cast("int").alias("a"),
                        (sends.acked() & (F.col("status") == "SEND_OK")).cast("int").alias("s"),
                        sends.rejected().cast("long").alias("r"), "intended_ms", "start_ms",
                        outcome.cast("long").alias("o"), (outcome & F.col("msg_hi").isNotNull()).cast("long").alias("c"),
                        F.when(outcome, F.col("msg_hi")).alias("h"), F.when(outcome, F.col("msg_lo")).alias("l"))
    per_topic = flags.repartition("key").groupBy("key", "topic").agg(
        F.sum("i").alias("attempts"), F.max("a").alias("acked"), F.max("s").alias("acked_strong"),
        F.sum("r").alias("rejected"), F.min("intended_ms").alias("intended_ms"), F.min("start_ms").alias("start_ms"),
        F.sum("o").alias("o"), F.sum("c").alias("c"), F.min("h").alias("h"), F.min("l").alias("l"))
    sent = per_topic.groupBy("key").agg(
        F.sum("attempts").alias("attempts"), sends.count_where(F.col("attempts") > 0).alias("topics_attempted"),
        F.max("attempts").alias("max_attempts_per_topic"), F.max("acked").alias("acked"),
        F.max("acked_strong").alias("acked_strong"), F.sum("rejected").alias("rejected"),
        F.min("intended_ms").alias("first_intended_ms"), F.min("start_ms").alias("first_start_ms"),
        F.sum("o").alias("s_outcomes"), F.sum("c").alias("s_canonical"), F.min("h").alias("s_h"), F.min("l").alias("s_l"),
    ).where(F.col("attempts") > 0).withColumn(
        "all_rejected", (F.col("rejected") == F.col("attempts")).cast("int")).drop("rejected")
    # Distinct copies and topics per key by aggregating twice (cheaper than countDistinct's expand):
    # first per (key, stored copy), then per key. Retry deliveries are copies of their own (%RETRY%).
    nonretry = F.col("reconsume_times") == 0
    msg = [F.min("h").alias("h0"), F.max("h").alias("h1"), F.min("l").alias("l0"), F.max("l").alias("l1")]
    msg_again = [F.min("h0").alias("h0"), F.max("h1").alias("h1"), F.min("l0").alias("l0"), F.max("l1").alias("l1")]
    per_copy = recv.select(*RECV_KEYED, nonretry.alias("nr"), F.col("msg_hi").alias("h"), F.col("msg_lo").alias("l")) \
        .repartition("key").groupBy("key", "origin_topic", "broker", "queue_id", "queue_offset", "nr").agg(
        F.count("*").alias("n"), F.min("receive_ms").alias("rm"), F.max("batch_index").alias("bi"),
        F.count("h").alias("dm"), *msg)
    per_topic = per_copy.groupBy("key", "origin_topic", "nr").agg(
        F.sum("n").alias("n"), F.count("*").alias("copies"), F.min("rm").alias("rm"), F.max("bi").alias("bi"),
        F.sum("dm").alias("dm"), *msg_again)
    got = per_topic.groupBy("key").agg(F.sum("dm").alias("r_canonical"), *msg_again,
        F.sum("n").alias("deliveries"),
        F.sum(F.when(~F.col("nr"), F.col("n")).otherwise(0)).alias("retry_deliveries"),
        F.sum(F.when(F.col("nr"), F.col("n")).otherwise(0)).alias("first_deliveries"),
        F.sum(F.col("nr").cast("int")).alias("topics_received"),
        F.sum(F.when(F.col("nr"), F.col("copies")).otherwise(0)).alias("copies"),
        F.min("rm").alias("first_receive_ms"),
        # the highest place the key had in a listener batch of a first-hand delivery (a re-pull after
        # a rebalance delivers it first-hand again): an SDK that acks only index 0 (incident 004)
        # sends back exactly the keys that were once at 1..n-1
        F.max(F.when(F.col("nr"), F.col("bi"))).alias("first_batch_index"))
    k = sent.join(got, "key", "full_outer").fillna(0, subset=["deliveries", "retry_deliveries", "first_deliveries",
                                                              "topics_received", "copies"])
    if txn is not None:
        k = k.join(txn, "key", "left")
    committed = F.coalesce(F.col("committed"), F.lit(False)) if txn is not None else F.lit(True)
    rechecked = F.coalesce(F.col("rechecked"), F.lit(False)) if txn is not None else F.lit(False)
    d = F.col("deliveries")
    cls = (F.when(F.col("attempts").isNull(), "unexpected")
           .when(d > 1, "duplicated")
           .when((d == 1) & (F.col("acked") == 1), "ok")
           .when(d == 1, "recovered")
           .when((F.col("acked") == 1) & ~committed, "not_committed")
           .when(F.col("acked") == 1, "lost" if receive_complete else "undelivered_at_stop")
           .when(F.col("all_rejected") == 1, "failed")
           .otherwise("indeterminate"))
    own = ((F.col("s_outcomes") == 1) & (F.col("s_canonical") == 1) & (d > 0) & (F.col("r_canonical") == d)
           & (F.col("h0") == F.col("s_h")) & (F.col("h1") == F.col("s_h"))
           & (F.col("l0") == F.col("s_l")) & (F.col("l1") == F.col("s_l")))
    k = k.withColumn("class", cls).withColumn("own_msgid_delivered", F.coalesce(own, F.lit(False)).cast("int")).drop(
        "s_outcomes", "s_canonical", "s_h", "s_l", "r_canonical", "h0", "h1", "l0", "l1")
    k = k.withColumn("rechecked", rechecked)
    if txn is not None:
        k = k.drop("committed")
    dup = F.col("class") == "duplicated"
    timer = is_timer_key()
    has_first = F.col("first_deliveries") > 0
    extra_copies = F.col("copies") - F.col("topics_received")
    resent_same_topic = F.coalesce(F.col("max_attempts_per_topic"), F.lit(0)) > 1
    causes = {
        "consumer_retry": F.when(has_first, F.col("retry_deliveries")).otherwise(d - 1),
        "backup_topic": F.when(has_first, F.col("topics_received") - 1).otherwise(0),
        "producer_resend": F.when(has_first & resent_same_topic, extra_copies).otherwise(0),
        "transaction_recommit": F.when(has_first & ~resent_same_topic & F.col("rechecked"), extra_copies).otherwise(0),
        "timer_reput": F.when(has_first & ~resent_same_topic & ~F.col("rechecked") & timer, extra_copies).otherwise(0),
        "unexplained": F.when(has_first & ~resent_same_topic & ~F.col("rechecked") & ~timer, extra_copies).otherwise(0),
        "consumer_repull": F.when(has_first, F.col("first_deliveries") - F.col("copies")).otherwise(0),
    }
    for name, expr in causes.items():
        k = k.withColumn(f"dup_{name}", F.when(dup, expr).otherwise(0))
    return k.withColumn("extra_deliveries", F.when(dup, d - 1).otherwise(0)).drop("rechecked")
