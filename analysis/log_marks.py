"""Named lines of RocketMQ's own logs (rmqchaos/spec/expect.py LOG_MARKS), counted per node: what a
node said about itself, for the figure family `log` (e.g. a controller that declared a live replica
inactive, a broker that discarded a timer). Every file of each node's logs/rocketmqlogs/ is read
once; a node without logs is left out."""
from __future__ import annotations

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


def total(summary: dict[str, Any], mark: str) -> int | None:
    """A mark's lines over every node; None when the summary has no log marks (an older analysis)."""
    lm = summary.get("log_marks")
    return None if lm is None else sum((lm.get(mark) or {}).values())
