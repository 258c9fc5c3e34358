"""Who served a repeated delivery: the duplicates a switch caused, told apart from a plain re-pull.

A stored copy (key, topic, group, queue, offset; first-hand deliveries, not %RETRY% ones) delivered
more than once is `consumer_repull` in the key table (analysis/keys.py): offsets read again. Each
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

from analysis.acks import served_node
from analysis.topology import Topology

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
