"""The `expect:` block's probes (rmqchaos/spec/expect.py), read from the live cluster after the drain
and before `down`: what a node holds at the end of the run, which is gone once the JVMs stop."""
from __future__ import annotations

import json
from typing import Any

from cluster.backend import ClusterBackend
from rmqchaos.machine.procs import now_ms
from rmqchaos.spec.expect import TopicOnGroup
from rmqchaos.run.rundir import RunDir
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import RemotingError

#: how long a probe of a slave waits for it to have synced its master's current topic table: a
#: classic slave syncs all metadata when its last sync is 60 s old (BrokerController's slave task,
#: checked every few s: 5.3.3 and 5.5.0 bytecode), a controller-mode replica every
#: syncBrokerMetadataPeriod (5 s by default)
SYNC_WAIT_S = 90.0
#: how long replica_queues_differ waits for every replica's consume queues to catch up with its
#: master's before it counts a difference (a follower that was down replays what it missed)
CATCH_UP_S = 60.0


def take(run: RunDir, c: ClusterBackend) -> list[dict[str, Any]] | None:
    """Each probe of the scenario's `expect:` -> {probe, words, holds (None: could not be read),
    seen, error}, written to run.probes_file; None when the scenario has no probe. Never raises for
    a node that does not answer: that probe's `holds` is None and says why."""
    s = run.scenario()
    if s.expect is None or not s.expect.probes:
        return None
    out: list[dict[str, Any]] = []
    tables: dict[str, tuple[dict[str, Any], bool, str] | str] = {}  # node -> (table, synced, how read) or why not
    for i, p in enumerate(s.expect.probes):
        kind, t = p.kind()
        if isinstance(t, TopicOnGroup):
            out.append({"probe": i, "kind": kind, "topic": t.topic, "group": t.group, "words": p.words(),
                        **replica_queues(c, t.group, t.topic), "at_ms": now_ms()})
            continue
        rec: dict[str, Any] = {"probe": i, "kind": kind, "topic": t.topic, "node": t.node, "words": p.words(),
                               "holds": None}
        if t.node not in tables:
            tables[t.node] = topic_table(c, t.node)
        got = tables[t.node]
        rec["at_ms"] = now_ms()
        if isinstance(got, str):
            rec["error"] = got
        else:
            table, synced, how = got
            present = t.topic in table
            # absent from a slave that has not synced its master's current table proves nothing
            rec["holds"] = present if kind == "topic_present" else (not present if present or synced else None)
            rec["seen"] = f"{t.node} holds {len(table)} topics, {t.topic} {'among them' if present else 'not among them'}" \
                          + (f"; {how}" if how else "")
        out.append(rec)
    run.probes_file.parent.mkdir(parents=True, exist_ok=True)
    run.probes_file.write_text(json.dumps(out, indent=1) + "\n")
    return out


def topic_table(c: ClusterBackend, node: str) -> tuple[dict[str, Any], bool, str] | str:
    """The node's topic config table, whether it reflects its master's current table (a master's
    always does), and for a slave how: read once the slave has synced from its master after the
    probe began (so a topic absent from it was dropped by the sync, not yet to come), waiting at
    most SYNC_WAIT_S; or why it could not be read."""
    plan = c.plans[node]
    admin = c.admin(timeout=5)
    master = next((m for m in c.masters() if m.broker_name == plan.broker_name), None)
    try:
        if master is None or master.addr == plan.addr:
            return admin.topic_table(plan.addr)[0], True, ""
        state: dict[str, Any] = {"first": admin.topic_table(plan.addr)[1]}

        def synced() -> bool:
            # equal to the master's (5.5.0: the slave takes its master's version), or changed since the
            # probe began (5.3.3 bumps its own version per topic it applies, so it never equals)
            state["slave"], state["slave_version"] = admin.topic_table(plan.addr)
            state["master_version"] = admin.topic_table(master.addr)[1]
            v = state["slave_version"]
            return v is not None and (v == state["master_version"] or v != state["first"])
        ok = poll_until(synced, SYNC_WAIT_S, f"{node} to sync its master's topic table", interval=1.0,
                        raise_on_timeout=False)
        how = (f"read after it synced from its master (version {_version(state['slave_version'])}, its "
               f"master's {_version(state['master_version'])})" if ok else
               f"it did not sync from its master within {SYNC_WAIT_S:g} s (version {_version(state['slave_version'])}, "
               f"its master's {_version(state['master_version'])})")
        return state["slave"], bool(ok), how
    except RemotingError as e:
        return f"{node} did not answer GET_ALL_TOPIC_CONFIG: {e}"


def replica_queues(c: ClusterBackend, group: str, topic: str) -> dict[str, Any]:
    """{holds, seen | error, spans}: whether some replica's consume queues of the topic still differ
    from its master's (min, max offset per queue) once CATCH_UP_S has passed without them agreeing;
    agreeing at any read is `holds: false`. A replica that does not answer makes it unknown."""
    plans = c.replica_groups().get(group) or []
    master = next((m for m in c.masters() if m.broker_name == group), None)
    admin = c.admin(timeout=5)
    state: dict[str, Any] = {}

    def agree() -> bool:
        table = admin.topic_table(master.addr)[0]  # type: ignore[union-attr]
        n = int((table.get(topic) or {}).get("readQueueNums", 0))
        state["master"] = master.name  # type: ignore[union-attr]
        state["spans"] = {p.name: admin.queue_spans(p.addr, topic, n) for p in plans}
        want = state["spans"][master.name]  # type: ignore[union-attr]
        return n > 0 and all(s == want for s in state["spans"].values())
    if master is None or not plans:
        return {"holds": None, "error": f"no master of {group} to compare with"}
    try:
        same = poll_until(agree, CATCH_UP_S, f"the replicas of {group} to agree on {topic}'s consume queues",
                          interval=2.0, raise_on_timeout=False)
    except RemotingError as e:
        return {"holds": None, "error": f"a replica of {group} did not answer: {e}"}
    spans = state.get("spans") or {}
    if not spans.get(state.get("master")):
        return {"holds": None, "error": f"{group}'s master holds no queue of {topic}", "spans": _json(spans)}
    want = spans[state["master"]]
    odd = [f"{n} queue {q}: {lo}..{hi}" for n, s in spans.items() for q, (lo, hi) in s.items() if want.get(q) != (lo, hi)]
    seen = (f"every replica of {group} spans what its master {state['master']} does "
            f"({', '.join(f'queue {q}: {lo}..{hi}' for q, (lo, hi) in want.items())})" if same else
            f"after {CATCH_UP_S:g} s, {'; '.join(odd)} (master {state['master']}: "
            f"{', '.join(f'queue {q}: {lo}..{hi}' for q, (lo, hi) in want.items())})")
    return {"holds": not same, "seen": seen, "spans": _json(spans)}


def _json(spans: dict[str, dict[int, tuple[int, int]]]) -> dict[str, dict[str, list[int]]]:
    return {n: {str(q): list(v) for q, v in s.items()} for n, s in spans.items()}


def _version(v: dict[str, Any] | None) -> str:
    return f"{v.get('stateVersion', 0)}/{v.get('counter')}" if v else "unknown"
