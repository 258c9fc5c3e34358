"""jvm_oom: an OutOfMemoryError inside a broker JVM. io.rmqchaos.OomAgent is loaded through the
Attach API and fills the heap; with -XX:+ExitOnOutOfMemoryError (checked when the scenario loads)
the JVM exits at once. Its intent: the pid gone, and the JVM's own "OutOfMemoryError" line in its
output (an exit without it was not the OutOfMemoryError asked for)."""
from __future__ import annotations

import subprocess
import time
from typing import Any

from chaos.intent import happened, intent
from chaos.protocol import FaultError, FaultKind, register
from cluster.plan.jvm import jvm_command, platform_jar
from rmqchaos.spec import Fault, Scenario, role_group

EXIT_FLAG = "-XX:+ExitOnOutOfMemoryError"


def jvm_oom_intent(node: str, pid: int, gone: bool, exit_after_s: float, line: str | None) -> dict[str, Any]:
    ms = [happened("died", f"pid {pid}", gone, f"pid {pid} exited {exit_after_s:.2f} s after the agent's launch"
                   if gone else f"pid {pid} still alive"),
          happened("OutOfMemoryError", node, line is not None, "its output names the OutOfMemoryError" if line else
                   "its output names no OutOfMemoryError")]
    return intent(ms, f"JVM OutOfMemoryError of {node}")


@register
class JvmOom(FaultKind):
    name = "jvm_oom"
    target = "broker"
    ends_node = True
    roles = True

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        if scenario.cluster.backend == "docker":  # the agent jar is a host path the container cannot open
            return [(("kind",), "jvm_oom is not available on the docker backend yet; use oom_kill, or "
                                "cluster.backend: local")]
        name = role_group(fault.target or "") or fault.target  # master-of:<group>: the group's jvm
        if name not in [b.name for b in scenario.cluster.brokers]:
            return []
        b = scenario.cluster.broker(name)
        if EXIT_FLAG not in (b.jvm or scenario.cluster.broker_defaults.jvm).options:
            return [(("kind",), f"jvm_oom needs {EXIT_FLAG} in {name}'s jvm.options "
                                "(else the OutOfMemoryError does not end the JVM)")]
        return []

    def start(self) -> None:
        node, timeout = self.node, self.fault.timeout
        pid = self.running_pid()
        t0 = time.monotonic()
        cmd = jvm_command("io.rmqchaos.OomAgent", [str(pid)], heap_mb=64, client=True,
                          cp=platform_jar(self.ctx.cluster.scenario.cluster.dist))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            text = (r.stderr or r.stdout).strip()
            raise FaultError(f"jvm_oom {node.name}: could not load the OOM agent (exit {r.returncode})",
                             text.splitlines()[-1] if text else "")
        if not node.wait_exit(pid, timeout):
            raise FaultError(f"jvm_oom {node.name}: the JVM did not exit within {timeout:g}s",
                             f"is {EXIT_FLAG} in its jvm.options?")
        after = time.monotonic() - t0
        node.mark_exited(pid, "jvm-oom")
        out = node.stdout_file
        line = next((x for x in reversed(out.read_text(errors="replace").splitlines())
                     if "OutOfMemoryError" in x), None) if out.exists() else None
        self.evidence = {"intent": jvm_oom_intent(node.name, pid, True, after, line), "pid": pid,
                         "exit_after_s": round(after, 3), "stdout": line}
