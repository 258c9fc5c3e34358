"""kill: send a signal to a node (SIGKILL by default). Its intent, for a signal that ends a JVM: the
process is gone, and how soon after the signal it was seen gone (an upper bound: the backend's own
wait for a SIGKILL includes the listeners closing)."""
from __future__ import annotations

import random
import time
from typing import Annotated, Any

from pydantic import AfterValidator

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.protocol import FaultKind, register
from rmqchaos.machine.procs import parse_signal
from rmqchaos.spec import Strict

# a JVM ends on these (SIGTERM, SIGINT, SIGHUP through its shutdown hooks); SIGQUIT dumps its threads,
# SIGSTOP stops it: their effect is no death to measure
ENDING = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")


def _signal(v: str) -> str:
    return parse_signal(v).name  # ValueError names the bad value; normalised to SIGxxx


class KillParams(Strict):
    signal: Annotated[str, AfterValidator(_signal)] = "SIGKILL"


def kill_intent(node: str, pid: int, sig: str, gone_after_ms: int | None, waited_s: float) -> dict[str, Any]:
    """The kill's intent from what was seen: `gone_after_ms` (None: still alive `waited_s` after the
    signal). A signal that does not end a JVM has nothing to measure."""
    label = f"{sig} of {node}"
    if sig not in ENDING:
        return intent([], label, none=f"nothing to measure ({sig} does not end the node)")
    words = f"pid {pid} gone {gone_after_ms} ms after {sig}" if gone_after_ms is not None else \
        f"pid {pid} still alive {waited_s:g} s after {sig}"
    return intent([happened("died", f"pid {pid}", gone_after_ms is not None, words)], label)


@register
class Kill(FaultKind):
    name = "kill"
    Params = KillParams
    ends_node = True
    roles = True

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        target, hit = topo.any_target(rng)
        back = seconds(rng, 5, 30)  # always back: a node left down ends the run's question there
        return Draw({"target": target, "restart_after": dur(back)}, back + 15, hit)

    def start(self) -> None:
        pid, sig = self.running_pid(), self.params.signal  # type: ignore[attr-defined]
        t0 = time.monotonic()
        self.node.kill(parse_signal(sig))
        gone_ms: int | None = None
        wait = 0.0
        if sig in ENDING:  # a SIGTERMed broker runs its shutdown hooks first: up to the fault's timeout
            wait = 10.0 if sig == "SIGKILL" else self.fault.timeout
            if self.node.wait_exit(pid, wait):
                gone_ms = round((time.monotonic() - t0) * 1000)
        self.evidence = {"intent": kill_intent(self.node.name, pid, sig, gone_ms, wait), "pid": pid, "signal": sig,
                         **({"gone_after_ms": gone_ms} if gone_ms is not None else {})}

