"""Whether the lost and indeterminate keys are in the brokers' stores (cluster/store.py): lost in the
store or in delivery, an unanswered send stored after all or not."""
from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import sends
from analysis.session import BROADCAST_MAX

STORE_LOOKUP_MAX = 100_000  # keys looked up in the brokers' stores per run
STORE_EXAMPLES = 50


def store_check(send: DataFrame, keys: DataFrame, store: Any, warnings: list[str]) -> dict[str, Any]:
    """Every lost and indeterminate key looked up in the brokers' stores (`store.find(topic, key)`,
    cluster/store.py): lost -> lost_from_store (in no commit log) or lost_in_delivery (stored, never
    delivered); indeterminate -> indeterminate_stored (the unanswered send was stored after all and
    never delivered) or indeterminate_not_stored. Bounded by the number of such keys."""
    t0 = time.monotonic()
    targets = keys.where(F.col("class").isin("lost", "indeterminate")).select("key", "class")
    n = int(targets.count())
    unread = list(getattr(store, "unread", []))  # DLedger replicas (cluster/store.py): never called absent
    if unread and n:
        warnings.append(f"the stores of {', '.join(unread)} (DLedger commit logs) are not read: a key counted in no "
                        "commit log was looked up in the other stores only")
    if n > STORE_LOOKUP_MAX:
        warnings.append(f"{n} lost or indeterminate keys: only {STORE_LOOKUP_MAX} were looked up in the store")
        targets = targets.limit(STORE_LOOKUP_MAX)
    small = F.broadcast(targets) if n <= BROADCAST_MAX else targets
    rows = (send.where(sends.is_intent()).join(small, "key").groupBy("key", "class")
            .agg(F.collect_set("topic").alias("topics")).collect()) if n else []
    split = {"lost_from_store": 0, "lost_in_delivery": 0, "indeterminate_stored": 0, "indeterminate_not_stored": 0}
    stored: list[dict[str, Any]] = []
    absent: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: r["key"]):
        locs = [loc for t in sorted(r["topics"]) for loc in store.find(t, r["key"])]
        verdict = {("lost", True): "lost_in_delivery", ("lost", False): "lost_from_store",
                   ("indeterminate", True): "indeterminate_stored",
                   ("indeterminate", False): "indeterminate_not_stored"}[(r["class"], bool(locs))]
        split[verdict] += 1
        (stored if locs else absent).append({"key": r["key"], "class": r["class"], "verdict": verdict,
                                             "topics": sorted(r["topics"]), "stored_at": locs})
    return {"checked": len(rows), **split, "nodes": store.nodes(), "unread_nodes": unread, "method": store.method(),
            "seconds": round(time.monotonic() - t0, 3),
            "examples": (stored + [a for a in absent if a["class"] == "lost"])[:STORE_EXAMPLES]}
