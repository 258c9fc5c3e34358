"""The controllers of a controller-mode cluster over the remoting protocol: each broker group's
master, epoch and SyncStateSet (CONTROLLER_GET_SYNC_STATE_DATA, as `mqadmin getSyncStateSet`), and
which controller is the Raft leader (CONTROLLER_GET_METADATA_INFO). Request codes: rocketmq-remoting
RequestCode.java, ControllerRequestCode."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from rmqclient.admin import Connection, RemotingError, check_answer

CONTROLLER_GET_METADATA_INFO = 1005  # a controller's Raft view (GetMetaDataResponseHeader); any controller answers
CONTROLLER_GET_SYNC_STATE_DATA = 1006  # a controller's view of broker groups (as `mqadmin getSyncStateSet`)
CONTROLLER_NOT_LEADER = 2007  # a controller that is not the Raft leader answers this


@dataclass(frozen=True)
class ReplicaGroup:
    """A controller-mode broker group as the controller leader sees it (BrokerReplicasInfo.ReplicasInfo)."""
    master_addr: str | None  # None while the group has no master
    master_id: int | None
    master_epoch: int
    in_sync: list[str]  # addresses of the replicas in the SyncStateSet (the master among them)
    not_in_sync: list[str]


def sync_state(controllers: list[str], groups: list[str], timeout: float = 3.0,
               source: str | None = None) -> dict[str, ReplicaGroup]:
    """Master, epoch and SyncStateSet of each group (CONTROLLER_GET_SYNC_STATE_DATA, what `mqadmin
    getSyncStateSet` asks): every controller at once, the first answer taken; only the Raft leader
    answers (asked in turn, a follower that held the request to its timeout delayed a 5.1.1 leader's
    answer by seconds). A group the controllers do not know yet is absent."""
    if not controllers:
        raise RemotingError("no controller to ask")

    def ask(addr: str) -> dict[str, ReplicaGroup]:
        with Connection(addr, timeout, source) as c:
            resp = c.request(CONTROLLER_GET_SYNC_STATE_DATA, body=json.dumps(groups).encode())
        check_answer(resp, f"CONTROLLER_GET_SYNC_STATE_DATA on {addr}")
        return {name: replica_group(r) for name, r in ((resp.body_json() or {}).get("replicasInfoTable") or {}).items()}

    if len(controllers) == 1:  # the monitor asks each controller on its own pool, every second: no pool here
        return ask(controllers[0])
    last: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=len(controllers), thread_name_prefix="sync-state")
    try:
        for f in as_completed([pool.submit(ask, a) for a in controllers]):
            try:
                return f.result()
            except RemotingError as e:
                last = e
    finally:  # not waiting for the others: each ends by its own timeout
        pool.shutdown(wait=False)
    raise last  # type: ignore[misc]  # every controller failed: the last error says how


def replica_group(r: dict) -> ReplicaGroup:
    """One group's ReplicasInfo: since 5.1.1 each replica is {brokerId, brokerAddress, alive} and the
    master has a masterBrokerId; 5.1.0's controllers name each {address, brokerId} and no master id."""
    def addr(x: dict) -> str:
        return x.get("brokerAddress") or x.get("address") or ""
    return ReplicaGroup(r.get("masterAddress") or None, r.get("masterBrokerId"), int(r.get("masterEpoch") or 0),
                        sorted(addr(x) for x in r.get("inSyncReplicas") or []),
                        sorted(addr(x) for x in r.get("notInSyncReplicas") or []))


@dataclass(frozen=True)
class ControllerMeta:
    """One controller's view of the controllers' Raft group (GetMetaDataResponseHeader, 5.5.0:
    group, controllerLeaderId, controllerLeaderAddress, isLeader, peers)."""
    addr: str  # the controller asked
    is_leader: bool  # it is the leader itself
    leader_id: str | None  # e.g. n1; None while it knows no leader (mid-election)
    leader_addr: str | None  # the leader's DLedger peer address: its listen address here
    peers: str


def controller_metadata(addr: str, timeout: float = 2.0, source: str | None = None) -> ControllerMeta:
    """CONTROLLER_GET_METADATA_INFO on one controller (as `mqadmin getControllerMetaData`)."""
    with Connection(addr, timeout, source) as c:
        resp = c.request(CONTROLLER_GET_METADATA_INFO)
    check_answer(resp, f"CONTROLLER_GET_METADATA_INFO on {addr}")
    e = resp.ext
    return ControllerMeta(addr, e.get("isLeader", "").lower() == "true", e.get("controllerLeaderId") or None,
                          e.get("controllerLeaderAddress") or None, e.get("peers") or "")


def controller_leader(controllers: list[str], timeout: float = 2.0) -> str | None:
    """The address of the controller that answers as the Raft leader itself (each asked in turn);
    None while none does (mid-election). RemotingError when no controller answers at all."""
    last: RemotingError | None = None
    answered = False
    for addr in controllers:
        try:
            meta = controller_metadata(addr, timeout)
        except RemotingError as e:
            last = e
            continue
        answered = True
        if meta.is_leader:
            return addr
    if not answered:
        raise last or RemotingError("no controller to ask")
    return None
