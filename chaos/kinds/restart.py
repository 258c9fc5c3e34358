"""restart: stop a node (if running) and start it again on the same store; returns once it is
ready again (brokers: registered in namesrv). Also what `restart_after` schedules. Its intent: the
node runs again under a new pid and, a broker, is listed by namesrv, and how long that took."""
from __future__ import annotations

import random
import time
from typing import Any

from chaos.draw import Draw, Topology
from chaos.intent import happened, intent
from chaos.protocol import FaultKind, register


def restart_intent(node: str, old_pid: int | None, pid: int | None, back_s: float,
                   registered: bool | None) -> dict[str, Any]:
    """`registered`: whether namesrv lists it (None: not a broker)."""
    back = pid is not None and pid != old_pid
    ms = [happened("back", node, back, f"back as pid {pid} after {back_s:.1f} s" if back else
                   f"not running {back_s:.1f} s after the restart began" if pid is None else f"still pid {pid}")]
    if registered is not None:
        ms.append(happened("registered", node, registered, "listed by namesrv" if registered else
                           "not listed by namesrv"))
    return intent(ms, f"restart of {node}")


@register
class Restart(FaultKind):
    name = "restart"
    roles = True

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        target, hit = topo.any_target(rng)
        return Draw({"target": target}, 20.0, hit)

    def start(self) -> None:
        old, t0 = self.node.pid, time.monotonic()
        self.node.restart()
        back_s, pid = time.monotonic() - t0, self.node.pid
        registered = None
        if self.ctx.cluster.plans[self.node.name].is_broker:
            reg = self.ctx.cluster.registered()
            registered = reg is not None and self.ctx.cluster.plans[self.node.name].listed_in(reg)
        self.evidence = {"intent": restart_intent(self.node.name, old, pid, back_s, registered),
                         "old_pid": old, "pid": pid, "back_s": round(back_s, 3)}
