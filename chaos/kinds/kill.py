"""kill: send a signal to a node (SIGKILL by default)."""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from chaos.protocol import FaultKind, register
from rmqchaos.procs import parse_signal
from rmqchaos.spec import Strict


def _signal(v: str) -> str:
    return parse_signal(v).name  # ValueError names the bad value; normalised to SIGxxx


class KillParams(Strict):
    signal: Annotated[str, AfterValidator(_signal)] = "SIGKILL"


@register
class Kill(FaultKind):
    name = "kill"
    Params = KillParams
    ends_node = True
    roles = True

    def start(self) -> None:
        pid = self.running_pid()
        self.node.kill(parse_signal(self.params.signal))  # type: ignore[attr-defined]
        self.evidence = {"pid": pid, "signal": self.params.signal}  # type: ignore[attr-defined]
