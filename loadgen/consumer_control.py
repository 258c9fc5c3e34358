"""The consumers a load stage started, as the consumer_kill fault ends and starts them (it sees them
through chaos/protocol.py's Clients). A restarted instance is a new process of the same group and
id, writing a ledger of its own (receive-<id>.r<n>.jsonl): the killed one's stays as it was left,
and the list it was started in now holds the new process, so the drain stops it."""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any

from loadgen.consumer import JavaConsumer
from rmqchaos.ledger.schema import receive_ledger_path
from rmqchaos.machine.procs import alive, now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.machine.wait import poll_until

GONE_WAIT_S = 10.0  # a SIGKILLed JVM is gone in well under a second; SIGTERM runs its shutdown hook


class ConsumerControl:
    def __init__(self, run: RunDir, consumers: list[JavaConsumer]) -> None:
        self.run, self.consumers = run, consumers  # the load stage's list: a restart replaces its entry
        self.restarts: dict[str, int] = {}

    def _find(self, cid: str) -> int:
        for i, jc in enumerate(self.consumers):
            if jc.opts.consumer_id == cid:
                return i
        raise KeyError(f"no consumer {cid!r} was started in this run")

    def kill_consumer(self, consumer_id: str, sig: int) -> dict[str, Any]:
        jc = self.consumers[self._find(consumer_id)]
        if jc.pid is None or not alive(*jc.pid):
            raise RuntimeError(f"consumer {consumer_id} is not running")
        pid, t0 = jc.pid, time.monotonic()
        os.killpg(pid[0], sig)  # its own session (spawned with new_session): the JVM and nothing else
        gone = poll_until(lambda: not alive(*pid), GONE_WAIT_S, f"consumer {consumer_id} to end", interval=0.05,
                          raise_on_timeout=False)
        gone_ms = round((time.monotonic() - t0) * 1000) if gone else None
        if jc.proc is not None and gone:
            jc.proc.wait()
        if gone and jc.proc_log is not None:
            jc.proc_log.record_exit(jc.node, pid[0], f"killed by a fault (signal {sig})")
        return {"pid": pid[0], "signal": sig, "gone_after_ms": gone_ms, "deliveries": jc.deliveries(),
                "ledger": jc.out.name}

    def consumer_clock(self, consumer_id: str) -> "ConsumerClock":
        return ConsumerClock(self, consumer_id)

    def consumer_log(self, consumer_id: str, name: str) -> Path:
        return self.consumers[self._find(consumer_id)].client_log(name)

    def restart_consumer(self, consumer_id: str) -> dict[str, Any]:
        i = self._find(consumer_id)
        old = self.consumers[i]
        n = self.restarts[consumer_id] = self.restarts.get(consumer_id, 0) + 1
        # not tied to its parent: a fault's worker thread starts it and ends right after, and a child's
        # parent-death signal follows the thread that forked it (the first restart died so, silently).
        # `down` reaps it by its record like a detached run's consumers.
        launcher = functools.partial(old.launcher, outlive=True) if old.launcher is not None else None
        jc = JavaConsumer(old.namesrv, dataclasses.replace(old.opts), receive_ledger_path(self.run.path, f"{consumer_id}.r{n}"),
                          old.workdir, run_id=old.run_id, rocketmq_version=old.version, launcher=launcher,
                          proc_log=old.proc_log)
        t0 = now_ms()
        say(f"consumer {consumer_id}: starting again (ledger {jc.out.name})")
        jc.start()
        self.consumers[i] = jc
        assert jc.pid is not None
        return {"pid": jc.pid[0], "ledger": jc.out.name, "started_ms": now_ms() - t0}


class ConsumerClock:
    """An instance's own clock, followed across restarts (a restart replaces the process, not the
    control file): chaos/protocol.py's Clocked."""

    def __init__(self, control: ConsumerControl, consumer_id: str) -> None:
        self.control, self.consumer_id = control, consumer_id

    @property
    def _jc(self) -> JavaConsumer:
        return self.control.consumers[self.control._find(self.consumer_id)]

    @property
    def pid(self) -> int | None:
        jc = self._jc
        return jc.pid[0] if jc.pid is not None and alive(*jc.pid) else None

    def set_clock(self, offset_s: float, rate: float | None = None) -> str:
        return self._jc.set_clock(offset_s, rate)

    def clock_now(self) -> tuple[float, float] | None:
        return self._jc.clock_now()

    def uptime(self) -> tuple[float, float] | None:
        return self._jc.uptime()
