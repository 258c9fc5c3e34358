"""clock: move one node's own clock (a node under libfaketime: cluster.faketime; cluster/substrate/clock.py), in
Jepsen's clock nemesis terms:
- a jump: `offset` (± seconds) from `at` on, kept (no `duration`);
- an offset held for `duration`, then reset to the host's time;
- a strobe: with `strobe`, the clock flips between `offset` and the host's time every `strobe`
  seconds, for `duration`;
- a drift: with `rate`, the clock runs `rate` times as fast from `at` for `duration` (it needs
  cluster.faketime_monotonic: libfaketime scales time from the process's start, so the line written
  carries the offset that makes the rate start now), then is reset.

Its intent is the node's own clock read back from the node (the JVM's Thread.print header, whole
seconds) against the host's, right after it was moved (a drift: at its end, before the reset): the
offset asked against the offset read. The evidence also keeps the reading before, and at the end."""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import intent, measure
from chaos.protocol import Clocked, FaultError, FaultKind, register
from rmqchaos.machine.procs import starttime
from rmqchaos.spec import Duration, Fault, Scenario, Strict
from rmqchaos.spec.checks import reach
from rmqchaos.spec.types import _duration

SHOW_S = 1.6  # libfaketime re-reads its control file once a wall-clock second; then the JVM answers


def _signed(v: Any) -> Any:
    """'-30s', '+2m', '5s', 15 -> seconds, signed (no sign: ahead)."""
    if isinstance(v, str) and v.strip():
        t = v.strip()
        sign = -1.0 if t[0] == "-" else 1.0
        return sign * float(_duration(t[1:] if t[0] in "+-" else t))
    return v


class ClockParams(Strict):
    offset: Annotated[float, BeforeValidator(_signed), Field(ge=-30 * 86400, le=30 * 86400)] = 0.0
    duration: Duration | None = None  # hold for this long, then back to the host's time (None: a jump, kept)
    strobe: Duration | None = None  # flip between offset and the host's time this often (with duration)
    rate: Annotated[float, Field(gt=0, le=100)] | None = None  # run this many times as fast (with duration)

    @model_validator(mode="after")
    def _shape(self) -> "ClockParams":
        if self.rate is None and self.offset == 0:
            raise ValueError("give an offset (e.g. offset: -30s) or a rate (e.g. rate: 1.5)")
        if (self.strobe is not None or self.rate is not None) and self.duration is None:
            raise ValueError("a strobe or a rate lasts for a duration: give duration")
        if self.strobe is not None and self.rate is not None:
            raise ValueError("give a strobe or a rate, not both")
        return self


def clock_intent(node: str, asked_s: float, read_s: float | None) -> dict[str, Any]:
    """The offset asked against the offset read from the node (None: the node did not answer)."""
    if read_s is None:
        return intent([measure("s offset", node, abs(asked_s), 0.0, f"{node}'s clock could not be read back")],
                      f"clock of {node}")
    toward = read_s * (1 if asked_s >= 0 else -1)  # a clock moved the wrong way achieved less than nothing
    return intent([measure("s offset", node, abs(asked_s), max(0.0, toward),
                           f"{node}'s clock read {read_s:+.0f} s off the host's (asked {asked_s:+g} s; read to 1 s)")],
                  f"clock of {node}")


@register
class Clock(FaultKind):
    name = "clock"
    Params = ClockParams
    roles = True

    @classmethod
    def span(cls, params: Any) -> float:
        return float(params.duration or 0.0)

    @property
    def tick_s(self) -> float | None:  # type: ignore[override]
        return float(self.params.strobe) if self.params.strobe else None  # type: ignore[attr-defined]

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """A jump, an offset held, or a strobe on a node with a clock of its own (none without one)."""
        if not topo.faketime:
            return None
        n = rng.choice(sorted(topo.faketime))
        p, hold = clock_draw(rng)
        return Draw({"target": n, **p}, hold, frozenset({n}))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        faked = set(scenario.cluster.faketime_nodes())
        out = [n for n in reach(scenario, [fault.target] if fault.target else []) if n not in faked]
        errs: list[tuple[tuple[Any, ...], str]] = []
        if out:
            errs.append((("target",), f"{', '.join(out)} {'is' if len(out) == 1 else 'are'} not started under "
                                      f"libfaketime, so a clock fault cannot move {'its' if len(out) == 1 else 'their'}"
                                      f" clock: add {'it' if len(out) == 1 else 'them'} to cluster.faketime"))
        if params.rate is not None and not scenario.cluster.faketime_monotonic:
            errs.append((("rate",), "a drift rate needs the monotonic clock faked too (libfaketime scales both): set "
                                    "cluster.faketime_monotonic: true"))
        return errs

    @property
    def who(self) -> str:
        """The name of the process whose clock it moves."""
        return self.node.name

    def clocked(self) -> Clocked:
        return self.node

    def _read(self) -> float | None:
        return _offset(self.clocked().clock_now())

    def _others(self) -> dict[str, float | None]:
        """Every other running node's clock against the host's, read from each node: unmoved."""
        out: dict[str, float | None] = {}
        for n in self.ctx.cluster.nodes():
            if n.name != self.who and n.pid is not None:
                out[n.name] = _offset(n.clock_now())
        return out

    def _set(self, offset: float, rate: float | None = None) -> str:
        return self.clocked().set_clock(offset, rate)

    def start(self) -> None:
        p: ClockParams = self.params  # type: ignore[assignment]
        pid = self.clocked().pid
        if pid is None:
            raise FaultError(f"{self.name} {self.who}: it is not running", "check the fault schedule")
        before = self._read()
        up0 = self.clocked().uptime()
        if p.rate is not None:  # libfaketime: fake = start + offset + rate * (now - start), start = its load
            up = time.time() - _started(pid)
            line = self._set(p.offset + (1 - p.rate) * up, p.rate)
        else:
            line = self._set(p.offset)
        set_ms = int(time.time() * 1000)  # the reads before it (jcmd) take seconds on a busy host
        self.flipped, self.on, self.t0, self.before = 0, True, time.monotonic(), before
        time.sleep(SHOW_S)
        after = self._read()
        up1 = self.clocked().uptime()
        asked = p.offset if p.rate is None else p.offset + (p.rate - 1) * SHOW_S
        self.evidence = {"intent": clock_intent(self.who, asked, None if after is None else after - (before or 0.0)),
                         "pid": pid, "line": line, "set_ms": set_ms, "offset_before_s": before, "offset_after_s": after,
                         "others_offset_s": self._others(),
                         # how far its monotonic clock (nanoTime: scheduled executors, timed waits) moved
                         # beyond the host's: ~0 unless cluster.faketime_monotonic
                         "monotonic_moved_s": None if up0 is None or up1 is None else
                         round((up1[0] - up0[0]) - (up1[1] - up0[1]), 1),
                         # a jump stays: its effect outlasts the occurrence (analysis/contracts/timers.py windows)
                         **({"persists": True} if p.duration is None else {})}

    def tick(self) -> None:  # a strobe
        p: ClockParams = self.params  # type: ignore[assignment]
        self.on = not self.on
        self._set(p.offset if self.on else 0.0)
        self.flipped += 1

    def stop(self) -> dict[str, Any]:
        p: ClockParams = self.params  # type: ignore[assignment]
        if p.rate is not None:  # a drift is judged by what it gained over its whole length, not its first second
            gained = self._read()
            asked = p.offset + (p.rate - 1) * (time.monotonic() - self.t0)
            self.evidence["offset_before_reset_s"] = gained
            self.evidence["intent"] = clock_intent(self.who, asked,
                                                   None if gained is None else gained - (self.before or 0.0))
        if p.duration is not None:  # back to the host's time (a jump stays)
            self.evidence["reset"] = self._set(0.0, 1.0 if p.rate is not None else None)
            time.sleep(SHOW_S)
        self.evidence["offset_at_end_s"] = self._read()
        if p.strobe is not None:
            self.evidence["flips"] = self.flipped
        return self.evidence


def clock_draw(rng: random.Random) -> tuple[dict[str, Any], float]:
    """A clock fault's parameters for explore (a jump of +-10-150 s that stays, the offset held 10-40 s,
    or a strobe to it every 1, 2 or 5 s), and how long it acts on the cluster."""
    off = rng.choice((-1, 1)) * seconds(rng, 10, 150)
    shape = rng.choice(("jump", "offset", "strobe"))
    p: dict[str, Any] = {"offset": f"{off:+g}s"}
    d = seconds(rng, 10, 40)
    if shape != "jump":
        p["duration"] = dur(d)
    if shape == "strobe":
        p["strobe"] = dur(rng.choice((1, 2, 5)))
    return p, (d if shape != "jump" else 0) + 10


class ConsumerClockParams(ClockParams):
    consumer: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")]  # the instance's id (consumers.instances[].id)

    @model_validator(mode="after")
    def _offset_only(self) -> "ConsumerClockParams":
        if self.rate is not None:
            raise ValueError("a consumer's clock takes an offset, a jump or a strobe, not a rate (its monotonic "
                             "clock stays the host's)")
        return self


@register
class ConsumerClock(Clock):
    """consumer_clock: the clock fault on one consumer instance (consumers.instances[].faketime), the
    application's host stepping its clock. Only the client's wall clock moves: its scheduled work (pulls,
    rebalances, heartbeats, offset commits) keeps the host's monotonic time, and its ledger's times stay
    the host's (io.rmqchaos.HostClock). What moves is the client's own judgement of time: a process
    queue last pulled more than 120 s ago by its clock is dropped and pulled again from the committed
    offset at the next rebalance (ProcessQueue.isPullExpired), an orderly queue's lock looks expired
    after 30 s (isLockExpired)."""
    name = "consumer_clock"
    Params = ConsumerClockParams
    target = "none"
    roles = False

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        """The clock draw on a consumer instance with a clock of its own (none without one)."""
        if not topo.faketime_consumers:
            return None
        cid = rng.choice(sorted(topo.faketime_consumers))
        p, hold = clock_draw(rng)
        return Draw({"consumer": cid, **p}, hold, frozenset({f"consumer:{cid}"}))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        insts = {i.id: i for i in scenario.consumers.instances} if scenario.consumers else {}
        inst = insts.get(params.consumer)
        if inst is None:
            return [(("consumer",), f"no consumer instance {params.consumer!r} in this scenario"
                                    + (f"; instances: {', '.join(insts)}" if insts else "; add consumers.instances"))]
        if not inst.faketime:
            return [(("consumer",), f"consumer {params.consumer} is not started under libfaketime, so a clock fault "
                                    f"cannot move its clock: set faketime: true on it")]
        return []

    @property
    def who(self) -> str:
        return f"consumer-{self.params.consumer}"  # type: ignore[attr-defined]

    def clocked(self) -> Clocked:
        if self.ctx.clients is None:
            raise FaultError(f"consumer_clock {self.who}: this run started no consumer", "run it through `rmqchaos run`")
        return self.ctx.clients.consumer_clock(self.params.consumer)  # type: ignore[attr-defined]

    def _timeouts_log(self) -> Path | None:
        return None if self.ctx.clients is None else \
            self.ctx.clients.consumer_log(self.params.consumer, "remoting.log")  # type: ignore[attr-defined]

    def start(self) -> None:
        log = self._timeouts_log()
        self.log_from = log.stat().st_size if log is not None and log.exists() else 0
        super().start()

    def stop(self) -> dict[str, Any]:
        ev = super().stop()
        # the client's housekeeping (NettyRemotingClient.scanResponseTable, once a second) judges each
        # request's timeout by the wall clock: a forward step times out every request in flight at once
        ev["client_requests_timed_out"] = timed_out_requests(self._timeouts_log(), self.log_from)
        return ev


def timed_out_requests(log: Path | None, offset: int) -> int | None:
    """Requests the client gave up on as timed out ("remove timeout request") in its log past `offset`;
    None without the log."""
    if log is None or not log.exists():
        return None
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().count(b"remove timeout request")


def _offset(r: tuple[float, float] | None) -> float | None:
    """A node's clock against the host's from a `clock_now` reading (its header floors the node's second)."""
    return None if r is None else round(r[0] + 0.5 - r[1], 1)


def _started(pid: int) -> float:
    """When process `pid` started, epoch seconds (its kernel start time, in clock ticks after boot)."""
    import os
    ticks = starttime(pid) or 0
    btime = next(int(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime"))
    return btime + ticks / os.sysconf("SC_CLK_TCK")
