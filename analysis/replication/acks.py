"""Which node of a broker group stored each acknowledged send, from its offsetMsgId, in Spark columns
(the topology and the msgId's decoding: analysis/evidence/topology.py)."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.evidence.topology import Topology


def store_node(topo: Topology) -> Any:
    """A column: the node a row's offset_msg_id names as its store host (null: no offsetMsgId, or
    not a node of the run); on the send and the receive ledger alike."""
    if not topo.prefix:
        return F.lit(None).cast("string")
    m = F.create_map(*[F.lit(x) for kv in sorted(topo.prefix.items()) for x in kv])
    return F.when(F.length("offset_msg_id") == 32, m[F.upper(F.substring("offset_msg_id", 1, 16))])


def served_node(topo: Topology) -> Any:
    """A column: the node a delivery's pull was served by (the receive ledger's `served_by`;
    null: not recorded, or not a node of the run)."""
    if not topo.addrs:
        return F.lit(None).cast("string")
    return F.create_map(*[F.lit(x) for kv in sorted(topo.addrs.items()) for x in kv])[F.col("served_by")]


def ack_node(topo: Topology) -> Any:
    """A column: the node that stored an acknowledged send (null: not acked, or not a known node)."""
    return F.when(sends.acked(), store_node(topo))


def acks_per_second(send: DataFrame, topo: Topology) -> list[dict[str, Any]]:
    """Acknowledged sends of the replicated groups per (group, second of end_ms, storing node; null
    when the offsetMsgId names no node of the run): a few rows per second of the run."""
    groups = list(topo.replicated)
    if not groups:
        return []
    rows = (send.where(sends.acked() & F.col("broker").isin(*groups))
            .groupBy(F.col("broker").alias("group"), F.floor(F.col("end_ms") / 1000).alias("t"),
                     ack_node(topo).alias("node"))
            .agg(F.count("*").alias("n")).collect())
    return [{"group": r["group"], "t": None if r["t"] is None else int(r["t"]), "node": r["node"], "n": int(r["n"])}
            for r in rows]


def two_master_windows(per_second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seconds in which two or more nodes of one group stored acknowledged sends: {group, t,
    nodes: {node: acks}}, by group and second."""
    by: dict[tuple[str, int], dict[str, int]] = {}
    for r in per_second:
        if r["node"] is not None and r["t"] is not None:
            by.setdefault((r["group"], r["t"]), {})[r["node"]] = r["n"]
    return [{"group": g, "t": t, "nodes": dict(sorted(n.items()))}
            for (g, t), n in sorted(by.items()) if len(n) > 1]


def first_acks(send: DataFrame, topo: Topology, asks: list[tuple[str, int, int]]) -> list[dict[str, int | None]]:
    """Per (group, from_ms, to_ms): the end_ms of the first send acknowledged by each of the group's
    nodes in [from_ms, to_ms) — one aggregation for all of them."""
    if not asks:
        return []
    node = ack_node(topo)
    cols = [F.min(F.when((node == n) & (F.col("end_ms") >= s) & (F.col("end_ms") < t), F.col("end_ms")))
            .alias(f"a{i}_{j}") for i, (g, s, t) in enumerate(asks) for j, n in enumerate(topo.groups[g])]
    row = send.where(sends.acked()).agg(*cols).collect()[0].asDict()
    return [{n: (None if row[f"a{i}_{j}"] is None else int(row[f"a{i}_{j}"])) for j, n in enumerate(topo.groups[g])}
            for i, (g, _, _) in enumerate(asks)]
