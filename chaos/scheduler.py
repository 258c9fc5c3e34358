"""Run the scenario's faults on the load's clock, beside the load, each written to the timeline.

`at` counts from the moment the load process starts sending (it writes load/started), or, for a
fault with `after: <id>`, from the moment that fault's occurrence ended (its evidence recorded,
whatever its outcome): a cleanup follows a flood whose length the host decides. Every
occurrence runs on its own worker (at most MAX_CONCURRENT at once), so a long pause does not hold
back the next fault: wait until its time, `start`, wait its `span` (or until the load ends), `stop`.
Each is recorded as a `fault` event: fault id, kind, target, parameters, start and end ms, outcome
and evidence. A fault that cannot be applied is recorded as failed and fails the stage.

A role target (`master-of:<group>`, `controller-leader`) is resolved when its occurrence fires
(chaos/targets.py): the event's target is the node hit, its `role` what was asked; the restart of a
`restart_after` follows its kill's node (`follows`), not the role's holder at restart time, and
comes `restart_after` after the kill acted (a kill whose role took long to resolve is not restarted
before it is killed).
Occurrences due at the same instant are resolved together before any of them acts (`_Instant`):
`master-of:` asks the controller leader, so a `controller-leader` kill at that instant must not land
first (apache/rocketmq#7689's shape kills the two at once).
"""
from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from chaos.registry import registry
from chaos.protocol import Clients, FaultContext, FaultError, FaultKind
from chaos import targets
from chaos.targets import resolve
from cluster.backend import ClusterBackend
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import Fault, is_role

MAX_CONCURRENT = 16


class Occurrence(NamedTuple):
    at: float  # seconds after the load's start
    fault_id: str
    fault: Fault
    follows: str | None = None  # a `restart_after` restart: the kill occurrence whose node it restarts
    after: str | None = None  # `at` counts from the end of this occurrence (a fault's `after`), not the load's start


def occurrences(faults: list[Fault]) -> list[Occurrence]:
    """Every occurrence (repeats expanded, `restart_after` as a restart occurrence), in time order."""
    out: list[Occurrence] = []
    counts: dict[str, int] = {}
    for f in faults:
        base = f.id or (f"{f.kind}-{f.target.replace(':', '-')}" if f.target else f.kind)
        counts[base] = counts.get(base, 0) + 1
        fid = f.id or (base if counts[base] == 1 else f"{base}-{counts[base]}")
        times = [f.at + k * f.repeat.every for k in range(f.repeat.times)] if f.repeat else [f.at]
        for k, t in enumerate(times):
            one = fid if len(times) == 1 else f"{fid}#{k + 1}"
            out.append(Occurrence(t, one, f, None, f.after))
            if f.restart_after is not None:
                out.append(Occurrence(t + f.restart_after, f"{one}-restart",
                                      Fault(kind="restart", target=f.target, at=t + f.restart_after), one, f.after))
    # those on the load's clock in time order, then each follower once what it follows is placed: a
    # worker waiting on a follower never holds back the occurrence it waits for
    plan = sorted((o for o in out if o.after is None), key=lambda o: o.at)
    rest, placed = [o for o in out if o.after is not None], {o.fault_id for o in plan}
    while rest:
        ready = sorted((o for o in rest if o.after in placed), key=lambda o: o.at) or rest  # a cycle: the spec refuses it
        plan += ready
        placed.update(o.fault_id for o in ready)
        rest = [o for o in rest if o not in ready]
    return plan


class _Instant:
    """The occurrences due at one instant: each resolves its node, arrives, then waits until all have
    arrived (or INSTANT_WAIT_S passed: a resolution that hangs does not hold the others for ever)."""

    def __init__(self, n: int) -> None:
        self._left, self._cv = n, threading.Condition()

    def arrive_and_wait(self, halt: threading.Event) -> None:
        with self._cv:
            self._left -= 1
            self._cv.notify_all()
            deadline = time.monotonic() + INSTANT_WAIT_S
            while self._left > 0 and not halt.is_set() and time.monotonic() < deadline:
                self._cv.wait(0.1)

    def arrive(self) -> None:
        with self._cv:
            self._left -= 1
            self._cv.notify_all()


#: longest a resolved occurrence waits for the others due at its instant: a role's own wait, and a margin
INSTANT_WAIT_S = targets.RESOLVE_WAIT_S + 5.0


class FaultScheduler(threading.Thread):
    def __init__(self, run: RunDir, c: ClusterBackend, faults: list[Fault], wait_start_s: float = 120,
                 delay_s: float = 0.0, clients: Clients | None = None) -> None:
        """delay_s: the faults' clock starts this long after the load's (the serving gate held them back);
        clients: the consumers the load stage started (consumer_kill)."""
        super().__init__(name="rmqchaos-faults", daemon=True)
        self.ctx = FaultContext(run, c, clients=clients)
        self.rd, self.plan, self.wait_start_s, self.delay_s = run, occurrences(faults), wait_start_s, delay_s
        self.errors: list[str] = []
        self.results: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # the node each occurrence acted on (None: it resolved none) and when (time.time()), set once
        # it acts; what a follower waits for
        self._hit: dict[str, str | None] = {}
        self._acted: dict[str, float] = {}
        self._at = {o.fault_id: o.at for o in self.plan}
        self._known = {o.follows: threading.Event() for o in self.plan if o.follows}
        # the occurrences others come `after`: set when each has ended, with when (time.time()) and how
        self._ended = {o.after: threading.Event() for o in self.plan if o.after}
        self._end: dict[str, tuple[float, str]] = {}
        same: dict[float, list[str]] = {}
        for o in self.plan:
            if o.after is None:  # a follower's `at` is not on the load's clock
                same.setdefault(round(o.at, 3), []).append(o.fault_id)
        self._instant: dict[str, _Instant] = {}
        for ids in same.values():
            if len(ids) > 1:
                self._instant.update(dict.fromkeys(ids, _Instant(len(ids))))

    def stop(self) -> None:
        """The load has ended: occurrences not yet due are not applied, long-lived ones stop now."""
        self.ctx.halt.set()

    def _error(self, msg: str) -> None:
        with self._lock:
            self.errors.append(msg)

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - a scheduler bug must fail the stage, not vanish
            self._error(f"fault scheduler failed: {type(e).__name__}: {e}")

    def _run(self) -> None:
        started = self.rd.load_started_file
        deadline = time.time() + self.wait_start_s
        while not started.exists():
            if self.ctx.halt.wait(0.05) or time.time() > deadline:
                if not self.ctx.halt.is_set():
                    self._error("the load never started: no fault was applied")
                return
        t0 = json.loads(started.read_text())["start_s"] + self.delay_s
        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT, max(1, len(self.plan))),
                                thread_name_prefix="rmqchaos-fault") as pool:
            for occ in self.plan:
                pool.submit(self._one, t0, occ)

    def _one(self, t0: float, occ: Occurrence) -> None:
        try:
            self._fire(t0, occ)
        except Exception as e:  # noqa: BLE001 - a worker's exception would vanish in its future
            self._error(f"fault {occ.fault_id}: the scheduler failed: {type(e).__name__}: {e}")
        finally:  # a follower never waits on an occurrence that ended without a node
            if occ.fault_id in self._known:
                self._hit.setdefault(occ.fault_id, None)
                self._known[occ.fault_id].set()
            if occ.fault_id in self._ended:
                self._end.setdefault(occ.fault_id, (time.time(), "not run"))
                self._ended[occ.fault_id].set()

    def _node_for(self, occ: Occurrence, rec: dict[str, Any]) -> str | None:
        """The node this occurrence acts on, resolved now (None: a cluster-level kind); FaultError if none."""
        f = occ.fault
        if occ.follows is not None:
            self._known[occ.follows].wait()
            node = self._hit.get(occ.follows)
            rec["follows"] = occ.follows
            if node is None:
                raise FaultError(f"{occ.follows} hit no node: nothing to restart")
            due = self._acted[occ.follows] + occ.at - self._at[occ.follows]
            if self.ctx.halt.wait(max(0.0, due - time.time())):
                raise FaultError(f"the load ended before {occ.follows}'s node was due back")
        elif f.target is not None and is_role(f.target):
            rec["role"] = f.target
            t = time.monotonic()
            node = resolve(self.ctx.cluster, f.target, self.ctx.halt)
            rec["resolve_s"] = round(time.monotonic() - t, 3)
        else:
            node = f.target
        return node

    def _fire(self, t0: float, occ: Occurrence) -> None:
        f, fid = occ.fault, occ.fault_id
        instant = self._instant.get(fid)
        due, after = t0 + occ.at, {}
        if occ.after is not None:  # it ends whatever happens (the worker's finally), at the latest when the load does
            self._ended[occ.after].wait()
            end, outcome = self._end[occ.after]
            due = end + occ.at
            after = {"after": occ.after, "after_end_s": round(end - t0, 3), "after_outcome": outcome}
        if self.ctx.halt.wait(max(0.0, due - time.time())):
            if instant:
                instant.arrive()
            self._error(f"fault {fid} not applied: the load ended first" + (
                f" ({occ.at:g}s after {occ.after}, which ended at {after['after_end_s']:g}s)" if after else ""))
            return
        k = registry()[f.kind]
        params = k.Params.model_validate(f.params)
        rec: dict[str, Any] = {"fault_id": fid, "fault_kind": f.kind, "at_s": occ.at, **after,
                               **params.model_dump(mode="json")}
        try:
            target = self._node_for(occ, rec)
        except FaultError as e:  # recorded under the role asked for: no node was hit
            if instant:
                instant.arrive()
            self._failed(fid, f, rec, now_ms(), {"error": e.line()})
            return
        if instant:
            instant.arrive_and_wait(self.ctx.halt)
        if fid in self._known:  # a follower restarts this node, restart_after from now
            self._hit[fid], self._acted[fid] = target, time.time()
            self._known[fid].set()
        if target != f.target:
            f = f.model_copy(update={"target": target})
        start = now_ms()
        say(f"fault {fid}: {f.kind}" + (f" {f.target}" if f.target else "")
            + (f" ({rec['role']})" if "role" in rec else ""))
        h: FaultKind = k(self.ctx, f, params, fid)
        try:
            h.start()  # a start that fails undoes its own partial work (e.g. oom_kill lifts the limit)
            try:
                self._hold(h, start / 1000 + k.span(params), h.tick_s)  # per occurrence: a strobe ticks at its own period
            finally:  # a fault that started is undone even when a tick failed
                ev = h.stop()
        except Exception as e:  # noqa: BLE001 - recorded, then fails the stage
            why = e.line() if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
            self._failed(fid, f, rec, start, {"error": why})
            return
        self._record(f.target or "cluster", start, "ok", rec, ev)

    def _failed(self, fid: str, f: Fault, rec: dict[str, Any], start: int, ev: dict[str, Any]) -> None:
        self._error(f"fault {fid} ({f.kind} {f.target or ''}) failed: {ev['error']}")
        self._record(f.target or "cluster", start, "failed", rec, ev)

    def _record(self, target: str, start: int, outcome: str, rec: dict[str, Any], ev: dict[str, Any]) -> None:
        self.rd.event("fault", target, start, now_ms(), outcome, **rec, evidence=ev)
        self._end.setdefault(rec["fault_id"], (time.time(), outcome))
        with self._lock:
            self.results.append({**rec, "outcome": outcome, "evidence": ev})
        say(f"fault {rec['fault_id']}: {outcome} {json.dumps(ev)[:200]}")

    def _hold(self, h: FaultKind, end: float, tick_s: float | None) -> None:
        """Until `end` (inf: until the load ends), ticking `h` every tick_s if it declares one."""
        while True:
            wait = min(end - time.time(), tick_s or math.inf)
            if self.ctx.halt.wait(None if math.isinf(wait) else max(0.0, wait)) or time.time() >= end:
                return
            h.tick()

    def check(self) -> None:
        if self.errors:
            raise UserError(self.errors[0], "see the `fault` events in timeline.jsonl")
