"""pause: freeze a node (cgroup freezer for `local`) for `duration`, then thaw it. A long-lived
occurrence: start freezes, stop thaws (early, if the load ends first)."""
from __future__ import annotations

import time
from typing import Any

from chaos.protocol import FaultKind, register
from rmqchaos.spec import Duration, Strict


class PauseParams(Strict):
    duration: Duration = 5.0


@register
class Pause(FaultKind):
    name = "pause"
    Params = PauseParams
    roles = True

    @classmethod
    def span(cls, params: Any) -> float:
        return float(params.duration)

    def start(self) -> None:
        self.pid = self.running_pid()
        self.node.pause()
        self.t0 = time.monotonic()

    def stop(self) -> dict[str, Any]:
        self.node.resume()
        return {"pid": self.pid, "frozen_s": round(time.monotonic() - self.t0, 3)}
