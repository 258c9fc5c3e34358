"""restart: stop a node (if running) and start it again on the same store; returns once it is
ready again (brokers: registered in namesrv). Also what `restart_after` schedules. Its intent: the
node runs again under a new pid and, a broker, is listed by namesrv, and how long that took.

`system_properties` (local backend): JVM system properties the node starts with from then on, over
the scenario's: an operator's change made by a restart, e.g. incident 002's recovery, every namesrv
restarted with `com.rocketmq.remoting.frameMaxLength` raised."""
from __future__ import annotations

import random
import time
from typing import Any

from chaos.draw import Draw, Topology
from chaos.intent import happened, intent
from chaos.protocol import FaultKind, register
from rmqchaos.spec import Fault, Scenario, Strict


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


class RestartParams(Strict):
    system_properties: dict[str, str | int] = {}


@register
class Restart(FaultKind):
    name = "restart"
    Params = RestartParams
    roles = True

    @classmethod
    def check(cls, params: RestartParams, fault: Fault, scenario: Scenario) -> list[tuple[tuple[object, ...], str]]:
        if params.system_properties and scenario.cluster.backend != "local":
            return [(("system_properties",), "a restart with new system_properties needs the local backend (a "
                                            "container restarts with the command it was created with): use backend: local")]
        return []

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        target, hit = topo.any_target(rng)
        return Draw({"target": target}, 20.0, hit)

    def start(self) -> None:
        old, t0 = self.node.pid, time.monotonic()
        props = {k: str(v) for k, v in self.params.system_properties.items()}
        if props:
            self.node.set_system_properties(props)  # type: ignore[attr-defined]  # local backend: check()
        self.node.restart()
        back_s, pid = time.monotonic() - t0, self.node.pid
        registered = None
        if self.ctx.cluster.plans[self.node.name].is_broker:
            reg = self.ctx.cluster.registered()
            registered = reg is not None and self.ctx.cluster.plans[self.node.name].listed_in(reg)
        self.evidence = {"intent": restart_intent(self.node.name, old, pid, back_s, registered),
                         "old_pid": old, "pid": pid, "back_s": round(back_s, 3),
                         **({"system_properties": props} if props else {})}
