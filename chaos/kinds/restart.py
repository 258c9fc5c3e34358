"""restart: stop a node (if running) and start it again on the same store; returns once it is
ready again (brokers: registered in namesrv). Also what `restart_after` schedules."""
from __future__ import annotations

from chaos.protocol import FaultKind, register


@register
class Restart(FaultKind):
    name = "restart"
    roles = True

    def start(self) -> None:
        old = self.node.pid
        self.node.restart()
        self.evidence = {"old_pid": old, "pid": self.node.pid}
