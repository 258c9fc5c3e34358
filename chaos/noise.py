"""Disk noise: real programs that fight the broker for its disk, as faults (chaos/kinds/*_noise.py).

A noise occurrence runs for `duration` (default: until the load ends) on the disk of the run
directory (the broker's store is there), writes only under <run>/noise/<occurrence>/, starts its
programs through the backend (`spawn_neighbour`: host processes recorded in processes.jsonl, or
containers on the brokers' volume labelled with the run, so `down` ends them if we die) and ends
them at stop. Its evidence is what its own programs report plus the device's
counters from /proc/diskstats over the occurrence: writes, bytes, flushes (fsyncs), and its
`intent`: what it achieved against what it was asked for (chaos/intent.py). A starved host makes
noise fall short of its settings (8 Redis drivers beside fio and two brokers on 2 cores reached ~6 %
of their 200 SET/s): a run must say so, not report the settings as what happened.
"""
from __future__ import annotations

import shutil
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Sequence

from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span
from cluster.node import Neighbour
from rmqchaos.machine import diskstats
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
        if scenario.cluster.backend == "docker":  # its programs run in containers of the platform's image
            return []
        missing = [p for p in cls.programs if shutil.which(p) is None]
        if missing:
            return [((), f"a {cls.name} fault needs {', '.join(missing)} on PATH: {cls.install_hint}")]
        return []

    @classmethod
    def compose_services(cls, params: Any, image: str, volume: str, root: str,
                         bound_s: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """The same noise as compose services (profile `noise`) of `image`, writing under `root` on
        the named `volume` (a broker's store volume: the brokers' disk): ({service: definition},
        {relative path: file text}). Bounded to `bound_s` seconds like an occurrence."""
        return {}, {}

    @staticmethod
    def compose_service(image: str, volume: str, root: str, command: list[str], **extra: Any) -> dict[str, Any]:
        return {"image": image, "pull_policy": "never", "network_mode": "host", "init": True, "profiles": ["noise"],
                "labels": {"rmqchaos.role": "noise"}, "volumes": [f"{volume}:{root}", *extra.pop("volumes", [])],
                "command": command, **extra}

    @property
    def dir(self) -> Path:
        return self.ctx.run.path / "noise" / self.occurrence.replace("#", "-")

    @staticmethod
    def bound(params: Any, scenario: Scenario) -> float:
        """An upper bound on how long its programs may run (they are stopped earlier, at stop)."""
        return (params.duration or (scenario.load.duration if scenario.load else 60.0)) + 30

    def bound_s(self) -> float:
        return self.bound(self.params, self.ctx.run.scenario())

    def spawn(self, tag: str, cmd: Sequence[str], log: Path, beside: bool = True) -> Neighbour:
        """`beside`: a noise program, on the cluster's host and disk as the backend places it (a host
        process, or a container on the brokers' volume); else a client process of the run (a driver)."""
        name, c = f"noise-{self.occurrence}-{tag}", self.ctx.cluster
        if beside:
            return c.spawn_neighbour(name, cmd, cwd=self.dir, log_file=log)
        return c.client_neighbour(name, c.spawn_client(name, cmd, cwd=self.dir, log_file=log))

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
        if "intent" in ev:  # first: the scheduler's progress line shows the evidence's first 200 characters
            ev = {"intent": ev.pop("intent"), **ev}
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
