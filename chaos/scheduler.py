"""Run the scenario's faults on the load's clock, beside the load, each written to the timeline.

`at` counts from the moment the load process starts sending (it writes load/started). Every
occurrence is recorded as a `fault` event: fault id, kind, target, parameters, start and end ms,
outcome and evidence. A fault that cannot be applied is recorded as failed and fails the stage.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any

from chaos.faults import apply
from cluster.local import LocalCluster
from cluster.procs import now_ms
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir
from rmqchaos.spec import Fault


def occurrences(faults: list[Fault]) -> list[tuple[float, str, Fault]]:
    """(seconds after load start, fault id, fault) for every occurrence, in time order."""
    out = []
    counts: dict[str, int] = {}
    for f in faults:
        base = f.id or f"{f.kind}-{f.target}"
        counts[base] = counts.get(base, 0) + 1
        fid = f.id or (base if counts[base] == 1 else f"{base}-{counts[base]}")
        times = [f.at + k * f.repeat.every for k in range(f.repeat.times)] if f.repeat else [f.at]
        for k, t in enumerate(times):
            out.append((t, fid if len(times) == 1 else f"{fid}#{k + 1}", f))
            if f.restart_after is not None:
                out.append((t + f.restart_after, f"{fid}-restart" if len(times) == 1 else f"{fid}#{k + 1}-restart",
                            Fault(kind="restart", target=f.target, at=t + f.restart_after)))
    return sorted(out, key=lambda x: x[0])


class FaultScheduler(threading.Thread):
    def __init__(self, run: RunDir, c: LocalCluster, faults: list[Fault], wait_start_s: float = 120) -> None:
        super().__init__(name="rmqchaos-faults", daemon=True)
        self.rd, self.c, self.plan, self.wait_start_s = run, c, occurrences(faults), wait_start_s
        self.started_file = run.path / "load" / "started"
        self.errors: list[str] = []
        self.results: list[dict[str, Any]] = []
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - a scheduler bug must fail the stage, not vanish
            self.errors.append(f"fault scheduler failed: {type(e).__name__}: {e}")

    def _run(self) -> None:
        deadline = time.time() + self.wait_start_s
        while not self.started_file.exists():
            if self._halt.wait(0.05) or time.time() > deadline:
                if not self._halt.is_set():
                    self.errors.append("the load never started: no fault was applied")
                return
        t0 = json.loads(self.started_file.read_text())["start_s"]
        for at, fid, f in self.plan:
            if self._halt.wait(max(0.0, t0 + at - time.time())):
                self.errors.append(f"fault {fid} not applied: the load ended first")
                return
            start = now_ms()
            say(f"fault {fid}: {f.kind} {f.target}")
            params = {"fault_id": fid, "fault_kind": f.kind, "at_s": at}
            if f.duration is not None:
                params["duration_s"] = f.duration
            if f.kind == "kill":
                params["signal"] = f.signal
            try:
                ev = apply(self.c, f.kind, f.target, f.duration, f.signal, f.timeout)
                outcome = "ok"
            except Exception as e:  # noqa: BLE001 - recorded, then fails the stage
                ev, outcome = {"error": e.line() if isinstance(e, UserError) else f"{type(e).__name__}: {e}"}, "failed"
                self.errors.append(f"fault {fid} ({f.kind} {f.target}) failed: {ev['error']}")
            self.rd.event("fault", f.target, start, now_ms(), outcome, **params, evidence=ev)
            self.results.append({**params, "outcome": outcome, "evidence": ev})
            say(f"fault {fid}: {outcome} {json.dumps(ev)[:200]}")

    def check(self) -> None:
        if self.errors:
            raise UserError(self.errors[0], "see the `fault` events in timeline.jsonl")
