"""pause: freeze a node (cgroup freezer for `local`, `docker pause`) for `duration`, then thaw it. A
long-lived occurrence: start freezes, stop thaws (early, if the load ends first).

Its intent is the seconds it was seen frozen against the seconds it was meant to hold: the freezer's
state is read at the start and every `tick_s` (a SIGKILL of the node thaws it, as may someone else),
so a pause thawed early counts only up to the first sample that found it thawed."""
from __future__ import annotations

import random
import time
from typing import Any

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import intent, measure, num
from chaos.protocol import FaultKind, register
from rmqchaos.spec import Duration, Strict


class PauseParams(Strict):
    duration: Duration = 5.0


def pause_intent(node: str, asked_s: float, held_s: float, frozen_s: float, load_ended: bool) -> dict[str, Any]:
    """`held_s`: how long the occurrence lasted; `frozen_s`: of that, seen frozen. A pause the load's end
    cut short was asked to hold only until then."""
    want = min(asked_s, held_s) if load_ended else asked_s
    words = f"froze {num(frozen_s)} of {num(want)} s" + (" (the load ended first)" if load_ended and held_s < asked_s else "")
    return intent([measure("s frozen", node, want, frozen_s, words)], f"pause of {node}")


@register
class Pause(FaultKind):
    name = "pause"
    Params = PauseParams
    roles = True
    tick_s = 0.25  # how soon a thaw by someone else is seen

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        target, hit = topo.any_target(rng)
        d = seconds(rng, 3, 20)
        return Draw({"target": target, "duration": dur(d)}, d + 10, hit)

    @classmethod
    def span(cls, params: Any) -> float:
        return float(params.duration)

    def start(self) -> None:
        self.pid = self.running_pid()
        self.node.pause()
        self.t0 = time.monotonic()
        self.frozen_at_start = self.node.paused()
        self.thawed_at: float | None = None if self.frozen_at_start else self.t0

    def tick(self) -> None:
        if self.thawed_at is None and not self.node.paused():
            self.thawed_at = time.monotonic()

    def stop(self) -> dict[str, Any]:
        self.tick()  # the last look before our own thaw
        end = time.monotonic()
        self.node.resume()
        held = end - self.t0
        frozen = (self.thawed_at if self.thawed_at is not None else end) - self.t0
        asked = float(self.params.duration)  # type: ignore[attr-defined]
        return {"intent": pause_intent(self.node.name, asked, held, frozen, self.ctx.halt.is_set()),
                "pid": self.pid, "frozen_s": round(frozen, 3), "held_s": round(held, 3),
                "frozen_at_start": self.frozen_at_start}
