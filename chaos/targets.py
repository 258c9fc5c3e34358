"""Role targets: which node is `master-of:<group>` or the `controller-leader` when an occurrence
fires. Resolved here only, once per occurrence (chaos/scheduler.py for `target:`, the partition kind
for its groups' members); a kind then acts on that node, and a `restart_after` restarts the node its
kill resolved to, whoever is master by then.

A controller-mode group's master is the replica the controllers' SyncStateSet data names (the
leader's view, which the brokers obey), or while no controller answers (all paused or cut off: the
brokers keep their roles meanwhile) the node namesrv lists as brokerId 0; any other group's is that
node of namesrv's (a classic group's one master, or whichever node a replicated group put there). The
controller leader is the standalone controller that answers CONTROLLER_GET_METADATA_INFO as the
Raft leader itself; `controller-followers` (a partition's groups only) the other standalone
controllers. Mid-election there is none: wait up to RESOLVE_WAIT_S, then fail with one line."""
from __future__ import annotations

import threading
from typing import Iterable

from chaos.protocol import FaultError
from cluster.backend import ClusterBackend
from cluster.watch.groups import group_plans
from cluster.plan.nodes import NodePlan
from rmqchaos.spec import (CONTROLLER_FOLLOWERS, CONTROLLER_LEADER, MASTER_OF, SLAVE_OF, SLAVES_OF, is_role, role_group,
                           slave_index)
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import RemotingError

RESOLVE_WAIT_S = 10.0  # longer than a kill -9 election (~5 s); a SIGSTOP one takes ~15 s and fails here


def node_at(plans: Iterable[NodePlan], addr: str | None, group: str | None = None) -> str | None:
    """The node listening at `addr` (of broker group `group`, or a controller when None)."""
    for p in plans:
        if p.addr == addr and (p.broker_name == group if group is not None else p.role == "controller"):
            return p.name
    return None


def _namesrv_master(c: ClusterBackend, group: str, why: str = "") -> tuple[str | None, str]:
    """(the address namesrv lists as `group`'s brokerId 0 or None, the failure line's words)."""
    return ((c.registered() or {}).get(group) or {}).get(0), f"{why}namesrv lists no master (brokerId 0) of {group}"


def holder(c: ClusterBackend, role: str) -> tuple[str | None, str]:
    """(the node that holds `role` now or None, what was seen: the failure line's words)."""
    group = role_group(role)
    try:
        if group is None:
            addr = c.controller_leader()
            return node_at(c.plans.values(), addr), "no controller answers as the Raft leader"
        g = group_plans(c.plans.values()).get(group)
        if g is not None and g.mode == "controller":  # the monitor's mode of a group, from its keys
            try:
                st = c.sync_state().get(group)
            except RemotingError as e:  # paused or cut off: the brokers keep their roles, as namesrv lists them
                addr, seen = _namesrv_master(c, group, f"the controllers did not answer ({e}); ")
            else:
                addr = st.master_addr if st else None
                seen = f"the controllers name no master of {group}" + (f" (epoch {st.master_epoch})" if st else "")
        else:
            addr, seen = _namesrv_master(c, group)
    except RemotingError as e:
        return None, f"no answer: {e}"
    node = node_at(c.plans.values(), addr, group)
    return node, seen if addr is None or node else f"its master {addr} is no node of this run"


def resolve(c: ClusterBackend, target: str, halt: threading.Event | None = None,
            wait_s: float | None = None) -> str:
    """The node `target` names now: itself, or the holder of a role, waiting up to `wait_s`
    (RESOLVE_WAIT_S) while nobody holds it (or until `halt`, the load's end). FaultError if nobody does."""
    if not is_role(target):
        return target
    if target.startswith(SLAVE_OF):  # one of the group's slaves: the master resolved first, then the k-th other node
        return resolve_all(c, target, halt)[0]
    seen = [""]

    def held() -> str | None:
        node, seen[0] = holder(c, target)
        return node

    def gone() -> None:
        if halt is not None and halt.is_set():
            raise FaultError(f"{target}: the load ended while waiting for a holder ({seen[0]})")

    wait = RESOLVE_WAIT_S if wait_s is None else wait_s
    node = poll_until(held, wait, target, interval=0.2, check=gone, raise_on_timeout=False)
    if node is None:
        what = "no controller leader" if target == CONTROLLER_LEADER else f"no master of {role_group(target)}"
        raise FaultError(f"{target} resolves to no node: {what} after waiting {wait:g}s ({seen[0]})",
                         "an election that takes longer (a paused or cut-off master: ~15 s) needs a later `at`")
    return node


def resolve_all(c: ClusterBackend, member: str, halt: threading.Event | None = None) -> list[str]:
    """The nodes a partition member names now: `slaves-of:<group>` is every node of the group but the
    master `master-of:<group>` resolves to, `slave-of:<group>#<k>` the k-th of those (the plan's node
    order), `controller-followers` every controller but the one `controller-leader` resolves to (the
    same moment's answer); any other member, one node."""
    if member == CONTROLLER_FOLLOWERS:
        leader = resolve(c, CONTROLLER_LEADER, halt)
        return [p.name for p in c.plans.values() if p.role == "controller" and p.name != leader]
    if not member.startswith((SLAVES_OF, SLAVE_OF)):
        return [resolve(c, member, halt)]
    group = role_group(member)
    master = resolve(c, MASTER_OF + str(group), halt)
    others = [p.name for p in c.plans.values() if p.broker_name == group and p.is_broker and p.name != master]
    k = slave_index(member)
    return others if k is None else others[k - 1:k]  # validation kept k within the group's slaves
