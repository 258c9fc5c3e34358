"""The analysis of a failover (docs/analysis.md, "Failover"): per fault on a node of a replicated
broker group, how long until the group's view of its master changed (detection), until another node
was master (election) and until a send was acknowledged on the new master (recovery as the user sees
it); the seconds in which two nodes of one group acknowledged sends; and where the acknowledged
messages the group lost are, on every replica's store.

Inputs: the monitor's per-group record in each sample (cluster/watch/monitor.py: `groups.<group>` with
`mode`, `master`, `sync_state_set`, `routed_master`, `replicas`), the timeline's fault events (their
`target`: the node the fault hit), the send ledger (which node stored each ack: analysis/replication/acks.py) and
the brokers' stores (cluster/stored/messages.py). What the run did not see is null with its reason, never a claim.
"""
from __future__ import annotations

import re
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.replication.acks import ack_node, acks_per_second, first_acks, store_node, two_master_windows
from analysis.evidence.topology import Topology, decode_store_host
from analysis.replication.redeliveries import repeats
from analysis.ledgers.session import BROADCAST_MAX
from analysis.durability.store_check import STORE_EXAMPLES, STORE_LOOKUP_MAX
from analysis.contracts.timers import is_timer_key
from rmqchaos.spec.types import MASTER_OF

CONTROLLER_NODE = re.compile(r"controller-\d+")  # a standalone controller's node name (the plan's)
# a restart after a kill is its recovery (as in the verdict), not a fault that starts a failover
RECOVERY_KINDS = ("restart",)
KILLS = ("kill", "oom_kill", "jvm_oom")

def failover(send: DataFrame, keys: DataFrame, events: list[dict[str, Any]], monitor: list[dict[str, Any]],
             brokers: dict[str, dict[str, str]], store: Any = None, recv: DataFrame | None = None) -> dict[str, Any] | None:
    """The `failover` section of summary.json; None for a run without replicated groups. With the
    receive ledger (`recv`), what consumers read from each deposed master (`stale_reads`)."""
    topo = Topology.of(brokers)
    if not topo.replicated:
        return None
    samples = sorted((m for m in monitor if "ts_ms" in m and isinstance(m.get("groups"), dict)),
                     key=lambda m: m["ts_ms"])
    per_second = acks_per_second(send, topo)
    windows = two_master_windows(per_second)
    fos = occurrences(events, topo, samples)
    firsts = first_acks(send, topo, [(f["group"], f["start_ms"], f["bound_ms"]) for f in fos])
    for f, fa in zip(fos, firsts):
        _first_acks(f, fa)
        f["two_master_seconds"] = [w["t"] for w in windows if w["group"] == f["group"]
                                   and f["start_ms"] // 1000 <= w["t"] and w["t"] * 1000 < f["bound_ms"]]
        f["lost_in_switch"] = None  # without a store to look in: not checked
    lost = switch_losses(send, keys, store, topo, fos, samples) if store is not None else None
    reads = stale_reads(recv, topo, fos) if recv is not None else [None] * len(fos)
    again, per = repeats(recv, topo, fos) if recv is not None else (None, [None] * len(fos))
    for f, n, r in zip(fos, reads, per):
        f["stale_reads"], f["duplicates_after_switch"] = n, r
    acked: dict[str, dict[str, int]] = {g: {} for g in topo.replicated}
    for r in per_second:
        n = r["node"] or "unattributed"
        acked[r["group"]][n] = acked[r["group"]].get(n, 0) + r["n"]
    for f in fos:
        f.pop("bound_ms")
    return {"groups": {g: {"mode": _mode(samples, g), "nodes": topo.groups[g], "acked_by_node": dict(sorted(acked[g].items()))}
                       for g in topo.replicated},
            "failovers": fos, "two_master_windows": windows, "lost": lost,
            "stale_reads": None if recv is None else sum(n or 0 for n in reads),
            "duplicates_after_switch": again}


def _mode(samples: list[dict[str, Any]], group: str) -> str | None:
    return next((m["groups"][group].get("mode") for m in reversed(samples) if group in m["groups"]), None)


def occurrences(events: list[dict[str, Any]], topo: Topology, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault that hit a node of a replicated group, with what the monitor saw after it (until the
    next such fault on the same group: `bound_ms`). A partition hits the master of each group that it
    cut from a replica of its own group or from a controller (its evidence's resolved `groups`)."""
    killed: set[str] = set()
    hits = []
    # as the verdict names faults: the ones applied (outcome ok)
    for e in sorted((e for e in events if e.get("kind") == "fault" and e.get("outcome") == "ok"),
                    key=lambda e: e["start_ms"]):
        p = e.get("params") or {}
        kind, start = p.get("fault_kind") or "fault", int(e["start_ms"])
        if kind == "partition":
            nodes = cut_masters(((p.get("evidence") or {}).get("groups") or []), topo, start, samples)
        else:
            nodes = [_node(str(e.get("target")), start, samples)]
        for node in nodes:
            if kind in RECOVERY_KINDS and node in killed:
                continue
            if kind in KILLS:
                killed.add(node)
            g = topo.group_of(node)
            if g is None or g not in topo.replicated:
                continue
            hits.append({"fault_id": p.get("fault_id"), "fault_kind": kind, "outcome": e.get("outcome"),
                         "group": g, "old_master": node, "role": e.get("role") or p.get("role"),
                         "start_ms": start, "end_ms": e.get("end_ms")})
    out = []
    for i, h in enumerate(hits):
        later = [x["start_ms"] for x in hits[i + 1:] if x["group"] == h["group"]]
        h["bound_ms"] = later[0] if later else (1 << 62)
        out.append({**h, **timing(h["group"], h["old_master"], h["start_ms"], h["bound_ms"], samples)})
    return out


def cut_masters(groups: list[list[str]], topo: Topology, start_ms: int, samples: list[dict[str, Any]]) -> list[str]:
    """The masters (in the last sample before `start_ms`) of the replicated groups a partition's
    resolved `groups` cut from another node of their own group or from a controller: a cut between
    clients and a master alone starts no failover."""
    out = []
    for g, nodes in topo.replicated.items():
        master = _node(MASTER_OF + g, start_ms, samples)
        side = next((i for i, members in enumerate(groups) if master in members), None)
        if side is None:
            continue
        others = [m for i, members in enumerate(groups) if i != side for m in members]
        if any(m in nodes or CONTROLLER_NODE.fullmatch(m) for m in others):
            out.append(master)
    return out


def _node(target: str, start_ms: int, samples: list[dict[str, Any]]) -> str:
    """The node a fault hit: its target, or for a role left unresolved in the event (`master-of:<group>`)
    the group's master in the last sample before the fault."""
    if not target.startswith(MASTER_OF):
        return target
    g = target.split(":", 1)[1]
    before = [m["groups"][g] for m in samples if m["ts_ms"] < start_ms and g in m["groups"]]
    return (before[-1].get("master") or before[-1].get("routed_master") or target) if before else target


def _controller_view(gr: dict[str, Any]) -> bool:
    return gr.get("mode") == "controller"


def detected(gr: dict[str, Any], old: str) -> bool:
    """Whether a group record no longer has `old` as its (in-sync) master: in controller mode the
    controllers' view (master changed or null, or `old` out of the SyncStateSet); otherwise the route
    (namesrv's master of the group is not `old`)."""
    if _controller_view(gr):
        sss = gr.get("sync_state_set")
        return gr.get("master") != old or (sss is not None and old not in sss)
    return gr.get("routed_master") != old


def timing(group: str, old: str, start_ms: int, bound_ms: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Detection and election after a fault on `old`, from the monitor samples in [start_ms, bound_ms)."""
    before = [m["groups"][group] for m in samples if m["ts_ms"] < start_ms and group in m["groups"]]
    was = None
    if before:
        b = before[-1]
        was = (b.get("master") if _controller_view(b) or b.get("master") else b.get("routed_master")) == old
    seen = [(m["ts_ms"], m["groups"][group]) for m in samples
            if start_ms <= m["ts_ms"] < bound_ms and group in m["groups"]]
    out: dict[str, Any] = {"mode": seen[0][1].get("mode") if seen else (before[-1].get("mode") if before else None),
                           "was_master": was, "samples_after": len(seen), "detected_ms": None, "detection_s": None,
                           "elected_ms": None, "election_s": None, "new_master": None, "epoch": None,
                           "demoted_ms": None, "reasons": {}}
    upto = f"by the last sample ({(seen[-1][0] - start_ms) / 1000:.1f} s after the fault)" if seen else ""
    # how long after the fault the monitor kept watching the group (an absent election means as much)
    out["observed_s"] = round((seen[-1][0] - start_ms) / 1000, 3) if seen else None
    if not seen:
        out["reasons"]["detection"] = out["reasons"]["election"] = "no monitor sample of the group after the fault"
        return out
    # the old master's own view: the first sample in which it answered as a slave (a paused or cut-off
    # master comes back as master first), else the first in which it did not answer (a kill)
    own = [(t, (g.get("replicas") or {}).get(old) or {}) for t, g in seen]
    out["demoted_ms"] = next((t for t, r in own if r.get("up") and r.get("role") not in (None, "master")),
                             next((t for t, r in own if r and not r.get("up")), None))
    d = next(((t, g) for t, g in seen if detected(g, old)), None)
    if d:
        out.update(detected_ms=d[0], detection_s=round((d[0] - start_ms) / 1000, 3))
    else:
        out["reasons"]["detection"] = f"{group}'s view still had {old} as its master {upto}"
    e = next(((t, g) for t, g in seen if g.get("master") not in (None, old)), None)
    if e:
        out.update(elected_ms=e[0], election_s=round((e[0] - start_ms) / 1000, 3), new_master=e[1]["master"],
                   epoch=e[1].get("epoch"))
    else:
        out["reasons"]["election"] = f"no node other than {old} was master {upto}"
    return out


def _first_acks(f: dict[str, Any], by_node: dict[str, int | None]) -> None:
    """The first acknowledged send on the new master, and on any node of the group, after the fault."""
    s = f["start_ms"]
    new = f["new_master"]
    at = by_node.get(new) if new else None
    f["first_ack_new_master_ms"] = at
    f["first_ack_new_master_s"] = None if at is None else round((at - s) / 1000, 3)
    if new is None:
        f["reasons"]["first_ack_new_master"] = "no new master was seen"
    elif at is None:
        f["reasons"]["first_ack_new_master"] = f"no send was acknowledged by {new} after the fault in the send ledger"
    any_ = min(((t, n) for n, t in by_node.items() if t is not None), default=None)
    f["first_ack_any_ms"], f["first_ack_any_node"] = (any_ if any_ else (None, None))
    f["first_ack_any_s"] = None if any_ is None else round((any_[0] - s) / 1000, 3)
    if any_ is None:
        f["reasons"]["first_ack_any"] = f"no send was acknowledged by a node of {f['group']} after the fault"


def classify_lost(acked_by: set[str], stored_on: set[str], switched: bool, cut_back: bool = False,
                  truncated: bool = False) -> str:
    """A lost acknowledged message of a replicated group by where it is: in no store (never_stored),
    unless the node that acknowledged it lost the mastership afterwards and its log was then cut back
    below the message's offset (`cut_back`: stored, truncated when it rejoined, overwritten since:
    lost_in_switch); only on the node(s) that acknowledged it, which lost the mastership afterwards (lost_in_switch);
    also on another replica (stored_on_other_replica: stored but never delivered); only on the
    acknowledging node, no switch after the ack (stored_on_acking_node); stored, the acknowledging node
    not known (stored_ack_node_unknown); in no log, its bytes only past a DLedger replica's log end
    (`truncated`: that replica held it and truncated it when it followed a leader that never had it:
    truncated_on_replica)."""
    if not stored_on:
        return "lost_in_switch" if switched and cut_back else "truncated_on_replica" if truncated else "never_stored"
    if not acked_by:
        return "stored_ack_node_unknown"
    if stored_on - acked_by:
        return "stored_on_other_replica"
    return "lost_in_switch" if switched else "stored_on_acking_node"


def switched_ms(f: dict[str, Any]) -> int:
    """When the old master of a failover had lost its mastership for good: the latest of its detection,
    the fault's end and the first sample in which it answered as a slave, else did not answer (`demoted_ms`).
    A cut-off master (partition) keeps acknowledging its clients until the heal and a little after, a
    paused one may answer what it had in hand when it wakes: their acks up to then are the switch's."""
    return max((t for t in (f.get("detected_ms"), f.get("end_ms"), f.get("demoted_ms")) if t is not None),
               default=f["start_ms"])


def log_floor(group: str, node: str, after_ms: int, samples: list[dict[str, Any]]) -> int | None:
    """The lowest commit-log max offset `node` reported while up, in the monitor samples from
    `after_ms` (its switch) on; None when it never answered then."""
    offs = [r["max_offset"] for m in samples if m["ts_ms"] >= after_ms
            for r in [((m["groups"].get(group) or {}).get("replicas") or {}).get(node) or {}]
            if r.get("up") and isinstance(r.get("max_offset"), int)]
    return min(offs, default=None)


def cut_back(msg_ids: list[str], topo: Topology, node: str, floor: int | None) -> bool:
    """Whether `node` stored one of these acks (its offsetMsgId: the node and the commit-log offset) at
    or past `floor`, the lowest its log was once back (`log_floor`): its log no longer reached the
    message (cut back when it rejoined as a slave, or, after a kill, never that long on disk: a TSP
    buffer), and the new master's replication then wrote that range."""
    if floor is None:
        return False
    return any(topo.prefix.get(mid[:16].upper()) == node and (d := decode_store_host(mid)) is not None
               and floor <= d[2] for mid in msg_ids)


def stale_reads(recv: DataFrame, topo: Topology, fos: list[dict[str, Any]]) -> list[int | None]:
    """Per failover: the keys delivered that its old master stored after the new master was elected
    and before its own switch ended (`switched_ms`): what consumers read from a deposed master, which
    had no confirmed majority for it (apache/rocketmq#6662: its confirmOffset went on advancing).
    The storing node is the delivery's offsetMsgId store host; elected_ms is the first monitor sample
    naming the new master, so a key stored in the second before it is not counted. None when no new
    master was elected. One aggregation for all failovers. A timer message's delivered copy is not
    counted: the broker that puts it into its topic when it is due keeps the store host of the one that
    first stored it (TimerMessageStore.convertMessage), so its offsetMsgId does not name the storing node."""
    asks = [(i, f["old_master"], f["elected_ms"], switched_ms(f)) for i, f in enumerate(fos)
            if f.get("new_master") and f.get("elected_ms") is not None]
    out: list[int | None] = [None] * len(fos)
    if not asks:
        return out
    node = store_node(topo)
    timer = is_timer_key()
    cols = [F.countDistinct(F.when((node == old) & (F.col("store_ms") >= a) & (F.col("store_ms") < b) & ~timer,
                                   F.col("key")))
            .alias(f"s{i}") for i, old, a, b in asks]
    row = recv.agg(*cols).collect()[0].asDict()
    for i, *_ in asks:
        out[i] = int(row[f"s{i}"])
    return out


LOST_KINDS = ("lost_in_switch", "stored_on_other_replica", "stored_on_acking_node", "stored_ack_node_unknown",
              "truncated_on_replica", "never_stored")


def switch_losses(send: DataFrame, keys: DataFrame, store: Any, topo: Topology, fos: list[dict[str, Any]],
                  samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Every lost key acknowledged by a replicated group, looked up in every node's store and classified
    (`classify_lost`); each lost_in_switch key is counted on the failover of the node that acknowledged
    it whose switch (`switched_ms`) came after the ack. Bounded by the lost keys."""
    lost = keys.where(F.col("class") == "lost").select("key")
    n = int(lost.count())
    small = F.broadcast(lost) if n <= BROADCAST_MAX else lost
    node = ack_node(topo)
    rows = (send.join(small, "key").groupBy("key").agg(
        F.collect_set(F.when(sends.is_intent(), F.col("topic"))).alias("topics"),
        F.collect_set(F.when(sends.acked(), F.col("broker"))).alias("groups"),
        F.collect_set(node).alias("acked_by"),
        F.collect_set(F.when(sends.acked(), F.col("offset_msg_id"))).alias("msg_ids"),
        F.max(F.when(sends.acked(), F.col("end_ms"))).alias("ack_ms"))
        .where(F.arrays_overlap("groups", F.array(*[F.lit(g) for g in topo.replicated])))
        .orderBy("key").limit(STORE_LOOKUP_MAX).collect()) if n else []
    up = {}
    if samples:
        for g in topo.replicated:
            reps = (samples[-1]["groups"].get(g) or {}).get("replicas") or {}
            up.update({nd: bool(r.get("up")) for nd, r in reps.items()})
    counts = dict.fromkeys((*LOST_KINDS, "cut_back"), 0)
    per_fo = [0] * len(fos)
    examples = []
    # per failover, once: when its old master's switch ended and how low its log was after that
    switch_at = [switched_ms(f) for f in fos]
    floors = [log_floor(f["group"], f["old_master"], t, samples) for f, t in zip(fos, switch_at)]
    for r in rows:
        acked_by = set(r["acked_by"])
        locs = [loc for t in sorted(r["topics"]) for loc in store.find(t, r["key"])]
        stored_on = {loc["node"] for loc in locs if loc.get("in_log", True)}
        truncated_on = {loc["node"] for loc in locs if not loc.get("in_log", True)}
        hit = [i for i, f in enumerate(fos) if f["old_master"] in acked_by and (r["ack_ms"] or 0) <= switch_at[i]]
        cut = bool(hit) and not stored_on and cut_back(r["msg_ids"], topo, fos[hit[0]]["old_master"], floors[hit[0]])
        kind = classify_lost(acked_by, stored_on, bool(hit), cut, bool(truncated_on))
        counts[kind] += 1
        counts["cut_back"] += cut
        if kind == "lost_in_switch":
            per_fo[hit[0]] += 1
        if len(examples) < STORE_EXAMPLES:
            examples.append({"key": r["key"], "verdict": kind, "cut_back": cut, "acked_by": sorted(acked_by),
                             "ack_ms": r["ack_ms"],
                             "stored_on": sorted(stored_on), "truncated_on": sorted(truncated_on),
                             "stored_on_up": {nd: up.get(nd) for nd in sorted(stored_on)}})
    for f, k in zip(fos, per_fo):
        f["lost_in_switch"] = k
    return {"checked": len(rows), **counts, "examples": examples}
