"""Named lines of RocketMQ's own logs (rmqchaos/spec/expect.py LOG_MARKS), counted per node: what a
node said about itself, for the figure family `log` (e.g. a controller that declared a live replica
inactive, a broker that discarded a timer). Every file of each node's logs/rocketmqlogs/ is read
once; a node without logs is left out."""
from __future__ import annotations

import re
from collections import Counter
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


# ... and its term's changes: "n0_[INCREASE_TERM] from 1 to 2"
_TERM = re.compile(rb"\[INCREASE_TERM\] from (\d+) to (\d+)")


# ... and a follower's truncation to its leader's log, when it cut entries past it:
# "[TRUNCATE]leaderId=n0 index=5102 truncatePos=6735097 != maxPos=6761517, this is usually happened on the old leader"
_TRUNCATE = re.compile(rb"\[TRUNCATE\]leaderId=\S+ index=\d+ truncatePos=(\d+) != maxPos=(\d+)")


def dledger_lines(cluster_dir: Path) -> dict[str, list[tuple[bytes, str, int, int]]]:
    """{node: [(time, "elected" | "term" | "truncate", a, b)]} in time order (each line leads with its
    time), read once per analysis: `dledger_terms` and `truncations` take it."""
    out: dict[str, list[tuple[bytes, str, int, int]]] = {}
    if not cluster_dir.is_dir():
        return out
    for node in sorted(d for d in cluster_dir.iterdir() if (d / "logs" / "rocketmqlogs").is_dir()):
        lines = []
        for f in sorted((node / "logs" / "rocketmqlogs").glob("*.log")):
            with open(f, "rb") as fh:
                for ln in fh:
                    if m := _ELECTED.search(ln):
                        lines.append((ln[:19], "elected", int(m[1]), int(m[1])))
                    elif m := _TERM.search(ln):
                        lines.append((ln[:19], "term", int(m[1]), int(m[2])))
                    elif m := _TRUNCATE.search(ln):
                        lines.append((ln[:19], "truncate", int(m[1]), int(m[2])))
        if lines:
            out[node.name] = sorted(lines, key=lambda x: x[0])  # stable: one second keeps its file order
    return out


def dledger_terms(lines: dict[str, list[tuple[bytes, str, int, int]]]) -> dict[str, dict[str, list[int]]]:
    """The summary's `dledger_elections` and `dledger_terms_forgotten` (from `dledger_lines`)."""
    return {"dledger_elections": _elections(lines), "dledger_terms_forgotten": _forgotten(lines)}


def truncations(lines: dict[str, list[tuple[bytes, str, int, int]]]) -> dict[str, list[tuple[int, int]]]:
    """{node: [(truncatePos, maxPos)]}: the log positions a DLedger follower cut when it followed a
    leader with a shorter log; the bytes stay until written over (cluster/stored/messages.py `in_log`)."""
    out = {n: [(a, b) for _, k, a, b in ls if k == "truncate"] for n, ls in lines.items()}
    return {n: r for n, r in out.items() if r}


def _elections(lines: dict[str, list[tuple[bytes, str, int, int]]]) -> dict[str, list[int]]:
    """{node: the terms it was elected leader in, in its logs' order} for every node whose logs say so
    (DLedger replicas only). A term two elections name (one node's or two) was reused: the votes
    that made its first leader were forgotten (DLedger writes its term and vote, `currterm`, without
    an fsync: docs/findings.md)."""
    out = {n: [a for _, k, a, _ in ls if k == "elected"] for n, ls in lines.items()}
    return {n: ts for n, ts in out.items() if ts}


def _forgotten(lines: dict[str, list[tuple[bytes, str, int, int]]]) -> dict[str, list[int]]:
    """{node: the terms it entered again from term 0, having been in them before} for every DLedger
    replica whose logs show its term: a replica that restarts with its `currterm` lost starts at term
    0 with no vote and climbs back into the term of its log's last entry, in which it had voted."""
    out: dict[str, list[int]] = {}
    for node, ls in lines.items():
        highest, again = 0, []
        for _, kind, a, b in ls:
            if kind == "term" and a == 0 and 0 < b <= highest:
                again.append(b)
            highest = max(highest, b)
        if any(k == "term" for _, k, _, _ in ls):
            out[node] = again
    return out


def terms_forgotten(summary: dict[str, Any]) -> int | None:
    """Terms DLedger replicas entered again from 0 (their term and vote forgotten); None: not read."""
    tf = summary.get("dledger_terms_forgotten")
    return None if tf is None else sum(len(v) for v in tf.values())


def terms_reused(summary: dict[str, Any]) -> int | None:
    """(broker group, term) pairs with more than one election; None when no node's logs were read."""
    el = summary.get("dledger_elections")
    if el is None:
        return None
    groups = {n: c.get("brokerName", n) for n, c in (summary.get("cluster") or {}).get("brokers", {}).items()}
    seen = Counter((groups.get(node, node), t) for node, terms in el.items() for t in terms)
    return sum(1 for n in seen.values() if n > 1)


def total(summary: dict[str, Any], mark: str) -> int | None:
    """A mark's lines over every node; None when the summary has no log marks (an older analysis)."""
    lm = summary.get("log_marks")
    return None if lm is None else sum((lm.get(mark) or {}).values())
