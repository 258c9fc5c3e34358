"""disk_error: a node's disk answers its fsyncs (or writes) with an error, for a while, on chosen
files. Its store sits on the powerfs layer (docs/powerfs.md), which fails the matching operations
with EIO (or ENOSPC) and counts each; the data the failed fsync did not make durable stays
forgettable, so a later power_loss drops it. The question: does the broker still say SEND_OK when
its flush failed? (apache/rocketmq #2706, #3129, #5235: on 4.x `MappedFile.flush` logged the
error, advanced its flushed position and acknowledged.)

`files`: `commitlog`, `consumequeue`, `index`, `config`, `checkpoint`, or a glob relative to the
store root (`*` stops at `/`). Its intent: the layer returned at least one error in the window (its
counts for the mount less those it had when the window began). A power loss inside the window mounts
a new layer: the rules follow it (every `tick_s`). `LayerRule`
is what disk_error and disk_slow share: the rules set on the node's layer, following its mount.
The layer's `clear` removes every rule of a node: two such faults on one node must not overlap.
"""
from __future__ import annotations

import random
import time
from typing import Any, Literal

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.protocol import FaultError, Lasting, LastingKind, register
from rmqchaos.errors import UserError

# the store's files by what they are (RocketMQ 5.5.0's store layout, StorePathConfigHelper)
FILES = {"commitlog": ["commitlog/*"], "consumequeue": ["consumequeue/*/*/*"], "index": ["index/*"],
         "config": ["config/*"], "checkpoint": ["checkpoint"]}


class DiskErrorParams(Lasting):
    op: Literal["fsync", "write"] = "fsync"
    errno: Literal["EIO", "ENOSPC"] = "EIO"
    files: list[str] = ["commitlog"]


def globs(files: list[str]) -> list[str]:
    return [g for f in files for g in FILES.get(f, [f])]


def disk_error_intent(node: str, op: str, failures: list[dict[str, Any]]) -> dict[str, Any]:
    n = sum(int(f.get("count") or 0) for f in failures)
    files = sorted({f["path"] for f in failures})
    words = (f"{n:,} {op} error(s) returned on {len(files)} file(s)" if n else
             f"no {op} reached a matching file in the window: nothing failed")
    return intent([happened("errors returned", node, n > 0, words)], f"disk_error on {node}")


def keyed(pid: int, counted: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(pid, f["path"], f.get("errno", "")): f for f in counted}


def since(base: dict[tuple[Any, ...], dict[str, Any]],
          now: dict[tuple[Any, ...], dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """What the layer counted after `base` (its counts for the whole mount when the window began):
    per key the count (and summed delay) less the base's; keys with nothing new left out."""
    out = {}
    for k, f in now.items():
        b = base.get(k) or {}
        n = int(f.get("count") or 0) - int(b.get("count") or 0)
        if n > 0:
            out[k] = {**f, "count": n, **({"delay_ms": int(f["delay_ms"]) - int(b.get("delay_ms") or 0)}
                                          if "delay_ms" in f else {}),
                      # the layer keeps one first time per mount: this window's own is not known then
                      **({"first_ms": None} if b else {})}
    return out


class LayerRule(LastingKind):
    """A fault that sets rules on a node's powerfs layer for its window (disk_error, disk_slow): it
    follows the node's mount (a power loss inside the window mounts a new layer, every `tick_s`),
    keeps what the layer counted under `evidence_key`, and clears the rules at its end."""
    roles = True
    powerfs = True
    tick_s = 0.5
    evidence_key = "failures"

    @classmethod
    def check(cls, params: Any, fault: Any, scenario: Any) -> list[tuple[tuple[Any, ...], str]]:
        return [(("files", i), "one word or glob, without spaces") for i, f in enumerate(params.files)
                if not f or any(c.isspace() for c in f)]

    def apply(self, layer: Any, glob: str) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.seen: dict[tuple[Any, ...], dict[str, Any]] = {}  # (layer pid, path, errno) -> counted in the window
        self.base: dict[tuple[Any, ...], dict[str, Any]] = {}  # ... counted on the layer before the window
        self.t0 = time.time()
        self.pid: int | None = None
        self._follow()
        if self.pid is None:
            raise FaultError(f"{self.name} {self.node.name}: its store is not on the powerfs layer",
                             "add it to cluster.powerfs")

    def _follow(self) -> None:
        """Apply the rules to the node's current mount (again, after a remount) and keep its counts."""
        try:  # mid power loss the mount may be gone or its server quitting: the next tick looks again
            layer = self.node.layer(mount=False)
            if layer is None:
                return
            stats = layer.stats()
            if layer.pid != self.pid:  # a layer counts for its whole mount: what it had counted is not ours
                self.base.update(keyed(layer.pid, stats.get(self.evidence_key) or []))
                for g in globs(self.params.files):
                    self.apply(layer, g)
                self.pid = layer.pid
            self.layer = layer
        except UserError:
            return
        now = keyed(layer.pid, [f for f in stats.get(self.evidence_key) or [] if f.get("op") == self.params.op])
        self.seen.update(since(self.base, now))

    def tick(self) -> None:
        self._follow()

    def counted(self) -> list[dict[str, Any]]:
        self._follow()
        try:
            self.layer.clear()
        except UserError:
            pass  # its server is gone (a power loss at the window's end): nothing left to clear
        return list(self.seen.values())


@register
class DiskError(LayerRule):
    name = "disk_error"
    Params = DiskErrorParams

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        if not topo.local:
            return None
        target, hit = topo.broker_target(rng)
        d, op = seconds(rng, 3, 15), rng.choice(["fsync", "write"])
        return Draw({"target": target, "duration": dur(d), "op": op,
                     "errno": rng.choice(["EIO", "ENOSPC"]) if op == "write" else "EIO",  # ENOSPC: a write's answer
                     "files": [rng.choice(["commitlog", "commitlog", "consumequeue", "config"])]}, d + 10, hit)

    def apply(self, layer: Any, glob: str) -> None:
        layer.fail(self.params.op, self.params.errno, glob)

    def stop(self) -> dict[str, Any]:
        p: DiskErrorParams = self.params  # type: ignore[assignment]
        fails = self.counted()
        return {"intent": disk_error_intent(self.node.name, p.op, fails), "op": p.op, "errno": p.errno,
                "globs": globs(p.files), "failures": fails}
