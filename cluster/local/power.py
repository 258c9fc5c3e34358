"""A power loss of local nodes whose stores sit on the powerfs layer (docs/powerfs.md): what the
machine would keep of their stores is what they had fsynced.

In one step, for every node at once: freeze it (the freezer, asked first: from here on it answers
nothing, as a machine without power) and fence its layer right after (the cut: from this instant
nothing becomes durable, an fsync in flight included), abort its layer's FUSE connection (the kernel's dirty pages for the mount
never reach the layer: tests/test_powerfs.py proves it), SIGKILL it, then let each layer forget what
was never synced, unmount it and mount a fresh one on the same store. The node stays
down; a restart finds the store as it was at its last syncs. For a broker, what it knew just before
(topics, groups, consumer offsets, asked) is set against what its store's config files now hold
(cluster/stored/metadata.py): what a restart will have forgotten.
"""
from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from cluster.stored import metadata
from cluster.substrate.powerfs import PowerFS
from rmqchaos.errors import UserError
from rmqclient.admin import RemotingError
from rmqchaos.machine.procs import now_ms

if TYPE_CHECKING:
    from cluster.local.cluster import LocalCluster
    from cluster.local.node import LocalNode


def _summary(drop: dict[str, Any]) -> list[dict[str, Any]]:
    """The drop's files that lost bytes or size, largest loss first."""
    files = [f for f in drop.get("files", []) if f.get("bytes") or f.get("synced_size") != f.get("size_before")]
    return sorted(files, key=lambda f: -int(f.get("bytes") or 0))


def power_loss(c: "LocalCluster", names: list[str]) -> dict[str, dict[str, Any]]:
    nodes: list[LocalNode] = [c.node(n) for n in names]
    off = [n.name for n in nodes if not n.plan.powerfs]
    if off:
        raise UserError(f"power loss of {', '.join(off)}: not on the powerfs layer",
                        "add them to cluster.powerfs (a power_loss fault adds the nodes it targets)")
    layers: dict[str, PowerFS] = {}
    for n in nodes:
        layer = n.layer()
        assert layer is not None
        layers[n.name] = layer
    pids = {n.name: n.pid for n in nodes}
    knew = {n.name: _asked(n) for n in nodes if n.plan.is_broker and pids[n.name] is not None}
    # the power goes, for the disks and the machines together: the freezer is asked first (every task
    # stops at once, but one inside a FUSE call only when the call returns), then every layer is
    # fenced (from here nothing becomes durable: an fsync in flight answers EIO and keeps its undo
    # log, so its task returns and freezes), then the freeze is waited for. Freezing alone let an
    # fsync in flight finish and become durable; fencing alone first left ~20 ms in which a broker
    # still answered, acknowledging writes no longer durable, as a machine without power cannot.
    live = [n for n in nodes if pids[n.name] is not None]
    for n in live:
        n.cgroup.freeze_start(True)
    cut_ms = now_ms()
    fence_ms = {name: layer.fence() for name, layer in layers.items()}
    for n in live:  # nothing leaves these nodes any more
        n.cgroup.wait_frozen(True)
    frozen_ms = now_ms()
    fenced = {name: layer.abort() for name, layer in layers.items()}
    for n in nodes:
        if pids[n.name] is not None and n.running():
            n.kill(signal.SIGKILL)  # thaws after signalling: it runs no code of its own again
    out: dict[str, dict[str, Any]] = {}
    for n in nodes:
        layer = layers[n.name]
        dropped = layer.drop()
        layer.unmount()
        fresh = n.layer()
        totals = fenced[n.name].get("totals") or {}
        out[n.name] = {"pid": pids[n.name], "cut_ms": cut_ms, "was_running": pids[n.name] is not None,
                       "bytes_dropped": int(dropped.get("bytes") or 0), "files": _summary(dropped),
                       "syncs": totals.get("syncs"), "writes": totals.get("writes"),
                       "fenced_ms": fence_ms[n.name], "frozen_ms": frozen_ms,
                       "ops_after_fence": fenced[n.name].get("ops_after_fence"),
                       "remounted": fresh is not None and fresh.alive()}
        if n.name in knew:
            out[n.name]["knows"] = knows(knew[n.name], metadata.on_disk(n.store_path / "config"))
    return out


def _asked(n: "LocalNode") -> dict[str, Any] | None:
    try:
        return metadata.asked(n.plan.addr, timeout=2.0)
    except (RemotingError, OSError):
        return None  # it did not answer: what it knew is not known


def knows(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """The evidence: how many topics, groups and offsets it knew and will load, from which files,
    and what it forgot (None when it did not answer before the cut)."""
    def sizes(t: dict[str, Any]) -> dict[str, int]:
        return {"topics": len(t["topics"]), "groups": len(t["groups"]),
                "offsets": sum(len(q) for q in t["offsets"].values())}
    return {"before": None if before is None else sizes(before), "after": sizes(after), "sources": after["sources"],
            "forgot": None if before is None else metadata.forgot(before, after)}
