"""disk_full: a node's disk reads full for a while, without the bytes to fill it. Its store sits on
the powerfs layer (docs/powerfs.md), which answers statfs as if the file system were `pct` % used;
writes still succeed. RocketMQ decides from those figures alone (DefaultMessageStore's clean service,
first 60 s after the store started, then every `cleanResourceInterval`, 10 s by default): above `diskSpaceWarningLevelRatio` (90 %) it marks
the disk full and refuses every put, the producers' (code 14, SERVICE_NOT_AVAILABLE) and its own
re-puts (timers coming due, delay levels, retries); above `diskSpaceCleanForciblyRatio` (85 %) it
deletes its oldest commit log files at once, expired or not, keeping the one in use.

Its intent: statfs read through the node's mount shows the asked use, and the broker marked its disk
full in its store log within the window ("physic disk maybe full soon ..., so mark disk full"); the
evidence also gives the line with which it marked it OK again after the window, when it did.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictInt

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent, measure
from chaos.protocol import FaultError, Lasting, LastingKind, register
from rmqchaos.machine import diskstats
from rmqchaos.errors import UserError

FULL_MARK, OK_MARK = "so mark disk full", "so mark disk ok"


class DiskFullParams(Lasting):
    pct: Annotated[StrictInt, Field(ge=1, le=100)] = 95  # the use statfs reads, in %


def marks(log: Path, offset: int) -> tuple[list[str], list[str]]:
    """The broker's own lines past `offset` of its store log: (marked full, marked OK again)."""
    if not log.exists():
        return [], []
    with open(log, "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return [x for x in lines if FULL_MARK in x], [x for x in lines if OK_MARK in x]


def disk_full_intent(node: str, pct: int, read: float | None, full: list[str]) -> dict[str, Any]:
    return intent([measure("% used read", node, pct, read or 0.0,
                           f"statfs on {node}'s store read {read:.1f} % used (asked {pct} %)" if read is not None
                           else f"{node}'s store could not be read"),
                   happened("marked full", node, bool(full),
                            f"{node} marked its disk full" if full else
                            f"{node} never marked its disk full in the window (it looks 60 s after its start, then every 10 s)")],
                  f"disk_full on {node}")


@register
class DiskFull(LastingKind):
    name = "disk_full"
    Params = DiskFullParams
    roles = True
    powerfs = True
    tick_s = 0.5  # a power loss inside the window mounts a new layer: the rule follows it

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        if not topo.local:
            return None
        target, hit = topo.broker_target(rng)
        d = seconds(rng, 15, 40)  # the broker looks every 10 s
        return Draw({"target": target, "duration": dur(d), "pct": rng.choice([87, 95])}, d + 15, hit)

    def _log(self) -> Path:
        return self.node.log_file.parent / "store.log"  # the DefaultMessageStore logger's file

    def _follow(self) -> None:
        try:
            layer = self.node.layer(mount=False)
            if layer is not None and layer.pid != self.pid:
                layer.full(self.params.pct)  # type: ignore[attr-defined]
                self.pid, self.layer = layer.pid, layer
        except UserError:
            return  # mid power loss: the next tick looks again

    def start(self) -> None:
        self.pid: int | None = None
        log = self._log()
        self.log_from = log.stat().st_size if log.exists() else 0
        self._follow()
        if self.pid is None:
            raise FaultError(f"disk_full {self.node.name}: its store is not on the powerfs layer",
                             "add it to cluster.powerfs")
        self.read = 100.0 * diskstats.used_ratio(self.layer.mount_point)

    def tick(self) -> None:
        self._follow()

    def stop(self) -> dict[str, Any]:
        p: DiskFullParams = self.params  # type: ignore[assignment]
        full, _ = marks(self._log(), self.log_from)
        self._follow()
        try:
            self.layer.full(0)
        except UserError:
            pass  # its server is gone (a power loss at the window's end)
        ev: dict[str, Any] = {"intent": disk_full_intent(self.node.name, p.pct, self.read, full), "pct": p.pct,
                              "read_pct": round(self.read, 1), "marked_full": full[:1]}
        # the broker marks it OK at its next check: wait for it (bounded), so the evidence says when
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            _, ok = marks(self._log(), self.log_from)
            if ok or not full:
                break
            time.sleep(0.5)
        ev["marked_ok"] = marks(self._log(), self.log_from)[1][-1:]
        return ev
