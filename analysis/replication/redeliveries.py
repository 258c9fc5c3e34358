"""Who served a repeated delivery: the duplicates a switch caused, told apart from a plain re-pull;
and the deliveries read again because a power loss rolled a broker's consumer offsets back.

A stored copy (key, topic, group, queue, offset; first-hand deliveries, not %RETRY% ones) delivered
more than once is `consumer_repull` in the key table (analysis/reconcile/keys.py): offsets read again. Each
delivery names the node whose pull fetched it (the receive ledger's `served_by`, from the Java
consumer's RPC hook). A repeat served by another node of the group than the copy's first delivery
is a re-read across a switch: the consumer read those offsets again from the node that became master
(its consume offset went back to what that node held). A repeat served by the same node is a
re-pull from it (a rebalance, offsets not committed yet). When either delivery's server is not
known, the repeat is counted as unknown, never guessed.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis.replication.acks import served_node
from analysis.durability.powercuts import power_cuts
from analysis.evidence.topology import Topology

COPY = ("key", "origin_topic", "broker", "queue_id", "queue_offset")
KINDS = ("served_by_another_node", "served_by_the_same_node", "server_unknown")


def repeats(recv: DataFrame, topo: Topology, fos: list[dict[str, Any]]) -> tuple[dict[str, int], list[int]]:
    """The replicated groups' repeat deliveries by who served them ({kind: n}, KINDS), and per
    failover those served by another node that came in its window (from its fault to the next fault
    on its group: `start_ms`, `bound_ms`). One aggregation."""
    groups = list(topo.replicated)
    if not groups:
        return dict.fromkeys(KINDS, 0), [0] * len(fos)
    w = Window.partitionBy(*COPY).orderBy("receive_ms")
    d = (recv.where((F.col("reconsume_times") == 0) & F.col("broker").isin(*groups))
         .select(*COPY, "receive_ms", served_node(topo).alias("node"))
         .withColumn("i", F.row_number().over(w))
         .withColumn("first", F.first("node").over(w))  # the frame from the copy's first row: its node
         .where(F.col("i") > 1))
    known = F.col("node").isNotNull() & F.col("first").isNotNull()
    other = known & (F.col("node") != F.col("first"))
    cols = [F.sum(other.cast("int")).alias("served_by_another_node"),
            F.sum((known & (F.col("node") == F.col("first"))).cast("int")).alias("served_by_the_same_node"),
            F.sum((~known).cast("int")).alias("server_unknown")]
    cols += [F.sum((other & (F.col("broker") == f["group"]) & (F.col("receive_ms") >= f["start_ms"])
                    & (F.col("receive_ms") < f["bound_ms"])).cast("int")).alias(f"f{i}") for i, f in enumerate(fos)]
    row = d.agg(*cols).collect()[0].asDict()
    return ({k: int(row[k] or 0) for k in KINDS}, [int(row[f"f{i}"] or 0) for i in range(len(fos))])


def rollbacks(events: list[dict[str, Any]], brokers: dict[str, dict[str, str]]) -> list[dict[str, Any]] | None:
    """The consumer offsets each power loss rolled back, from its evidence (cluster/local/power.py's
    `knows`): one range [lo, hi) of queue offsets per broker group, topic and queue, with the cut's
    time and the fault. None when no power loss recorded what its brokers knew."""
    out: list[dict[str, Any]] = []
    seen = False
    for fid, node, lost in power_cuts(events):
        f = (lost.get("knows") or {}).get("forgot")
        if f is None:
            continue
        seen = True
        group = (brokers.get(node) or {}).get("brokerName", node)
        out += [{"fault_id": fid, "broker": group, "topic": b["topic"], "queue": int(b["queue"]),
                 "lo": int(b["after"] or 0), "hi": int(b["before"]), "cut_ms": int(lost["cut_ms"])}
                for b in f["offsets_back"]]
    return out if seen else None


def rollback_repeats(recv: DataFrame, ranges: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """Deliveries read again because a restarted broker's consumer offsets went back: a stored copy
    (first-hand) delivered again after the cut, at a queue offset in a range the broker forgot. By
    queue, whichever group's offset went back (the receive ledger does not name the group)."""
    if ranges is None:
        return None
    by_fault = {r["fault_id"]: 0 for r in ranges}
    if not ranges:
        return {"deliveries": 0, "keys": 0, "by_fault": by_fault}
    spark = recv.sparkSession
    r = spark.createDataFrame([(x["fault_id"], x["broker"], x["topic"], x["queue"], x["lo"], x["hi"], x["cut_ms"])
                               for x in ranges], "fault_id string, rb string, rt string, rq int, lo long, hi long, cut long")
    w = Window.partitionBy(*COPY).orderBy("receive_ms")
    d = (recv.where(F.col("reconsume_times") == 0).select(*COPY, "receive_ms")
         .withColumn("i", F.row_number().over(w)).where(F.col("i") > 1))
    hits = (d.join(F.broadcast(r), (F.col("broker") == F.col("rb")) & (F.col("origin_topic") == F.col("rt"))
                   & (F.col("queue_id") == F.col("rq")) & (F.col("queue_offset") >= F.col("lo"))
                   & (F.col("queue_offset") < F.col("hi")) & (F.col("receive_ms") > F.col("cut")))
            .dropDuplicates([*COPY, "receive_ms"]))  # one delivery counts once if ranges of two groups hold it
    rows = hits.groupBy("fault_id").agg(F.count("*").alias("n")).collect()
    for row in rows:
        by_fault[row["fault_id"]] = int(row["n"])
    keys = hits.select("key").distinct().count() if rows else 0
    return {"deliveries": sum(by_fault.values()), "keys": int(keys), "by_fault": by_fault}
