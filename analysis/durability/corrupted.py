"""Which deliveries were damaged, and how (properties, body, or a msgId only), and which were of keys
never attempted: counts by kind and examples with where they were read from."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.ledgers.session import BROADCAST_MAX

CORRUPTED_KINDS = ("properties_damaged", "body_damaged", "msgid_only")
CORRUPTED_EXAMPLES = 20  # listed per kind


def corrupted(send: DataFrame, keys: DataFrame, recv: DataFrame, n_unexpected: int
               ) -> tuple[dict[str, int], list[dict[str, Any]], list[dict[str, Any]]]:
    """Damaged deliveries by kind, and up to CORRUPTED_EXAMPLES of each with where they were read from:
    - properties_damaged: the body is intact but the KEYS property is missing or names another key
      (attributed to the body's key); seen after an OOM kill: a copy whose tail the kill cut;
    - body_damaged: a self-verifying body that fails its checksum;
    - msgid_only: no verifiable body, a key never attempted, but the msgId (UNIQ_KEY) of a sent
      message (only the unexpected deliveries' msgIds are looked up among the sent ones).
    Also up to CORRUPTED_EXAMPLES deliveries of keys never attempted (`n_unexpected` deliveries).
    The receive ledger is read once: its few odd deliveries (damaged or unexpected) are kept and
    everything here is counted and listed from them."""
    cols = ["key", "prop_key", "body_key", "msg_id", "broker", "queue_id", "queue_offset", "receive_ms"]
    conds = {"properties_damaged": (F.col("body_ok") == F.lit(True)) & ~F.col("prop_key").eqNullSafe(F.col("body_key")),
             "body_damaged": F.col("body_ok") == F.lit(False)}
    small = (lambda df: F.broadcast(df)) if n_unexpected <= BROADCAST_MAX else (lambda df: df)
    if n_unexpected:
        unexp = keys.where(F.col("class") == "unexpected").select("key", F.lit(True).alias("unexpected"))
        flagged = recv.join(small(unexp), "key", "left")
    else:
        flagged = recv.withColumn("unexpected", F.lit(None).cast("boolean"))
    odd = flagged.where(conds["properties_damaged"] | conds["body_damaged"] | F.col("unexpected")).persist()
    try:
        n = odd.agg(*[sends.count_where(c).alias(k) for k, c in conds.items()]).collect()[0]
        counts, examples = {k: int(n[k] or 0) for k in conds}, []
        for kind, c in conds.items():
            if counts[kind]:
                examples += [{"kind": kind, **r.asDict()} for r in odd.where(c).select(*cols).limit(CORRUPTED_EXAMPLES).collect()]
        counts["msgid_only"] = 0
        unexpected: list[dict[str, Any]] = []
        if n_unexpected:
            bad_recv = odd.where(F.col("unexpected"))
            unexpected = [r.asDict() for r in bad_recv.select(
                "key", "prop_key", "body_key", "body_ok", "msg_id", "origin_topic", "broker", "queue_id", "queue_offset",
                "receive_ms").limit(CORRUPTED_EXAMPLES).collect()]
            ids = bad_recv.select("msg_id").where(F.col("msg_id").isNotNull()).distinct()
            sent = (send.where(sends.is_outcome() & F.col("msg_id").isNotNull()).join(small(ids), "msg_id", "left_semi")
                    .select("msg_id", F.col("key").alias("sent_key"), F.col("outcome").alias("sent_outcome"))
                    .dropDuplicates(["msg_id"]))
            bad = bad_recv.join(sent, "msg_id").select(*cols, "sent_key", "sent_outcome").persist()
            try:
                counts["msgid_only"] = int(bad.count())
                examples += [{"kind": "msgid_only", **r.asDict()} for r in bad.limit(CORRUPTED_EXAMPLES).collect()]
            finally:
                bad.unpersist()
    finally:
        odd.unpersist()
    for e in examples:
        e["damage"] = _damage(e)
    return counts, examples, unexpected


def _damage(e: dict[str, Any]) -> str:
    """What was damaged in one corrupted delivery, in words."""
    if e["kind"] == "properties_damaged":
        return ("KEYS property missing" if e["prop_key"] is None else f"KEYS property reads {e['prop_key']!r}") + \
            f"; the intact body names {e['body_key']!r}"
    if e["kind"] == "body_damaged":
        return "body fails its checksum" + (f" (its header names {e['body_key']!r})" if e["body_key"] else "")
    return (f"KEYS property reads {e['prop_key']!r}; its msgId is that of the {e.get('sent_outcome')} send of "
            f"{e.get('sent_key')!r} (no verifiable body)")
