"""The power losses a run's events record, node by node (Spark-free: the store check, the offset
rollback count and the verdict read them)."""
from __future__ import annotations

from typing import Any, Iterator


def power_cuts(events: list[dict[str, Any]]) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(fault id, node, that node's record in the fault's `nodes_lost`) for every power loss applied."""
    for e in events:
        p = e.get("params") or {}
        if e.get("kind") == "fault" and p.get("fault_kind") == "power_loss" and e.get("outcome") == "ok":
            for node, lost in ((p.get("evidence") or {}).get("nodes_lost") or {}).items():
                yield p.get("fault_id"), node, lost


def not_started(events: list[dict[str, Any]]) -> dict[str, str]:
    """Node -> why, for every node that did not start again when its power came back (chaos/kinds/power_loss.py)."""
    out: dict[str, str] = {}
    for e in events:
        p = e.get("params") or {}
        if e.get("kind") == "fault" and p.get("fault_kind") == "power_loss":
            out.update((p.get("evidence") or {}).get("not_started") or {})
    return out
