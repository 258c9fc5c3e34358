"""The run's broker groups and their store hosts, from the brokers' configs: pure, no Spark (the report
and the serving gate read it; analysis/replication/acks.py turns it into Spark columns).

The broker's msgId of a stored message (send ledger `offset_msg_id`, Java's offsetMsgId) is
MessageDecoder.createMessageId (5.5.0): the store host's IPv4 address (4 bytes), its port (4 bytes,
an int) and the commit-log offset (8 bytes), in upper-case hex; decodeMessageId reads it back the same
way (32 hex digits: IPv4; 40: IPv6). The store host is BrokerController's storeHost: brokerIP1 and the
listen port, both in each node's broker.conf (cluster/plan/nodes.py). So the first 16 hex digits name the
node that appended the message, whichever node the group called master at the time.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field


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

    @property
    def group_by_node(self) -> dict[str, str]:
        """broker node -> its broker group."""
        return {n: g for g, ns in self.groups.items() for n in ns}

    def group_of(self, node: str) -> str | None:
        return next((g for g, ns in self.groups.items() if node in ns), None)
