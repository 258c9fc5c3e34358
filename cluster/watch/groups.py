"""The monitor's `groups`: per broker group of the plan, each second, who is master and what each
replica says of itself (cluster/watch/monitor.py; the format is documented in docs/broker-evidence.md and
read by the failover analysis, so keep it as it is):

- `mode`: controller (replicas with enableControllerMode), dledger (enableDLegerCommitLog), classic;
- `master`/`master_addr`: controller mode: the master the controllers elected; otherwise the node
  namesrv lists as brokerId 0. `epoch`, `sync_state_set`: the controllers' (controller mode only);
- `routed_master`: the node namesrv lists as brokerId 0 (what a producer's route takes);
- `replicas[node]`: `up` (answered GET_BROKER_CONFIG or GET_BROKER_RUNTIME_INFO within the
  monitor's timeout), `role` as the node itself runs (its effective `brokerRole`: the
  ReplicasManager and DLedger's role handler rewrite it on a switch), `max_offset` (runtime info's
  commitLogMaxOffset); controller mode only: `confirm_offset` and `confirm_ms`, the confirm offset
  the node last sent the controllers in its heartbeat and when (cluster/watch/heartbeats.py: no admin
  request returns it), null when it sent none in the last HEARTBEAT_FRESH_MS.

The asks all run at once beside the rest of the sample, so a dead node costs the sample nothing and
a SIGSTOPped one a single timeout, not one per ask; what did not answer is null.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from cluster.watch.heartbeats import Heartbeat
from cluster.plan.nodes import NodePlan
from rmqclient.admin import AdminClient, RemotingError
from rmqclient.controllers import ReplicaGroup, sync_state


@dataclass(frozen=True)
class GroupPlan:
    name: str
    mode: str  # controller | dledger | classic
    nodes: list[tuple[str, str]]  # (node name, addr) of every member, in plan order


@dataclass(frozen=True)
class ReplicaAnswer:
    """What a replica that answered says of itself (role: master | slave | None if not recognised)."""
    role: str | None
    max_offset: int | None


#: a broker heartbeats every second (brokerHeartbeatInterval); a confirm offset older than this is
#: not the node's current one (it is stopped, dead or cut off), and is recorded as null
HEARTBEAT_FRESH_MS = 3000


def _on(v: object) -> bool:
    return v is True or str(v).lower() == "true"


def group_plans(plans: Iterable[NodePlan]) -> dict[str, GroupPlan]:
    """Each broker group of the plan with its mode, from the keys its members run with."""
    members: dict[str, list[NodePlan]] = {}
    for p in plans:
        if p.is_broker:
            members.setdefault(p.broker_name or "", []).append(p)
    out = {}
    for g, ps in members.items():
        mode = ("controller" if any(_on(p.conf.get("enableControllerMode")) for p in ps) else
                "dledger" if any(_on(p.conf.get("enableDLegerCommitLog")) for p in ps) else "classic")
        out[g] = GroupPlan(g, mode, [(p.name, p.addr) for p in ps])
    return out


def role_of(broker_role: str | None) -> str | None:
    """A broker's effective brokerRole as master/slave (ASYNC_MASTER, SYNC_MASTER, SLAVE)."""
    if broker_role in ("ASYNC_MASTER", "SYNC_MASTER"):
        return "master"
    return "slave" if broker_role == "SLAVE" else None


def group_record(g: GroupPlan, controllers: dict[str, ReplicaGroup] | None, reg_ids: dict[int, str] | None,
                 answers: dict[str, ReplicaAnswer | None], heartbeats: dict[str, Heartbeat] | None = None,
                 now_ms: int = 0) -> dict[str, Any]:
    """One group's record from the answers: the controllers' (None: they did not answer), namesrv's
    registrations of the group (brokerId -> addr; None: namesrv did not answer), each node's
    (None: it did not answer), and the heartbeats captured so far (broker addr -> the last)."""
    names = {addr: name for name, addr in g.nodes}
    routed_addr = (reg_ids or {}).get(0)
    rec: dict[str, Any] = {"mode": g.mode, "master": None, "master_addr": None, "epoch": None,
                           "sync_state_set": None, "routed_master": names.get(routed_addr or "")}
    if g.mode == "controller":
        st = (controllers or {}).get(g.name)
        if st is not None:
            rec.update(master=names.get(st.master_addr or ""), master_addr=st.master_addr, epoch=st.master_epoch,
                       sync_state_set=[names.get(a, a) for a in st.in_sync])
    elif routed_addr:
        rec.update(master=names.get(routed_addr), master_addr=routed_addr)
    rec["replicas"] = {}
    for name, addr in g.nodes:
        a = answers.get(name)
        rec["replicas"][name] = {"up": a is not None, "role": a.role if a else None,
                                 "max_offset": a.max_offset if a else None, "confirm_offset": None}
        if g.mode == "controller":
            hb = (heartbeats or {}).get(addr)
            if hb is not None and now_ms - hb.at_ms > HEARTBEAT_FRESH_MS:
                hb = None
            rec["replicas"][name].update(confirm_offset=hb.confirm_offset if hb else None,
                                         confirm_ms=hb.at_ms if hb else None)
    return rec


def ask_role(addr: str, timeout: float) -> str | None:
    """The node's effective brokerRole as master/slave (GET_BROKER_CONFIG); raises RemotingError."""
    return role_of(AdminClient("", timeout).broker_config(addr).get("brokerRole"))


def ask_max_offset(addr: str, timeout: float) -> int | None:
    """The end of the node's commit log (GET_BROKER_RUNTIME_INFO); raises RemotingError."""
    try:
        return int(AdminClient("", timeout).runtime_info(addr)["commitLogMaxOffset"])
    except (KeyError, ValueError):
        return None


def _answer(f: Future) -> tuple[bool, Any]:
    try:
        return True, f.result()
    except RemotingError:
        return False, None


def replica_answer(role: Future, max_offset: Future) -> ReplicaAnswer | None:
    """The two asks of one node as its answer; None (down) when it answered neither."""
    (r_ok, r), (m_ok, m) = _answer(role), _answer(max_offset)
    return ReplicaAnswer(r, m) if r_ok or m_ok else None


def leader_view(asked: list[Future]) -> dict[str, ReplicaGroup] | None:
    """From CONTROLLER_GET_SYNC_STATE_DATA sent to every controller at once (only the Raft leader
    answers): the leader's view, or None when no controller answered."""
    for f in asked:
        try:
            return f.result()
        except RemotingError:
            continue
    return None


class GroupSampler:
    """Asks, once per sample, the controllers (for every controller-mode group at once) and every
    broker node; `start()` sends the asks, and the function it returns builds the records."""

    def __init__(self, plans: Iterable[NodePlan], controllers: list[str], timeout: float,
                 heartbeats: Callable[[], dict[str, Heartbeat]] | None = None) -> None:
        self.groups, self.timeout = group_plans(plans), timeout
        self.controllers, self.heartbeats = controllers, heartbeats
        self.ctl_groups = [g for g, gp in self.groups.items() if gp.mode == "controller"]
        n = sum(2 * len(g.nodes) for g in self.groups.values()) + (len(controllers) if self.ctl_groups else 0)
        self.pool = ThreadPoolExecutor(min(32, max(1, n)), "groups")

    def start(self) -> Callable[[dict[str, dict[int, str]] | None], dict[str, Any]]:
        ctl = [self.pool.submit(sync_state, [a], self.ctl_groups, self.timeout)
               for a in (self.controllers if self.ctl_groups else [])]
        asks = {name: (self.pool.submit(ask_role, addr, self.timeout),
                       self.pool.submit(ask_max_offset, addr, self.timeout))
                for g in self.groups.values() for name, addr in g.nodes}

        def finish(reg: dict[str, dict[int, str]] | None) -> dict[str, Any]:
            state = leader_view(ctl)
            answers = {n: replica_answer(*fs) for n, fs in asks.items()}
            hbs, now = (self.heartbeats() if self.heartbeats else {}), int(time.time() * 1000)
            return {g: group_record(gp, state, None if reg is None else reg.get(g, {}), answers, hbs, now)
                    for g, gp in self.groups.items()}
        return finish
