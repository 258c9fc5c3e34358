"""The serving gate: no fault before every consumer group has been served by every broker of its
topics, within SERVE_BOUND_S of the consumers' start (rmqchaos/run/serving.py). A remoting group by every
master (a pull answered with messages or with no new message, from the master's address); a POP
group, read through the proxy, by every broker group its topics route to (a receive answered with
messages that broker group popped, or with "no new message" to a receive that asked it: docs/grpc.md).
A fault's effect on what the consumers read (duplicates after a switch, stale reads) means nothing
if they read nothing before it: on RocketMQ 5.5.0 a consumer's first pulls can all be refused
"subscription not latest" for 30 s (docs/client.md).

The gate waits while the load runs (an empty queue holds a pull up to 15 s before answering "no new
message"; the load's first messages answer it at once). If the bound passes, or the load or a
consumer ends first, it raises one line naming each broker that never served a group and what to
do: the load stage fails, no fault is applied, the run is incomplete for that reason. Either way a
`serving_gate` event records what it saw. A POP group whose consumers could not watch their receives
(a gRPC client without global interceptors: its status says `unwatched`) is not waited for; the event
(`not_gated`) and the progress line say why, in one line.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from cluster.backend import ClusterBackend
from loadgen.consumer import JavaConsumer
from rmqchaos.run import serving
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.machine.wait import poll_until
from rmqchaos.spec import Scenario

POLL_S = 0.1  # the Java side rewrites its status within 0.1 s of a broker's first served pull


def wanted(c: ClusterBackend, s: Scenario) -> dict[str, dict[str, str]]:
    """Consumer group -> {key: node} of every broker that must serve it: for a remoting group {address:
    node} of every master of its topics (the masters namesrv lists now of the broker groups each topic
    routes to); for a POP group (its consumers read through the proxy) {broker name: broker name} of
    every broker group its topics route to."""
    assert s.consumers is not None
    default_topics = s.load.topics() if s.load else []
    masters = {p.broker_name: p for p in c.masters()}
    routes: dict[str, set[str]] = {}
    out: dict[str, dict[str, str]] = {}
    for inst in s.consumers.instances:
        for t in inst.topics or default_topics:
            if t not in routes:
                routes[t] = c.routed_groups(t)
            for b in sorted(routes[t]):
                if inst.grpc is not None:  # POP: the proxy picks the node, the status names the broker group
                    out.setdefault(inst.group, {})[b] = b
                elif b in masters:
                    out.setdefault(inst.group, {})[masters[b].addr] = masters[b].name
    return out


def pop_groups(s: Scenario) -> set[str]:
    """The consumer groups read through the proxy (POP)."""
    return {i.group for i in (s.consumers.instances if s.consumers else []) if i.grpc is not None}


def not_gated(groups: dict[str, dict[str, Any]], pop: set[str]) -> dict[str, str]:
    """POP group -> why it cannot be gated: none of its consumers could watch its receives (each
    status says `unwatched`, and why). One watched consumer is enough: a group's consumers share its
    queues."""
    out = {}
    for g in sorted(pop):
        st = groups.get(g) or {}
        if st.get("unwatched") and len(st["unwatched"]) == len(st.get("consumers") or []):
            out[g] = "; ".join(sorted(set(st["unwatched"].values())))
    return out


def gate(run: RunDir, c: ClusterBackend, s: Scenario, consumers: list[JavaConsumer], started_ms: int,
         load_running: Callable[[], bool], first_fault_s: float, bound: float = serving.SERVE_BOUND_S) -> float:
    """Wait until every consumer group was served by every broker of its topics (`wanted`). Returns how long that
    held the faults back: past the first fault's time (`first_fault_s` on the load's clock) the whole
    fault clock moves by as much, so the faults keep their spacing (0 when the gate passed first).
    UserError (one line) when `bound` seconds after `started_ms` passed first, or the load ended, or a
    consumer is no longer running."""
    pop = pop_groups(s)
    want = wanted(c, s)
    seen: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}

    def served() -> bool:
        seen.clear()
        seen.update(serving.by_group(serving.read_statuses(run.consumers_dir)))
        skipped.update(not_gated(seen, pop))
        for g in skipped:
            want.pop(g, None)
        return not serving.unserved(seen, want)

    def refused(why: str = "") -> UserError:
        missing = serving.unserved(seen, want)
        _record(run, started_ms, "refused", bound, want, seen, missing, pop, skipped)
        return UserError(refusal(missing, seen, bound, why, pop),
                         f"see {run.consumers_dir}/serving-*.json and the consumer logs beside them "
                         "(docs/client.md: consumers that read before the first fault)")

    def still_running() -> None:  # a consumer or the load that ended cannot be served any more
        dead = [jc.node for jc in consumers if not jc.running()]
        if dead or not load_running():
            served()
            if serving.unserved(seen, want):
                raise refused(f"{', '.join(dead)} stopped" if dead else "the load ended")

    poll_until(served, max(0.0, started_ms / 1000 + bound - time.time()), "every broker to serve every consumer group",
               interval=POLL_S, check=still_running, error=refused)
    now = time.time()
    delay = _held_back(run, now, first_fault_s)
    gated_pop = sorted(pop & set(want))
    say(f"serving gate: every consumer group served by every {'broker' if gated_pop else 'master'} of its topics "
        f"{now - started_ms / 1000:.1f}s after the consumers started"
        + (f" (POP through the proxy: {', '.join(gated_pop)})" if gated_pop else "")
        + (f"; the faults come {delay:.1f}s later than asked" if delay else ""))
    for g, why in sorted(skipped.items()):
        say(f"serving gate: POP consumer group {g} not waited for: {why}")
    _record(run, started_ms, "passed", bound, want, seen, [], pop, skipped, faults_delayed_s=round(delay, 3))
    return delay


def refusal(missing: list[tuple[str, str, str]], groups: dict[str, dict[str, Any]], bound: float,
            why: str = "", pop: set[str] | frozenset[str] = frozenset()) -> str:
    """The gate's one line: each broker that never served a group, with what it answered instead."""
    parts = []
    for group, node, key in missing:
        b = (groups.get(group) or {}).get("brokers", {}).get(key) or {}
        refused = ", ".join(f"code {k} x{n}" + (" (subscription not latest)" if k == str(serving.NOT_LATEST) else "")
                            for k, n in sorted(b.get("refused", {}).items()))
        if group in pop:
            redirected = (b.get("counts") or {}).get("redirected", 0)
            parts.append(f"broker group {node} never served POP consumer group {group} through the proxy"
                         + (f" (its receives were refused: {refused})" if refused else " (no receive answered)")
                         + (f" ({redirected} receive(s) asking it came back with another broker's messages: "
                            f"the proxy's route did not list it)" if redirected else ""))
            continue
        parts.append(f"master {node} ({key}) never served consumer group {group}"
                     + (f" (its pulls were refused: {refused})" if refused else " (no pull answered)"))
    when = f"before {why}" if why else f"within {bound:g}s of the consumers' start"
    return f"no fault applied: {'; '.join(parts)} {when}"


def _held_back(run: RunDir, passed: float, first_fault_s: float) -> float:
    try:
        t0 = json.loads(run.load_started_file.read_text())["start_s"]
    except (OSError, ValueError, KeyError):
        return 0.0  # the load has not started sending: the faults' clock has not started either
    return max(0.0, passed - (t0 + first_fault_s))


def _record(run: RunDir, started_ms: int, outcome: str, bound: float, want: dict[str, dict[str, str]],
            groups: dict[str, dict[str, Any]], missing: list[tuple[str, str, str]], pop: set[str],
            skipped: dict[str, str], **extra: Any) -> None:
    """The `serving_gate` event: per group and broker (a remoting group's masters by node, a POP group's
    broker groups by name), seconds from the consumers' start to its first served read; `pop_groups`
    the groups read through the proxy, `not_gated` {group: why} those not waited for."""
    served = {g: {node: _s((groups.get(g) or {}).get("brokers", {}).get(addr, {}).get("first_served_ms"), started_ms)
                  for addr, node in sorted(m.items())} for g, m in sorted(want.items())}
    run.event("serving_gate", "consumers", started_ms, now_ms(), outcome, bound_s=bound, first_served_s=served,
              missing=[{"group": g, "master": n, "addr": a} for g, n, a in missing],
              pop_groups=sorted(pop), not_gated=dict(sorted(skipped.items())), **extra)


def _s(ms: int | None, origin: int) -> float | None:
    return None if ms is None else round((ms - origin) / 1000, 3)
