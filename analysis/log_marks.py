"""Named lines of RocketMQ's own logs (rmqchaos/spec/expect.py LOG_MARKS), counted per node: what a
node said about itself, for the figure family `log` (e.g. a controller that declared a live replica
inactive, a broker that discarded a timer). Every file of each node's logs/rocketmqlogs/ is read
once; a node without logs is left out."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rmqchaos.spec.expect import LOG_MARKS


def log_marks(cluster_dir: Path) -> dict[str, dict[str, int]]:
    """{mark: {node: lines}} over every node directory of `cluster_dir`; marks no node wrote are {}."""
    out: dict[str, dict[str, int]] = {m: {} for m in LOG_MARKS}
    if not cluster_dir.is_dir():
        return out
    for node in sorted(d for d in cluster_dir.iterdir() if (d / "logs" / "rocketmqlogs").is_dir()):
        counts = dict.fromkeys(LOG_MARKS, 0)
        for f in sorted((node / "logs" / "rocketmqlogs").glob("*.log")):
            with open(f, "rb") as fh:
                for line in fh:
                    for m, (text, _) in LOG_MARKS.items():
                        if text.encode() in line:
                            counts[m] += 1
        for m, n in counts.items():
            if n:
                out[m][node.name] = n
    return out


# DLedger's elector (DLedgerLeaderElector via MemberState): "[n0] [VOTE_RESULT] has been elected to be the leader in term 1"
_ELECTED = re.compile(rb"\[VOTE_RESULT\] has been elected to be the leader in term (\d+)")


def dledger_elections(cluster_dir: Path) -> dict[str, list[int]]:
    """{node: the terms it was elected leader in, in its logs' order} for every node whose logs say so
    (DLedger replicas only). A term two elections name (one node's or two) was reused: the votes
    that made its first leader were forgotten (DLedger writes its term and vote, `currterm`, without
    an fsync: docs/findings.md)."""
    out: dict[str, list[int]] = {}
    if not cluster_dir.is_dir():
        return out
    for node in sorted(d for d in cluster_dir.iterdir() if (d / "logs" / "rocketmqlogs").is_dir()):
        lines = []
        for f in sorted((node / "logs" / "rocketmqlogs").glob("*.log")):
            with open(f, "rb") as fh:
                lines += [(ln[:19], int(m[1])) for ln in fh if (m := _ELECTED.search(ln))]
        if lines:
            out[node.name] = [t for _, t in sorted(lines)]  # each line leads with its time
    return out


def terms_reused(summary: dict[str, Any]) -> int | None:
    """(broker group, term) pairs with more than one election; None when no node's logs were read."""
    el = summary.get("dledger_elections")
    if el is None:
        return None
    groups = {n: c.get("brokerName", n) for n, c in (summary.get("cluster") or {}).get("brokers", {}).items()}
    seen: dict[tuple[str, int], int] = {}
    for node, terms in el.items():
        for t in terms:
            seen[(groups.get(node, node), t)] = seen.get((groups.get(node, node), t), 0) + 1
    return sum(1 for n in seen.values() if n > 1)


def total(summary: dict[str, Any], mark: str) -> int | None:
    """A mark's lines over every node; None when the summary has no log marks (an older analysis)."""
    lm = summary.get("log_marks")
    return None if lm is None else sum((lm.get(mark) or {}).values())
