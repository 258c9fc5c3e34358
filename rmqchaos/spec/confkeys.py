"""RocketMQ config keys under `config:`: the keys the pinned jars accept (read by reflection at
setup), the keys the platform owns, the keys renamed or removed between the majors, and whether a
value is one the broker's setter takes."""
from __future__ import annotations

import difflib
import json
from functools import lru_cache
from typing import Any

from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError

# Keys the platform sets itself (addresses, identity, store location); overriding them would
# break readiness, loopback-only listening or per-node isolation.
PLATFORM_BROKER_KEYS = {
    "brokerClusterName": "cluster.name", "brokerName": "brokers[].name", "brokerId": "brokers[].slave",
    "listenPort": "brokers[].port", "haListenPort": "brokers[].port", "namesrvAddr": "cluster.namesrv.port",
    "brokerIP1": "(always 127.0.0.1)", "brokerIP2": "(always 127.0.0.1)", "bindAddress": "(always 127.0.0.1)",
    "storePathRootDir": "(the run directory)", "storePathCommitLog": "(the run directory)",
    "rocketmqHome": "(the run directory)",
    "enableControllerMode": "brokers[].replicas", "controllerAddr": "(the controllers: cluster.controllers)",
    "enableDLegerCommitLog": "brokers[].replication: dledger", "dLegerGroup": "(the group's name)",
    "dLegerPeers": "brokers[].replicas/port", "dLegerSelfId": "(the replica's index: n<r>)",
    "storePathDLedgerCommitLog": "(the run directory)",
}
PLATFORM_NAMESRV_KEYS = {"listenPort": "cluster.namesrv.port", "bindAddress": "(always 127.0.0.1)",
                         "rocketmqHome": "(the run directory)",
                         "enableControllerInNamesrv": "cluster.controllers.mode: embedded"}

# Controller mode. The controllers' own keys (ControllerConfig of the pinned 5.5.0 jars, read with
# javap; config-keys.json does not list them yet): what a scenario may set in cluster.controllers.config.
CONTROLLER_KEYS = {"enableElectUncleanMaster": "bool", "scanNotActiveBrokerInterval": "long",
                   "scanInactiveMasterInterval": "long", "notifyBrokerRoleChanged": "bool",
                   "electMasterMaxRetryCount": "int", "controllerThreadPoolNums": "int",
                   "controllerRequestThreadPoolQueueCapacity": "int", "mappedFileSize": "int",
                   "processReadEvent": "bool"}
# JraftConfig keys (read by ControllerStartup from controller.conf; 5.3.3 and 5.5.0 alike), with `type: jRaft` only
JRAFT_KEYS = {"jRaftElectionTimeoutMs": "int", "jRaftScanWaitTimeoutMs": "int", "jRaftSnapshotIntervalSecs": "int"}
PLATFORM_CONTROLLER_KEYS = {
    "controllerDLegerGroup": "(the cluster's name)", "controllerDLegerPeers": "cluster.controllers.count/port",
    "controllerDLegerSelfId": "(the node's index)", "controllerStorePath": "(the run directory)",
    "configStorePath": "(the run directory)", "rocketmqHome": "(the run directory)",
    "listenPort": "cluster.controllers.port", "bindAddress": "(the node's own address)",
    "controllerType": "cluster.controllers.type", "jRaftGroupId": "(the cluster's name)",
    "jRaftServerId": "cluster.controllers.jraft_port (the node's own address)",
    "jRaftInitConf": "cluster.controllers.count/jraft_port", "jRaftControllerRPCAddr": "cluster.controllers.port"}
# Broker keys read only by a broker in controller mode (BrokerConfig, MessageStoreConfig): on a
# classic group they would silently do nothing, so they are refused there.
CONTROLLER_MODE_BROKER_KEYS = {"allAckInSyncStateSet", "controllerHeartBeatTimeoutMills", "brokerHeartbeatInterval",
                               "syncBrokerMetadataPeriod", "checkSyncStateSetPeriod", "syncControllerMetadataPeriod",
                               "brokerElectionPriority", "fetchControllerAddrByDnsLookup"}
# Broker keys read only by a DLedger commit log (MessageStoreConfig): refused on any other group.
DLEDGER_BROKER_KEYS = {"preferredLeaderId", "enableBatchPush"}
# Broker keys of a classic group only: a controller-mode replica's role and id are the controllers'.
CLASSIC_BROKER_KEYS = {"brokerRole": "a controller-mode replica starts as SLAVE and the elected master runs as "
                                     "SYNC_MASTER: drop brokerRole from this group"}


#: broker.conf keys RocketMQ renamed between the majors, 4.x name -> 5.x name. Only what was renamed
#: with its meaning kept (same type, default and reader). Of 4.9.7's 7 broker keys 5.5.0's jars lack
#: (config-keys.json of each; namesrv: none), one: haSlaveFallbehindMax (4.9.7 MessageStoreConfig,
#: int 268435456, read by HAService.isSlaveOK) is haMaxGapNotInSync since 5.0.0 (apache/rocketmq
#: 5c350af174, RIP-34 #3979; 5.5.0's DefaultHAService.isSlaveOK reads it, default 268435456: javap).
RENAMED_IN_5 = {"haSlaveFallbehindMax": "haMaxGapNotInSync"}
#: the other six, removed without a successor (none of them is read anywhere in 4.9.7's sources)
REMOVED_IN_5 = {**dict.fromkeys(("commercialEnable", "commercialTimerCount", "commercialTransCount",
                                 "commercialBigCount"), "removed in 5.0.0, apache/rocketmq #3974"),
                "maxDelayTime": "removed in 5.2.0, apache/rocketmq #6400",
                "filterServerNums": "removed in 5.2.0 with the filter server, apache/rocketmq #6749"}
RENAMED_EITHER_WAY = {**RENAMED_IN_5, **{new: old for old, new in RENAMED_IN_5.items()}}


@lru_cache(maxsize=4)
def config_keys(version: str) -> dict[str, dict[str, str]]:
    """{'broker': {key: type}, 'namesrv': {...}} read by reflection from that version's own jars
    (rmqchaos/rocketmq/dist.py; resolved on the version's first use)."""
    f = rocketmq_dist.rocketmq_home(version) / "config-keys.json"
    if not f.is_file():
        raise UserError(f"{f} is missing", f"remove {f.parent} to resolve RocketMQ {version} again")
    return json.loads(f.read_text())


_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}


def _conf_value_error(key: str, value: Any, t: str) -> str | None:
    """Why `value` is not one the broker accepts for a key of type `t` (config-keys.json), or None.
    The broker parses each value with its setter's type and swallows a failure, keeping the default:
    a value it cannot take must be an error here, never a silent substitution."""
    if t.startswith("enum:"):
        allowed = t[5:].split(",")
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            return (f"{key} must be one of {', '.join(allowed)} (got {value!r})"
                    + (f"; did you mean {close[0]}?" if close else ""))
        return None
    if t in _RANGE:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{key} must be an int (got {value!r})"
        lo, hi = _RANGE[t]
        if not lo <= value <= hi:
            return f"{key} must be within {lo}..{hi} (a Java {t}) (got {value!r})"
        return None
    ok = {"bool": isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "str": isinstance(value, str)}.get(t, True)
    return None if ok else f"{key} must be {'a ' + t} (got {value!r})"


def _check_conf(conf: dict[str, Any], known: dict[str, str], platform: dict[str, str],
                where: tuple[Any, ...], what: str) -> list[tuple[tuple[Any, ...], str]]:
    errs: list[tuple[tuple[Any, ...], str]] = []
    for key, value in conf.items():
        loc = where + (key,)
        if key in platform:
            errs.append((loc, f"{key} is set by the platform; use {platform[key]}"))
        elif key not in known and key in CONTROLLER_KEYS and known is not CONTROLLER_KEYS:
            errs.append((loc, f"{key} is a controller key: set it in cluster.controllers.config"))
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            if RENAMED_EITHER_WAY.get(key) in known:  # the other major's name of a key this version has
                hint = f"; RocketMQ renamed it between 4.x and 5.x: use {RENAMED_EITHER_WAY[key]}"
            elif key in REMOVED_IN_5:
                hint = f" (a 4.x key, {REMOVED_IN_5[key]})"
            errs.append((loc, f"unknown {what} key {key!r}{hint}"))
        else:
            msg = _conf_value_error(key, value, known[key])
            if msg:
                errs.append((loc, msg))
    return errs
