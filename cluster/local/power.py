"""A power loss of local nodes whose stores sit on the powerfs layer (docs/powerfs.md): what the
machine would keep of their stores is what they had fsynced.

In one step, for every node at once: freeze it (the freezer: from here on it answers nothing, as a
machine without power), fence and abort its layer's FUSE connection (the kernel's dirty pages for the
mount never reach the layer: tests/test_powerfs.py proves it), SIGKILL it, then let each layer
forget what was never synced, unmount it and mount a fresh one on the same store. The node stays
down; a restart finds the store as it was at its last syncs.
"""
from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from cluster.powerfs import PowerFS
from rmqchaos.errors import UserError
from rmqchaos.procs import now_ms

if TYPE_CHECKING:
    from cluster.local import LocalCluster
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
    for n in nodes:  # the power goes: nothing leaves these nodes any more
        if pids[n.name] is not None:
            n.cgroup.freeze(True)
    cut_ms = now_ms()
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
                       "ops_after_fence": fenced[n.name].get("ops_after_fence"),
                       "remounted": fresh is not None and fresh.alive()}
    return out
