"""Whether the consumers were really served, from the status each Java consumer wrote
(rmqchaos/run/serving.py) and the timeline: per consumer group and broker node (a POP group's: per broker
group, the proxy picks the node), when it first served a read and how many it refused (code 25,
"subscription not latest", counted apart); the serving gate's record; and after each restart of a
broker node, whether its broker group served every remoting consumer group again within
RESTART_SERVE_S. Pure Python: summary.json's `serving` section (docs/analysis.md "Serving"), and the
completeness rule's restart reason (analysis/judge/completeness.py).
"""
from __future__ import annotations

from typing import Any

from analysis.evidence.topology import Topology
from rmqchaos.run import serving as status
from rmqchaos.run.rundir import RunDir


def summarize(run: RunDir) -> dict[str, Any] | None:
    """summary.json's `serving` (None: no consumer wrote a status, e.g. a run without consumers)."""
    groups = status.by_group(status.read_statuses(run.consumers_dir))
    if not groups:
        return None
    node_of, group_of = _nodes(run)
    events = run.timeline()
    out_groups: dict[str, Any] = {}
    not_latest: dict[str, int] = {}
    for g, st in sorted(groups.items()):
        brokers = {}
        for addr, b in sorted(st["brokers"].items()):
            node, broker = _where(addr, node_of, group_of)
            brokers[node] = {"addr": addr, "broker": broker, "served": b["served"],
                             "first_served_s": _s(b["first_served_ms"], st["started_ms"]),
                             "not_latest": b["not_latest"], "refused": b["refused"]}
            if b.get("counts"):
                brokers[node]["counts"] = b["counts"]
            if ":" in addr:  # a remoting pull's address (a POP key is a broker group: no code 25 there)
                not_latest[node] = not_latest.get(node, 0) + b["not_latest"]
        out_groups[g] = {"consumers": st["consumers"], "started_ms": st["started_ms"],
                         "heartbeats": st["heartbeats"], "brokers": brokers}
    gates = [e for e in events if e["kind"] == "serving_gate"]
    gate = None
    if gates:
        p = gates[-1]["params"]
        gate = {"outcome": gates[-1]["outcome"], "bound_s": p.get("bound_s"), "first_served_s": p.get("first_served_s"),
                "missing": p.get("missing", []), "faults_delayed_s": p.get("faults_delayed_s"),
                "pop_groups": p.get("pop_groups", []), "not_gated": p.get("not_gated", {})}
    return {"served_means": "a pull answered with messages or with no new message; through the proxy, a receive "
                            "answered with messages the broker group popped, or with no new message when it asked it",
            "gate": gate, "groups": out_groups, "not_latest_by_broker": dict(sorted(not_latest.items())),
            "not_latest": sum(not_latest.values()), "restart_bound_s": status.RESTART_SERVE_S,
            "restarts": restarts(run, groups, events)}


def restarts(run: RunDir, groups: dict[str, dict[str, Any]] | None = None,
             events: list[dict[str, Any]] | None = None, bound: float = status.RESTART_SERVE_S) -> list[dict[str, Any]]:
    """Per restart of a broker node (a `restart` fault, or a kill's `restart_after`, that ended ok):
    per consumer group its broker group had served before, the seconds from the node being back
    (the restart's end: registered in namesrv) to the group's next served pull from any node of that
    broker group, and `within_bound`: true, false (the consumers ran `bound` seconds past it and it
    did not come), or null (they stopped first: not judged). In a plain group that node is the
    restarted master itself; in controller mode the restarted node comes back a slave, and the group
    is served by whichever node is master. A POP group (keyed by broker group) is not judged here:
    while a restarted broker group is not in the proxy's route yet, the proxy answers a receive that
    asked it from another broker, and its "no new message" names none (docs/grpc.md)."""
    groups = groups if groups is not None else status.by_group(status.read_statuses(run.consumers_dir))
    events = events if events is not None else run.timeline()
    node_of, group_of = _nodes(run)
    out = []
    for e in events:
        p = e.get("params") or {}
        if e["kind"] != "fault" or p.get("fault_kind") != "restart" or e["outcome"] != "ok" or e["target"] not in group_of:
            continue
        bg, back = group_of[e["target"]], int(e["end_ms"] or e["start_ms"])
        per: dict[str, Any] = {}
        for g, st in sorted(groups.items()):
            mine = {a: b for a, b in st["brokers"].items() if a in node_of and group_of.get(node_of[a]) == bg}
            if not any(b["first_served_ms"] is not None and b["first_served_ms"] < e["start_ms"] for b in mine.values()):
                continue  # that broker group never served this consumer group before: nothing to come back
            again = [t for t in (status.served_from(b["spans"], back) for b in mine.values()) if t is not None]
            s = round((min(again) - back) / 1000, 3) if again else None
            ran = (st["stopped_ms"] or 0) >= back + bound * 1000
            per[g] = {"served_again_s": s, "within_bound": True if s is not None and s <= bound else False if ran else None}
        out.append({"fault_id": p.get("fault_id"), "node": e["target"], "broker": bg, "back_ms": back, "groups": per})
    return out


def restart_reasons(run: RunDir) -> list[str]:
    """The completeness rule's lines: a broker group that did not serve a consumer group again within
    the bound after a restart (its messages were out of that group's reach for that long)."""
    out = []
    for r in restarts(run):
        for g, v in r["groups"].items():
            if v["within_bound"] is False:
                out.append(f"after {r['fault_id']} restarted {r['node']}, broker group {r['broker']} did not serve "
                           f"consumer group {g} within {status.RESTART_SERVE_S:g}s"
                           + (f" (it did after {v['served_again_s']:g}s)" if v["served_again_s"] is not None else ""))
    return out


def _nodes(run: RunDir) -> tuple[dict[str, str], dict[str, str]]:
    """(address "ip:port" -> broker node, broker node -> its broker group), from the brokers' configs."""
    topo = Topology.of(run.broker_configs() or {})
    return topo.addrs, topo.group_by_node


def _where(key: str, node_of: dict[str, str], group_of: dict[str, str]) -> tuple[str, str | None]:
    """(node, broker group) of a status key: a remoting consumer's broker address, or a POP consumer's
    broker name (then both are that broker group: the proxy picked the node)."""
    if key in node_of:
        return node_of[key], group_of.get(node_of[key])
    return (key, key) if ":" not in key else (key, None)


def _s(ms: int | None, origin: int | None) -> float | None:
    return None if ms is None or origin is None else round((ms - origin) / 1000, 3)


def words(sv: dict[str, Any]) -> str:
    """One line for the reports: the gate, the code-25 refusals per broker, the work-around's
    heartbeats, the restarts."""
    g = sv.get("gate")
    firsts = [x for m in ((g or {}).get("first_served_s") or {}).values() for x in m.values() if x is not None]
    if g is None:
        out = ["no serving gate (no fault, or no consumer)"]
    elif g["outcome"] == "passed":
        pop = [x for x in g.get("pop_groups") or [] if x not in (g.get("not_gated") or {})]
        out = [f"gate passed: every {'broker' if pop else 'master'} served every consumer group within "
               f"{max(firsts, default=0):g}s of the consumers' start (bound {g['bound_s']:g}s)"
               + (f" (POP through the proxy: {', '.join(pop)})" if pop else "")
               + (f"; the faults came {g['faults_delayed_s']:g}s later than asked" if g.get("faults_delayed_s") else "")]
    else:
        out = ["gate REFUSED: " + "; ".join(f"{m['master']} never served {m['group']}" for m in g["missing"])]
    for grp, why in sorted(((g or {}).get("not_gated") or {}).items()):
        out.append(f"POP consumer group {grp} not waited for: {why}")
    nl = sv["not_latest_by_broker"]
    out.append("pulls refused 'subscription not latest' (code 25): "
               + (", ".join(f"{n} {k:,}" for n, k in nl.items()) if sv["not_latest"] else "none"))
    hb = sum(x["heartbeats"]["sent"] for x in sv["groups"].values())
    if hb:
        out.append(f"{hb} heartbeat(s) sent after a refused pull (the work-around, docs/client.md)")
    for r in sv["restarts"]:
        for grp, v in r["groups"].items():
            out.append(f"after {r['fault_id']} ({r['node']}): {r['broker']} served {grp} again "
                       + (f"{v['served_again_s']:g}s later" if v["served_again_s"] is not None else "never")
                       + {True: "", False: f", past the {sv['restart_bound_s']:g}s bound",
                          None: " (the consumers stopped first)"}[v["within_bound"]])
    return "; ".join(out)


def rows(sv: dict[str, Any]) -> tuple[list[list[Any]], list[str]]:
    """The reports' table: a row per consumer group and broker node its consumers pulled from (a POP
    group's: per broker group its receives were answered from)."""
    return ([[g, node, b["broker"], b["first_served_s"], b["served"], b["not_latest"],
              ", ".join(f"code {k} x{n}" for k, n in b["refused"].items() if k != str(status.NOT_LATEST)) or "-"]
             for g, x in sv["groups"].items() for node, b in x["brokers"].items()],
            ["consumer group", "node", "broker", "first served (s after the consumer started)", "reads served",
             "refused 'not latest' (25)", "other refusals"])
