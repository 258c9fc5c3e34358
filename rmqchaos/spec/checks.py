"""Checks beyond field types: config keys, names and port collisions, and every fault against its kind."""
from __future__ import annotations

import math
from typing import Any, Mapping

from pydantic import ValidationError

from rmqchaos.errors import UserError
from rmqchaos.spec.confkeys import PLATFORM_BROKER_KEYS, PLATFORM_NAMESRV_KEYS, _check_conf, config_keys
from rmqchaos.spec.expect import POP_BY_FAULT, did_you_mean, parse_condition
from rmqchaos.spec.messages import _dotted, _pydantic_message
from rmqchaos.spec.grpc import grpc_errors
from rmqchaos.spec.majors import major_errors
from rmqchaos.spec.patches import patch_errors
from rmqchaos.rocketmq.dist import check_version
from rmqchaos.spec.modes import controller_errors, controller_ports, dledger_errors
from rmqchaos.spec.scenario import Fault, FaultKindSpec, Scenario
from rmqchaos.spec.timing import timer_errors
from rmqchaos.spec.types import (CONTROLLER_FOLLOWERS, CONTROLLER_LEADER, MANY, MASTER_OF, SLAVE_OF, is_role, role_group,
                                 slave_index)


def role_error(s: Scenario, target: str) -> str | None:
    """Why a role target cannot resolve in this cluster (None: it can). A classic group's master is
    its one master node; a controller-mode group's is whichever replica the controllers elected."""
    group = role_group(target)
    if group is not None:
        groups = {b.name: b for b in s.cluster.brokers}
        if group not in groups:
            return f"no broker group {group!r} in this cluster; groups: {', '.join(groups)}"
        k, b = slave_index(target), groups[group]
        if k is not None:
            n = b.replicas if b.replicas is not None else 1 + (b.slave is not None)
            if k > n - 1:
                return (f"{target}: {group} has {n} node(s), so {n - 1} slave(s) beside its master; "
                        f"k is 1..{n - 1}" if n > 1 else f"{target}: {group} has no slave")
        return None
    ctl = s.cluster.controllers
    if target in (CONTROLLER_LEADER, CONTROLLER_FOLLOWERS) and (ctl is None or ctl.mode != "standalone"):
        why = "this cluster has none" if ctl is None else "an embedded controller lives in namesrv: target namesrv"
        return f"{target} needs standalone controllers (cluster.controllers with mode: standalone); {why}"
    return None


def reach(s: Scenario, members: list[str]) -> list[str]:
    """The nodes a fault's targets may turn out to be when it fires: a node itself, every node of a
    role's broker group, every controller for a controller role (unknown names are left out: the
    target checks name them)."""
    out: list[str] = []
    groups = {b.name for b in s.cluster.brokers}
    for m in members:
        g = role_group(m) if is_role(m) else None
        if g is not None and g in groups:
            out += s.cluster.group_node_names(g)
        elif m in (CONTROLLER_LEADER, CONTROLLER_FOLLOWERS) and s.cluster.controllers is not None:
            out += s.cluster.controllers.node_names()
        elif not is_role(m):
            out.append(m)
    nodes = set(s.cluster.node_names())
    return [n for n in dict.fromkeys(out) if n in nodes]


def powerfs_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """cluster.powerfs and cluster.faketime: each member a node, a broker group, `namesrvs` or
    `controllers`; the local backend only."""
    errs: list[tuple[tuple[Any, ...], str]] = []
    known = set(s.cluster.node_names()) | {b.name for b in s.cluster.brokers} | {"namesrvs"} | \
        ({"controllers"} if s.cluster.controllers is not None else set())
    for field, what in (("powerfs", "stores on the powerfs layer (power_loss, disk_error, disk_slow)"),
                        ("faketime", "nodes under libfaketime (clock faults)")):
        members = getattr(s.cluster, field)
        for i, m in enumerate(members):
            if m not in known:
                errs.append((("cluster", field, i), f"{m!r} is no node, broker group, `namesrvs` or `controllers` of this cluster; "
                                                    f"nodes: {', '.join(s.cluster.node_names())}"))
        if members and s.cluster.backend != "local":
            errs.append((("cluster", field), f"{what} need the local backend, not {s.cluster.backend}: use backend: local"))
    return errs


def fault_errors(s: Scenario, fault_kinds: Mapping[str, FaultKindSpec]) -> list[tuple[tuple[Any, ...], str]]:
    """Each fault against its kind: a known kind, its own parameters (defaults filled in, in place),
    its target, and whether it ends within the load."""
    errs: list[tuple[tuple[Any, ...], str]] = []
    nodes = s.cluster.node_names()
    brokers = s.cluster.broker_node_names()
    spans: dict[int, float] = {}  # each fault's span from its start to its last occurrence's end
    for i, f in enumerate(s.faults):
        kind = fault_kinds.get(f.kind)
        if kind is None:
            errs.append((("faults", i, "kind"), f"unknown fault kind {f.kind!r}; known: {', '.join(sorted(fault_kinds))}"))
            continue
        try:
            params = kind.Params.model_validate(f.params)
        except ValidationError as ve:
            for e in ve.errors():
                loc = ("faults", i, *e["loc"])
                if e["type"] == "extra_forbidden":
                    allowed = ", ".join([*Fault.model_fields,
                                         *(f.alias or n for n, f in kind.Params.model_fields.items())])
                    errs.append((loc, f"unknown key for a {f.kind} fault; allowed: {allowed}"))
                else:
                    errs.append((loc, _pydantic_message(e)))
            continue
        f.__pydantic_extra__ = params.model_dump(mode="json")  # the resolved scenario shows every default
        if kind.target == "none":
            if f.target is not None:
                errs.append((("faults", i, "target"), f"a {f.kind} fault acts on the cluster, not on a node: drop target"))
        elif f.target is None:
            errs.append((("faults", i), f"a {f.kind} fault needs `target:` (one of {', '.join(nodes)})"))
        elif is_role(f.target):
            if f.target.startswith(MANY):
                errs.append((("faults", i, "target"), f"{f.target} names several nodes: only a partition's groups "
                                                      f"take it; target one node or {MASTER_OF}<group>"))
            elif f.target.startswith(SLAVE_OF) and slave_index(f.target) is None:
                errs.append((("faults", i, "target"), f"{f.target}: name which slave ({SLAVE_OF}<group>#<k>, "
                                                      "k from 1): a fault's target is one node"))
            elif not kind.roles:
                takers = ", ".join(sorted(k for k, v in fault_kinds.items() if v.roles))
                errs.append((("faults", i, "target"), f"a {f.kind} fault takes a node's name, not a role; roles "
                                                      f"({MASTER_OF}<group>, {CONTROLLER_LEADER}) work with {takers} "
                                                      "and in a partition's groups"))
            elif kind.target == "broker" and f.target == CONTROLLER_LEADER:
                errs.append((("faults", i, "target"), f"a {f.kind} fault acts on a broker, and {CONTROLLER_LEADER} "
                                                      f"is a controller: use {MASTER_OF}<group>"))
            elif (why := role_error(s, f.target)) is not None:
                errs.append((("faults", i, "target"), why))
        elif f.target not in (brokers if kind.target == "broker" else nodes):
            allowed = brokers if kind.target == "broker" else nodes
            errs.append((("faults", i, "target"), f"no {'broker' if kind.target == 'broker' else 'node'} "
                                                  f"{f.target!r} in this cluster; {kind.target}s: {', '.join(allowed)}"))
        if f.restart_after is not None and not kind.ends_node:
            ending = ", ".join(sorted(k for k, v in fault_kinds.items() if v.ends_node))
            errs.append((("faults", i, "restart_after"), f"restart_after applies to {ending}"))
        spans[i] = span = (f.repeat.every * (f.repeat.times - 1) if f.repeat else 0.0) + kind.span(params) + (f.restart_after or 0.0)
        if s.load is None:
            errs.append((("faults", i), "faults run on the load's clock: add a `load:` section"))
        elif f.after is None:
            errs += _within_load(i, f.at, span, s.load.duration, "")
        errs += [(("faults", i, *loc), msg) for loc, msg in kind.check(params, f, s)]
        if getattr(kind, "powerfs", False):  # its nodes' stores go on the layer (the resolved scenario shows it)
            for n in reach(s, [*([f.target] if f.target else []), *getattr(params, "nodes", [])]):
                if n not in s.cluster.powerfs:
                    s.cluster.powerfs.append(n)
    if s.load is not None:  # a follower: from its predecessor's earliest end (a span-0 kind may take longer)
        for i, start in earliest_starts(s.faults, spans).items():
            if s.faults[i].after is not None and i in spans:
                f = s.faults[i]
                errs += _within_load(i, start, spans[i], s.load.duration,
                                     f", {f.at:g}s after {f.after}'s end at {start - f.at:g}s or later")
    return errs


def _within_load(i: int, start: float, span: float, duration: float, why: str) -> list[tuple[tuple[Any, ...], str]]:
    if math.isinf(span):  # lasts until the load ends: must start before it does
        if start >= duration:
            return [(("faults", i, "at"), f"the fault starts at {start:g}s{why}, after the load's duration {duration:g}s")]
    elif start + span > duration:
        return [(("faults", i, "at"), f"the fault (at {start:g}s{why}, lasting {span:g}s) ends after the load's "
                                      f"duration {duration:g}s")]
    return []


def earliest_starts(faults: list[Fault], spans: Mapping[int, float]) -> dict[int, float]:
    """The earliest second after the load's start each fault can start: its `at`, or for one with
    `after`, its predecessor's earliest start + span + its `at`. Faults whose chain has an unknown id,
    a cycle or a fault without a span in `spans` are left out (after_errors names the first two)."""
    index = {f.id: i for i, f in enumerate(faults) if f.id}
    out: dict[int, float] = {}

    def start(i: int, seen: frozenset[int]) -> float | None:
        if i in out:
            return out[i]
        f = faults[i]
        if f.after is None:
            out[i] = f.at
            return f.at
        j = index.get(f.after)
        if j is None or j in seen or j not in spans:
            return None
        before = start(j, seen | {i})
        if before is None or math.isinf(spans[j]):
            return None
        out[i] = before + spans[j] + f.at
        return out[i]

    for i in range(len(faults)):
        start(i, frozenset({i}))
    return out


def after_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Each `after:` names another fault of this scenario by its `id`, one that occurs once (a
    repeated fault has several ends) and does not, through its own `after`, come after this one."""
    errs: list[tuple[tuple[Any, ...], str]] = []
    index = {f.id: i for i, f in enumerate(s.faults) if f.id}
    for i, f in enumerate(s.faults):
        if f.after is None:
            continue
        loc = ("faults", i, "after")
        j = index.get(f.after)
        if f.after == f.id:
            errs.append((loc, f"a fault cannot come after itself ({f.id!r})"))
        elif j is None:
            errs.append((loc, f"no fault with id {f.after!r} in this scenario; fault ids: "
                              f"{', '.join(index) or '(none): give the fault to follow an id'}"))
        elif s.faults[j].repeat is not None:
            errs.append((loc, f"{f.after!r} repeats {s.faults[j].repeat.times} times: `after` follows a fault "
                              "that occurs once"))
        else:
            chain, k = [f.id or f"faults[{i}]"], j
            while k is not None and k != i and len(chain) <= len(s.faults):
                chain.append(s.faults[k].id or "")
                k = index.get(s.faults[k].after) if s.faults[k].after else None
            if k == i:
                errs.append((loc, "`after` goes round in a cycle: " + " -> ".join([*chain, chain[0]])))
    return errs


def semantic_errors(s: Scenario, fault_kinds: Mapping[str, FaultKindSpec] | None = None
                    ) -> list[tuple[tuple[Any, ...], str]]:
    """Checks that need more than field types: RocketMQ config keys, port collisions, and (given
    the registry of fault kinds) every fault against its kind."""
    try:
        check_version(s.cluster.rocketmq_version)
    except UserError as e:
        return [(("cluster", "rocketmq_version"), e.line())]
    if majors := major_errors(s):  # a 4.x scenario asking for what 5.0 brought: said alone, before any Maven call
        return majors
    if patches := patch_errors(s):  # the patched release's keys below: built (or refused) first
        return patches
    try:  # the version's own jars (resolved with Maven on its first use): its keys, not the pinned one's
        keys = config_keys(s.cluster.dist)
    except UserError as e:
        return [(("cluster", "rocketmq_version"), e.line())]
    errs = _check_conf(s.cluster.namesrv.config, keys["namesrv"], PLATFORM_NAMESRV_KEYS,
                       ("cluster", "namesrv", "config"), "namesrv")
    errs += _check_conf(s.cluster.broker_defaults.config, keys["broker"], PLATFORM_BROKER_KEYS,
                        ("cluster", "broker_defaults", "config"), "broker.conf")
    used: dict[int, tuple[Any, ...]] = {s.cluster.namesrv.port: ("cluster", "namesrv", "port")}
    names: set[str] = set()
    for i, b in enumerate(s.cluster.brokers):
        if b.name in names:
            errs.append((("cluster", "brokers", i, "name"), f"broker name {b.name!r} is used twice"))
        names.add(b.name)
        errs += _check_conf(b.config, keys["broker"], PLATFORM_BROKER_KEYS, ("cluster", "brokers", i, "config"),
                            "broker.conf")
        nodes = [(b.port, ("cluster", "brokers", i, "port"))]
        if b.slave is not None:
            nodes.append((b.slave.port, ("cluster", "brokers", i, "slave", "port")))
        if b.replicated:  # replica r on port + 4r
            nodes = [(p, ("cluster", "brokers", i, "port" if r == 0 else "replicas"))
                     for r, (_, p) in enumerate(b.replica_nodes())]
        for port, loc in nodes:
            assert port is not None
            if port > 65535 and loc[-1] == "replicas":
                errs.append((loc, f"a replica's port {port} (the group's port + 4 per replica) is beyond 65535: "
                                  "use a lower port"))
            elif port > 65535:  # a slave's default: its master's port + 5
                errs.append((loc, f"the slave's default port {port} (its master's + 5) is beyond 65535: "
                                  "set slave.port or a lower master port"))
            elif port + 1 > 65535:
                errs.append((loc, f"port {port} also needs port+1 ({port + 1}, HA), beyond 65535: use a port "
                                  "of at most 65534"))
            dl = (port - 1,) if b.dledger else ()  # a DLedger replica's peer port
            for p in (port - 2, *dl, port, port + 1):  # fast remoting server, main, HA
                if p in used:
                    also = "port-2, port-1 (DLedger) and port+1" if dl else "port-2 and port+1"
                    errs.append((loc, f"port {p} (from port {port}, which also uses {also}) collides "
                                      f"with {_dotted(used[p])}"))
                used[p] = loc
    for port, loc in controller_ports(s):
        if port in used:
            errs.append((loc, f"controller port {port} collides with {_dotted(used[port])}"))
        used[port] = loc
    errs += controller_errors(s) + dledger_errors(s)
    nodes = s.cluster.node_names()
    for dup in sorted({n for n in nodes if nodes.count(n) > 1}):
        errs.append((("cluster", "brokers"), f"two nodes would be named {dup!r} (a replicated group's "
                                             "replicas are <name>-0, <name>-1, ...): rename a broker group"))
    if s.consumers is not None:
        ids: set[str] = set()
        for i, c in enumerate(s.consumers.instances):
            if c.id in ids:
                errs.append((("consumers", "instances", i, "id"), f"consumer id {c.id!r} is used twice"))
            ids.add(c.id)
        if s.load is None and s.consumers.instances and any(c.topics is None for c in s.consumers.instances):
            errs.append((("consumers",), "consumers without `topics` need a `load` section to take them from"))
    if fault_kinds is not None:
        errs += fault_errors(s, fault_kinds)
    ids = [f.id for f in s.faults if f.id]
    for i, f in enumerate(s.faults):
        if f.id and ids.count(f.id) > 1:
            errs.append((("faults", i, "id"), f"fault id {f.id!r} is used twice"))
    errs += after_errors(s) + powerfs_errors(s)
    if s.load is not None and s.load.backup_topic() == s.load.topic:
        errs.append((("load", "policy", "backup_topic"), "the backup topic must differ from load.topic"))
    errs += expect_errors(s) + signature_errors(s) + order_errors(s) + timer_errors(s) + grpc_errors(s)
    if s.cluster.proxy.enabled:
        for field in ("grpc_port", "remoting_port"):
            p = getattr(s.cluster.proxy, field)
            if p in used:
                errs.append((("cluster", "proxy", field), f"port {p} collides with {_dotted(used[p])}"))
            used[p] = ("cluster", "proxy", field)
    return errs


def order_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """An ordered load needs queues to shard over, one topic, and consumers that consume orderly; an
    orderly consumer acks every message (its listener has no batch ack index)."""
    errs: list[tuple[tuple[Any, ...], str]] = []
    insts = s.consumers.instances if s.consumers else []
    for i, c in enumerate(insts):
        if c.listener == "orderly" and c.mode != "all":
            errs.append((("consumers", "instances", i, "listener"), f"an orderly consumer acks every message: mode "
                                                                     f"{c.mode} needs listener: concurrently"))
    if s.load is not None and s.load.transaction is not None:
        if s.load.order is not None:
            errs.append((("load", "transaction"), "a transactional load is not an ordered one here: drop load.order"))
        if s.load.policy.kind == "resend_to_backup_topic":
            errs.append((("load", "transaction"), "a half message is ended where it was stored: policy "
                                                  "resend_to_backup_topic would send another to another topic"))
    o = s.load.order if s.load else None
    if s.load is None or o is None:
        return errs
    if s.load.queues * len(s.cluster.brokers) < 2:
        errs.append((("load", "order"), "sharding needs at least two queues: the topic has one (load.queues 1 on one "
                                        "broker group); raise load.queues"))
    if s.load.policy.kind == "resend_to_backup_topic":
        errs.append((("load", "order"), "an ordered load sends each key to its own queue: policy "
                                        "resend_to_backup_topic would move it to another topic"))
    for i, c in enumerate(insts):
        if c.listener != "orderly" and s.load.topic in (c.topics or s.load.topics()):
            errs.append((("consumers", "instances", i, "listener"), f"consumer {c.id} reads the ordered topic "
                                                                     f"{s.load.topic}: set listener: orderly"))
    return errs


def expect_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The `expect:` block against this scenario: its versions are RocketMQ versions this platform
    knows, its probes name broker nodes of this cluster, its failovers and figures name faults, nodes and
    broker groups of this scenario, its figures need a load to count."""
    from rmqchaos.rocketmq.dist import known_versions
    if s.expect is None:
        return []
    errs: list[tuple[tuple[Any, ...], str]] = []
    versions = known_versions()
    for field in ("shows_on", "gone_in", "measure_on"):
        for i, v in enumerate(getattr(s.expect, field)):
            if v not in versions:
                errs.append((("expect", field, i), f"unknown RocketMQ version {v!r}; known: {', '.join(versions)}"))
    brokers = s.cluster.broker_node_names()
    for i, node in s.expect.probe_nodes():
        if node not in brokers:
            errs.append((("expect", "probes", i), f"no broker node {node!r} in this cluster; brokers: {', '.join(brokers)}"))
    groups = [b.name for b in s.cluster.brokers if b.replicas]
    for i, g in s.expect.probe_groups():
        if g not in groups:
            errs.append((("expect", "probes", i), f"no replicated group {g!r} in this cluster; replicated groups: "
                                                  f"{', '.join(groups) or '(none)'}"))
    return errs + _condition_errors(s, "expect")


def signature_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The `signature:` block against this scenario: its failovers name faults of this scenario, its
    per-node, per-group and per-fault figures name those of this scenario, its figures need a load."""
    if s.signature is None:
        return []
    return _condition_errors(s, "signature")


# the figure families whose name is one of this scenario's nodes or broker groups (expect.py FAMILY_NAMES
# holds the others' names; pop.by_fault.<fault id> is checked beside these)
NODE_FAMILIES = ("route_absent_samples", "route_absent_seconds", "route_back", "frames_refused_by",
                 "link_p50_added_ms", "order_broken_on")
GROUP_FAMILIES = ("lost_on", "gone_on")


def _condition_errors(s: Scenario, key: str) -> list[tuple[tuple[Any, ...], str]]:
    block = getattr(s, key)
    errs: list[tuple[tuple[Any, ...], str]] = []
    ids = [f.id for f in s.faults if f.id]
    nodes, groups = s.cluster.node_names(), [b.name for b in s.cluster.brokers]
    # expect's premise (the bug's setup) names figures too
    for field, i, c in [(f, i, c) for f in ("conditions", "premise") for i, c in enumerate(getattr(block, f, []))]:
        fam, _, arg = parse_condition(c)[0].partition(".")
        prefix = f"{fam}."
        if fam in NODE_FAMILIES and arg not in nodes:
            why, known = f"no node {arg!r} in this cluster; nodes: {', '.join(nodes)}", nodes
        elif fam in GROUP_FAMILIES and arg not in groups:
            why, known = f"no broker group {arg!r} in this cluster; groups: {', '.join(groups)}", groups
        elif fam == "pop" and arg.startswith(POP_BY_FAULT) and (arg := arg.removeprefix(POP_BY_FAULT)) not in ids:
            why, known = f"no fault with id {arg!r} in this scenario; fault ids: {', '.join(ids) or '(none)'}", ids
            prefix += POP_BY_FAULT
        else:
            continue
        errs.append(((key, field, i), why + did_you_mean(arg, known, prefix)))
    for i, fo in enumerate(block.failovers):
        if fo.fault not in ids:
            errs.append(((key, "failovers", i, "fault"), f"no fault with id {fo.fault!r} in this scenario; "
                                                        f"fault ids: {', '.join(ids) or '(none)'}"))
    if block.conditions and s.load is None:
        errs.append(((key, "conditions"), "conditions count the load's messages: add a `load:` section"))
    return errs
