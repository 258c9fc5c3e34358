"""disk_error: a node's disk answers its fsyncs (or writes) with an error, for a while, on chosen
files. Its store sits on the powerfs layer (docs/powerfs.md), which fails the matching operations
with EIO (or ENOSPC) and counts each; the data the failed fsync did not make durable stays
forgettable, so a later power_loss drops it. The question: does the broker still say SEND_OK when
its flush failed? (apache/rocketmq #2706, #3129, #5235: on 4.x `MappedFile.flush` logged the
error, advanced its flushed position and acknowledged.)

`files`: `commitlog`, `consumequeue`, `index`, `config`, `checkpoint`, or a glob relative to the
store root (`*` stops at `/`). Its intent: the layer returned at least one error in the window.
"""
from __future__ import annotations

import time
from typing import Any, Literal

from chaos.intent import happened, intent
from chaos.protocol import FaultError, Lasting, LastingKind, register

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


@register
class DiskError(LastingKind):
    name = "disk_error"
    Params = DiskErrorParams
    roles = True
    powerfs = True

    @classmethod
    def check(cls, params: Any, fault: Any, scenario: Any) -> list[tuple[tuple[Any, ...], str]]:
        return [(("files", i), "one word or glob, without spaces") for i, f in enumerate(params.files)
                if not f or any(c.isspace() for c in f)]

    def start(self) -> None:
        p: DiskErrorParams = self.params  # type: ignore[assignment]
        self.layer = self.node.layer()
        if self.layer is None:
            raise FaultError(f"disk_error {self.node.name}: its store is not on the powerfs layer",
                             "add it to cluster.powerfs")
        self.t0 = time.time()
        for g in globs(p.files):
            self.layer.fail(p.op, p.errno, g)

    def stop(self) -> dict[str, Any]:
        p: DiskErrorParams = self.params  # type: ignore[assignment]
        self.layer.clear()
        fails = [f for f in self.layer.stats().get("failures") or [] if f.get("op") == p.op
                 and int(f.get("last_ms") or 0) >= int(self.t0 * 1000)]
        return {"intent": disk_error_intent(self.node.name, p.op, fails), "op": p.op, "errno": p.errno,
                "globs": globs(p.files), "failures": fails}
