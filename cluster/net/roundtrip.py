"""What a network fault cuts or slows, named, and one round trip over it: the members of a scenario
(nodes and clients) with their loopback addresses and listener ports, the links a `partition` or
`link` fault names, and a probe that any RocketMQ remoting server answers at once.

Shared by the fault kinds (chaos/kinds/partition.py, chaos/kinds/link.py) and the cluster monitor
(cluster/watch/monitor.py), which probes every such link once a second (its `links` field)."""
from __future__ import annotations

import socket
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from cluster.plan.nodes import addresses, plan
from cluster.net.toxiproxy import measure_rtt
from rmqchaos.errors import UserError
from rmqchaos.spec import Scenario, is_role, role_group
from rmqclient.frame import Frame, encode_frame

#: a request code no RocketMQ server handles: every remoting server (namesrv, broker, proxy) answers
#: it with REQUEST_CODE_NOT_SUPPORTED at once, which is all a round trip needs
PROBE_CODE = 9999
PROBE_REQUEST = encode_frame(Frame(code=PROBE_CODE, opaque=1))
PROBE_TIMEOUT_S = 0.5  # the monitor's: a cut link costs at most this for the connect and again for the answer


def role_candidates(s: Scenario, role: str) -> list[str]:
    """The nodes that may hold a role when it is resolved (chaos/targets.py): every node of the
    broker group of `master-of:<group>`, every standalone controller for `controller-leader` and `controller-followers`."""
    group = role_group(role)
    return [p.name for p in plan(s) if (p.broker_name == group if group is not None else p.role == "controller")]


def named_endpoints(s: Scenario, member: str) -> list[tuple[str, str, list[int]]]:
    """(process name, address, listening ports) of each process a member names ([] for an unknown
    name): a node is itself, `consumers` every consumer instance (`consumer-<id>`), a role every
    node that may hold it."""
    at = addresses(s)
    ports = {p.name: p.ports for p in plan(s)}
    if is_role(member):
        return [(n, at[n], ports[n]) for n in role_candidates(s, member)]
    if member in ports:
        return [(member, at[member], ports[member])]
    if member == "consumers":
        return [(k, a, []) for k, a in at.items() if k.startswith("consumer-")]
    if member == "producers" or member.startswith("consumer-") and member in at:
        return [(member, at[member], [])]
    return []


def endpoints(s: Scenario, member: str) -> list[tuple[str, list[int]]]:
    """(address, listening ports) of each process a member names ([] for an unknown name)."""
    return [(a, p) for _, a, p in named_endpoints(s, member)]


def members(s: Scenario) -> list[str]:
    return [p.name for p in plan(s)] + ["producers", "consumers"] + \
        [f"consumer-{c.id}" for c in (s.consumers.instances if s.consumers else [])]


def remoting_port(s: Scenario, member: str) -> int | None:
    """The port a remoting request gets an answer on: the node's first, the proxy's remoting port."""
    for p in plan(s):
        if p.name == member:
            return p.ports[1] if p.role == "proxy" else p.ports[0]
    return None


@dataclass(frozen=True)
class Probed:
    """One link the monitor probes: `frm` connects from `client` to `to`'s `server`:`port`."""
    frm: str
    to: str
    client: str
    server: str
    port: int

    @property
    def key(self) -> str:
        return f"{self.frm} -> {self.to}"


def cross_pairs(groups: list[list[str]]) -> list[tuple[str, str]]:
    """Every (from, to) pair of members in different groups of a partition, both ways."""
    pairs: list[tuple[str, str]] = []
    for i, gi in enumerate(groups):
        for gj in groups[i + 1:]:
            pairs += [(a, b) for a in gi for b in gj] + [(b, a) for a in gi for b in gj]
    return pairs


def pair_links(s: Scenario, pairs: list[tuple[str, str]]) -> list[Probed]:
    """The probed links of (from, to) member pairs, each once: from each process of `from` to each of
    `to` that listens."""
    out: dict[str, Probed] = {}
    for frm, to in pairs:
        for fname, faddr, _ in named_endpoints(s, frm):
            for tname, taddr, tports in named_endpoints(s, to):
                port = remoting_port(s, tname) if tports else None
                if port is not None and fname != tname:
                    out.setdefault(f"{fname} -> {tname}", Probed(fname, tname, faddr, taddr, port))
    return list(out.values())


def fault_links(s: Scenario) -> list[Probed]:
    """Every link the scenario's network faults name, each once: a `partition`'s cross-group pairs
    where one side listens (probed from the side that connects, both ways when both listen), a
    `link`'s from -> to (and to -> from with `both`). Members are resolved to processes."""
    pairs: list[tuple[str, str]] = []
    for f in s.faults:
        p = f.params
        if f.kind == "partition":
            pairs += cross_pairs([g for g in p.get("groups") or [] if isinstance(g, list)])
        elif f.kind == "link" and isinstance(p.get("from"), str) and isinstance(p.get("to"), str):
            pairs.append((p["from"], p["to"]))
            if p.get("both"):
                pairs.append((p["to"], p["from"]))
    return pair_links(s, pairs)


def read_frame(sock: socket.socket) -> bytes:
    """One remoting frame (length-prefixed) from `sock`, bounded by its timeout."""
    def read(n: int) -> bytes:
        buf = b""
        while len(buf) < n:  # bounded by n and the socket's timeout
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf
    head = read(4)
    (n,) = struct.unpack(">i", head)
    if not 0 < n <= 1 << 20:
        raise ConnectionError(f"not a remoting frame (length {n})")
    return head + read(n)


def probe(link: Probed, timeout: float = PROBE_TIMEOUT_S) -> float | None:
    """One PROBE_CODE round trip from the link's client address (so its fault's rules apply) on a
    fresh connection, in ms (2 decimals); None when nothing answered within `timeout` (connect, then
    the answer) or the connection failed."""
    try:
        r = measure_rtt(f"{link.server}:{link.port}", 1, request=PROBE_REQUEST, source=link.client,
                        timeout=timeout, reply=read_frame)
    except (OSError, ConnectionError, UserError):
        return None
    return round(r.samples_ms[0], 2)


def probe_all(pool: ThreadPoolExecutor, links: list[Probed],
              timeout: float = PROBE_TIMEOUT_S) -> Callable[[], dict[str, float | None]]:
    """Start every link's probe at once; the returned callable waits for them and returns
    {link key: rtt_ms or None}."""
    futs = {ln.key: pool.submit(probe, ln, timeout) for ln in links}
    return lambda: {k: f.result() for k, f in futs.items()}


def probe_now(links: list[Probed], timeout: float = PROBE_TIMEOUT_S) -> dict[str, float | None]:
    """Every link probed once, all at once, on a pool of its own: at most `timeout` twice."""
    if not links:
        return {}
    with ThreadPoolExecutor(min(16, len(links)), "probe-now") as pool:
        return probe_all(pool, links, timeout)()
