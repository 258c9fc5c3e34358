"""Disk noise: real programs that fight the broker for its disk, as faults (chaos/kinds/*_noise.py).

A noise occurrence runs for `duration` (default: until the load ends) on the disk of the run
directory (the broker's store is there), writes only under <run>/noise/<occurrence>/, starts its
processes through the backend's spawn helper (recorded in processes.jsonl, so `down` ends them if we
die) and ends them by PID at stop. Its evidence is what its own programs report plus the device's
counters from /proc/diskstats over the occurrence: writes, bytes, flushes (fsyncs).
"""
from __future__ import annotations

import shutil
import subprocess
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Sequence

from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span
from rmqchaos import diskstats
from rmqchaos.spec import Fault, Scenario


class NoiseParams(Lasting):
    pass


class NoiseKind(FaultKind):
    target = "none"
    programs: ClassVar[tuple[str, ...]] = ()  # executables it needs on PATH (checked when the scenario loads)
    install_hint: ClassVar[str] = ""

    @classmethod
    def span(cls, params: Any) -> float:
        return lasting_span(params)

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        missing = [p for p in cls.programs if shutil.which(p) is None]
        if missing:
            return [((), f"a {cls.name} fault needs {', '.join(missing)} on PATH: {cls.install_hint}")]
        return []

    @property
    def dir(self) -> Path:
        return self.ctx.run.path / "noise" / self.occurrence.replace("#", "-")

    def bound_s(self) -> float:
        """An upper bound on how long its programs may run (they are stopped earlier, at stop)."""
        load = self.ctx.run.scenario().load
        return (self.params.duration or (load.duration if load else 60.0)) + 30  # type: ignore[attr-defined]

    def spawn(self, tag: str, cmd: Sequence[str], log: Path) -> subprocess.Popen:
        return self.ctx.cluster.spawn_client(f"noise-{self.occurrence}-{tag}", cmd, cwd=self.dir, log_file=log)

    def end(self, tag: str, p: subprocess.Popen, sig: int, grace: float = 10.0) -> str:
        """End one of ours by PID (`sig`, SIGKILL after `grace`); record how in processes.jsonl."""
        how = "exited"
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(grace)
                how = "stopped"
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                how = "killed"
        # beside its start record, which the backend's spawn helper writes to the cluster's run
        self.ctx.cluster.run.processes.record_exit(f"noise-{self.occurrence}-{tag}", p.pid, how)
        return how

    # ------------------------------------------------------------ one occurrence
    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dev = diskstats.device_of(self.dir)
        self.before, self.t0 = diskstats.read(self.dev), time.monotonic()
        try:
            self.begin()
        except BaseException:
            self.finish()
            raise

    def stop(self) -> dict[str, Any]:
        ev = self.finish()
        d = diskstats.read(self.dev).minus(self.before)
        secs = time.monotonic() - self.t0
        ev["disk"] = {"device": self.dev.name, "seconds": round(secs, 3), **d.as_dict(), **d.rates(secs)}
        return ev

    @abstractmethod
    def begin(self) -> None:
        """Start the programs; raise FaultError if they do not come up."""

    @abstractmethod
    def finish(self) -> dict[str, Any]:
        """End every program started (also after a failed begin); return their own numbers."""


def require(ok: bool, msg: str, hint: str) -> None:
    if not ok:
        raise FaultError(msg, hint)
