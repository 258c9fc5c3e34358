"""Which node of a broker group stored each acknowledged send, from its offsetMsgId, in Spark columns.

The broker's msgId of a stored message (send ledger `offset_msg_id`, Java's offsetMsgId) is
MessageDecoder.createMessageId (5.5.0): the store host's IPv4 address (4 bytes), its port (4 bytes,
an int) and the commit-log offset (8 bytes), in upper-case hex; decodeMessageId reads it back the same
way (32 hex digits: IPv4; 40: IPv6). The store host is BrokerController's storeHost: brokerIP1 and the
listen port, both in each node's broker.conf (cluster/plan.py). So the first 16 hex digits name the
node that appended the message, whichever node the group called master at the time.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import sends


def store_host_prefix(ip: str, port: int) -> str:
    """The first 16 hex digits of the msgIds a broker at ip:port stores under."""
    return ipaddress.IPv4Address(ip).packed.hex().upper() + struct.pack(">i", port).hex().upper()


def decode_store_host(offset_msg_id: str) -> tuple[str, int, int] | None:
    """(ip, port, commit-log offset) of an IPv4 offsetMsgId, as MessageDecoder.decodeMessageId reads it."""
    if len(offset_msg_id) != 32:
        return None
    try:
        raw = bytes.fromhex(offset_msg_id)
    except ValueError:
        return None
    port, offset = struct.unpack(">iq", raw[4:])
    return str(ipaddress.IPv4Address(raw[:4])), port, offset


@dataclass
class Topology:
    """The run's broker groups as their broker.conf files say: group -> nodes, node -> store host prefix."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    prefix: dict[str, str] = field(default_factory=dict)  # store host prefix -> node
    addrs: dict[str, str] = field(default_factory=dict)  # "ip:port" it serves clients on -> node

    @classmethod
    def of(cls, brokers: dict[str, dict[str, str]]) -> "Topology":
        t = cls()
        for node, conf in sorted(brokers.items()):
            t.groups.setdefault(conf.get("brokerName", node), []).append(node)
            ip, port = conf.get("brokerIP1"), conf.get("listenPort")
            if ip and port:
                t.addrs[f"{ip}:{port}"] = node
                try:
                    t.prefix[store_host_prefix(ip, int(port))] = node
                except ValueError:  # an IPv6 or host name brokerIP1: its sends stay unattributed
                    pass
        return t

    @property
    def replicated(self) -> dict[str, list[str]]:
        """The groups of more than one node (controller-mode replicas, DLedger, master and slaves)."""
        return {g: n for g, n in self.groups.items() if len(n) > 1}

    def group_of(self, node: str) -> str | None:
        return next((g for g, ns in self.groups.items() if node in ns), None)

    def store_node(self) -> Any:
        """A column: the node a row's offset_msg_id names as its store host (null: no offsetMsgId, or
        not a node of the run); on the send and the receive ledger alike."""
        if not self.prefix:
            return F.lit(None).cast("string")
        m = F.create_map(*[F.lit(x) for kv in sorted(self.prefix.items()) for x in kv])
        return F.when(F.length("offset_msg_id") == 32, m[F.upper(F.substring("offset_msg_id", 1, 16))])

    def served_node(self) -> Any:
        """A column: the node a delivery's pull was served by (the receive ledger's `served_by`;
        null: not recorded, or not a node of the run)."""
        if not self.addrs:
            return F.lit(None).cast("string")
        return F.create_map(*[F.lit(x) for kv in sorted(self.addrs.items()) for x in kv])[F.col("served_by")]

    def ack_node(self) -> Any:
        """A column: the node that stored an acknowledged send (null: not acked, or not a known node)."""
        return F.when(sends.acked(), self.store_node())


def acks_per_second(send: DataFrame, topo: Topology) -> list[dict[str, Any]]:
    """Acknowledged sends of the replicated groups per (group, second of end_ms, storing node; null
    when the offsetMsgId names no node of the run): a few rows per second of the run."""
    groups = list(topo.replicated)
    if not groups:
        return []
    rows = (send.where(sends.acked() & F.col("broker").isin(*groups))
            .groupBy(F.col("broker").alias("group"), F.floor(F.col("end_ms") / 1000).alias("t"),
                     topo.ack_node().alias("node"))
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
    node = topo.ack_node()
    cols = [F.min(F.when((node == n) & (F.col("end_ms") >= s) & (F.col("end_ms") < t), F.col("end_ms")))
            .alias(f"a{i}_{j}") for i, (g, s, t) in enumerate(asks) for j, n in enumerate(topo.groups[g])]
    row = send.where(sends.acked()).agg(*cols).collect()[0].asDict()
    return [{n: (None if row[f"a{i}_{j}"] is None else int(row[f"a{i}_{j}"])) for j, n in enumerate(topo.groups[g])}
            for i, (g, _, _) in enumerate(asks)]
