"""Queue positions acknowledged twice: two different keys answered with the same (group, topic,
queue, queue offset). A consume queue has one entry per offset, so at most one of them can be read
at that position: the fingerprint of a broker that handed out offsets it had already given (apache/
rocketmq#7689: a master restarted over a commit log longer than its confirm offset rebuilt its
queue offsets from the confirm offset, and the messages beyond it were dispatched later over the new
ones). The load sends one message per request, so each acknowledgement names its own position.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends

EXAMPLES = 5
DELIVERED_MAX = 5000  # delivered keys at shared positions handed to the store check (each a lookup)


def reused_queue_offsets(send: DataFrame, keys: DataFrame) -> dict[str, Any]:
    """{positions, keys, lost, examples, delivered_keys}: positions acknowledged to more than one key,
    the keys so acknowledged, how many of those keys are lost, a few positions with their keys and
    classes, and the delivered keys among them (for the store check: one that is in no store was
    erased after it was read, e.g. by a power loss that rolled the queue back)."""
    pos = ["broker", "topic", "queue_id", "queue_offset"]
    acks = (send.where(sends.acked() & F.col("queue_offset").isNotNull())
            .select(*pos, "key", "end_ms").dropDuplicates([*pos, "key"]))
    shared = acks.groupBy(*pos).agg(F.count("*").alias("n")).where(F.col("n") > 1).select(*pos)
    at = acks.join(shared, pos).join(keys.select("key", "class"), "key", "left").persist()
    try:
        row = at.agg(F.countDistinct(*pos).alias("positions"), F.countDistinct("key").alias("keys"),
                     F.countDistinct(F.when(F.col("class") == "lost", F.col("key"))).alias("lost")).collect()[0]
        delivered = [r["key"] for r in at.where(F.col("class") == "ok").select("key").distinct()
                     .orderBy("key").limit(DELIVERED_MAX).collect()]
        first = at.select(*pos).distinct().orderBy(*pos).limit(EXAMPLES)
        ex = at.join(first, pos).orderBy(*pos, "end_ms").collect()
    finally:
        at.unpersist()
    examples: dict[tuple, dict[str, Any]] = {}
    for r in ex:
        e = examples.setdefault(tuple(r[c] for c in pos), {**{c: r[c] for c in pos}, "acks": []})
        e["acks"].append({"key": r["key"], "end_ms": int(r["end_ms"]), "class": r["class"]})
    return {"positions": int(row["positions"]), "keys": int(row["keys"]), "lost": int(row["lost"]),
            "examples": list(examples.values()), "delivered_keys": delivered}
