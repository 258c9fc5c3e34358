"""disk_slow: a node's disk holds its fsyncs (or writes) for a while, on chosen files: each matching
operation waits `delay` on the powerfs layer (docs/powerfs.md) before it is done, so a SYNC_FLUSH
broker's group commit outlasts `syncFlushTimeout` and it answers FLUSH_DISK_TIMEOUT (seed 003's
slow disk). Unlike `blkio_throttle` it reaches a store on the layer, whose server does the real
writes outside the node's cgroups. An fsync held when the power goes (`power_loss`) made nothing
durable: the layer answers it EIO and keeps its undo log.

`files` as for disk_error. Its intent: the layer held at least one operation in the window; the
evidence gives per file the operations held and the delay they added.
"""
from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import Field

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.kinds.disk_error import LayerRule, globs
from chaos.protocol import Lasting, register
from rmqchaos.spec import Duration


class DiskSlowParams(Lasting):
    op: Literal["fsync", "write"] = "fsync"
    delay: Duration = Field(..., gt=0, le=600)  # seconds each matching operation is held
    files: list[str] = ["commitlog"]


def disk_slow_intent(node: str, op: str, delays: list[dict[str, Any]]) -> dict[str, Any]:
    n = sum(int(f.get("count") or 0) for f in delays)
    ms = sum(int(f.get("delay_ms") or 0) for f in delays)
    files = sorted({f["path"] for f in delays})
    words = (f"{n:,} {op}(s) held {ms / 1000:,.1f} s in all on {len(files)} file(s)" if n else
             f"no {op} reached a matching file in the window: nothing was held")
    return intent([happened("operations held", node, n > 0, words)], f"disk_slow on {node}")


@register
class DiskSlow(LayerRule):
    name = "disk_slow"
    Params = DiskSlowParams

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        if not topo.local:
            return None
        target, hit = topo.broker_target(rng)
        d = seconds(rng, 5, 20)
        return Draw({"target": target, "duration": dur(d), "op": rng.choice(["fsync", "write"]),
                     "delay": f"{rng.choice([50, 200, 500, 1000, 2000])}ms", "files": ["commitlog"]}, d + 10, hit)
    evidence_key = "delays"

    def apply(self, layer: Any, glob: str) -> None:
        layer.slow(self.params.op, round(self.params.delay * 1000), glob)

    def stop(self) -> dict[str, Any]:
        p: DiskSlowParams = self.params  # type: ignore[assignment]
        held = self.counted()
        return {"intent": disk_slow_intent(self.node.name, p.op, held), "op": p.op,
                "delay_ms": round(p.delay * 1000), "globs": globs(p.files), "delays": held}
