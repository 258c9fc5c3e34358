"""Which keys belong to which replication mode: classic master/slave groups (the baseline),
controller-mode groups (`brokers[].replicas` with `cluster.controllers`) and DLedger groups
(`replicas` with `replication: dledger`). One error line per problem."""
from __future__ import annotations

from typing import Any

from rmqchaos.spec.confkeys import (CLASSIC_BROKER_KEYS, CONTROLLER_KEYS, CONTROLLER_MODE_BROKER_KEYS,
                                    DLEDGER_BROKER_KEYS, JRAFT_KEYS, PLATFORM_CONTROLLER_KEYS, _check_conf)
from rmqchaos.spec.cluster import Controllers
from rmqchaos.spec.scenario import Scenario

Errors = list[tuple[tuple[Any, ...], str]]


def controller_errors(s: Scenario) -> Errors:
    """Controller mode: controllers and replica groups need each other, and every key is of its mode."""
    c, errs = s.cluster, []
    ctl = c.controllers
    groups = [i for i, b in enumerate(c.brokers) if b.controller_mode]
    for i in groups:
        b = c.brokers[i]
        if ctl is None:
            errs.append((("cluster", "brokers", i, "replicas"),
                         f"{b.name} is a controller-mode group (replicas: {b.replicas}) but the cluster has no "
                         "controllers: add cluster.controllers (e.g. {mode: standalone, count: 3})"))
        if b.slave is not None:
            errs.append((("cluster", "brokers", i, "slave"), "a controller-mode group (replicas) has no fixed "
                                                             "slave: drop slave, or drop replicas for master/slave"))
        for key, why in CLASSIC_BROKER_KEYS.items():
            if key in b.config:
                errs.append((("cluster", "brokers", i, "config", key), why))
    for i, b in enumerate(c.brokers):
        for key in sorted(CONTROLLER_MODE_BROKER_KEYS & set(b.config)) if not b.controller_mode else ():
            errs.append((("cluster", "brokers", i, "config", key),
                         f"{key} is a controller-mode key and {b.name} replicates by DLedger (replication: "
                         "dledger): drop it" if b.dledger else
                         f"{key} applies only to a controller-mode group: give {b.name} `replicas:` "
                         "(and cluster.controllers), or drop the key"))
    if not groups:
        for key in sorted(CONTROLLER_MODE_BROKER_KEYS & set(c.broker_defaults.config)):
            errs.append((("cluster", "broker_defaults", "config", key),
                         f"{key} applies only to a controller-mode group, and no group is one (`replicas:` "
                         "with replication: controller)"))
    if ctl is not None:
        if not groups:
            errs.append((("cluster", "controllers"), "no broker group uses the controllers: give a group "
                                                     "`replicas:` (controller mode) or drop cluster.controllers"))
        if ctl.mode == "embedded":
            if ctl.count != 1:
                errs.append((("cluster", "controllers", "count"),
                             f"embedded controllers run inside namesrv and this cluster has one namesrv, so one "
                             f"controller (got count {ctl.count}): use mode: standalone for {ctl.count}"))
            if ctl.jvm != Controllers.model_fields["jvm"].default:  # (the resolved dump carries the default)
                errs.append((("cluster", "controllers", "jvm"), "an embedded controller runs in namesrv's JVM: "
                                                                "set cluster.namesrv.jvm"))
        errs += _jraft_errors(ctl, c.backend)
        keys = {**CONTROLLER_KEYS, **JRAFT_KEYS} if ctl.type == "jRaft" else CONTROLLER_KEYS
        errs += _check_conf({k: v for k, v in ctl.config.items() if ctl.type == "jRaft" or k not in JRAFT_KEYS},
                            keys, PLATFORM_CONTROLLER_KEYS, ("cluster", "controllers", "config"), "controller")
    return errs


def _jraft_errors(ctl: Controllers, backend: str) -> Errors:
    """jRaft controllers: standalone on the local backend; jRaft keys only with them."""
    at = ("cluster", "controllers")
    if ctl.type != "jRaft":
        errs = [(at + ("config", k), f"{k} is a jRaft key and these controllers are DLedger: set "
                                     "cluster.controllers.type: jRaft, or drop it") for k in sorted(set(JRAFT_KEYS) & set(ctl.config))]
        if ctl.jraft_port is not None:
            errs.append((at + ("jraft_port",), "jraft_port applies to jRaft controllers: set type: jRaft, or drop it"))
        return errs
    errs = []
    if ctl.mode != "standalone":
        errs.append((at + ("mode",), "jRaft controllers run standalone (each its own node and peer port): "
                                     "use mode: standalone, or type: DLedger"))
    if backend != "local":
        errs.append((at + ("type",), "jRaft controllers run on the local backend only (so far)"))
    if max(ctl.jraft_ports(), default=0) > 65535:
        errs.append((at + ("jraft_port",), f"controller {ctl.count - 1}'s jRaft port {max(ctl.jraft_ports())} is "
                                           "beyond 65535: use a lower jraft_port"))
    return errs
    return errs


def dledger_errors(s: Scenario) -> Errors:
    """DLedger groups: enough replicas for a Raft majority, no fixed slave or role, DLedger keys only
    on them; `replication` only with `replicas`."""
    c, errs = s.cluster, []
    for i, b in enumerate(c.brokers):
        at = ("cluster", "brokers", i)
        if b.replication is not None and b.replicas is None:
            errs.append((at + ("replication",), f"replication applies to a replicated group: give {b.name} "
                                                "`replicas:` (3 or more for dledger), or drop replication"))
        if not b.dledger:
            errs += [(at + ("config", k), f"{k} applies only to a DLedger group (replicas with replication: "
                                          "dledger)") for k in sorted(DLEDGER_BROKER_KEYS & set(b.config))]
            continue
        assert b.replicas is not None
        if b.replicas < 3:
            errs.append((at + ("replicas",), f"a DLedger group needs at least 3 replicas (got {b.replicas}): Raft "
                                             "commits on a majority, and only 3 or more keep one with a replica down"))
        if b.slave is not None:
            errs.append((at + ("slave",), "a DLedger group (replication: dledger) has no fixed slave: drop slave"))
        if "brokerRole" in b.config:
            errs.append((at + ("config", "brokerRole"), "a DLedger replica's role is DLedger's (its leader runs as "
                                                        "SYNC_MASTER, the others as SLAVE): drop brokerRole"))
        peer = b.config.get("preferredLeaderId")
        if peer is not None and peer not in [f"n{r}" for r in range(b.replicas)]:
            errs.append((at + ("config", "preferredLeaderId"), f"preferredLeaderId names a replica: n0..n{b.replicas - 1} "
                                                               f"(replica r is n<r>), got {peer!r}"))
        if c.backend != "local":
            errs.append((at + ("replication",), "a DLedger group runs on the local backend only (so far)"))
    if not any(b.dledger for b in c.brokers):
        errs += [(("cluster", "broker_defaults", "config", k), f"{k} applies only to a DLedger group, and no group "
                                                               "is one") for k in sorted(DLEDGER_BROKER_KEYS & set(c.broker_defaults.config))]
    return errs


def controller_ports(s: Scenario) -> list[tuple[int, tuple[Any, ...]]]:
    """(port, where) of each controller's listener (embedded: inside namesrv, one)."""
    ctl = s.cluster.controllers
    if ctl is None:
        return []
    n = ctl.count if ctl.mode == "standalone" else 1
    return [(ctl.port + k, ("cluster", "controllers", "port")) for k in range(n)] + \
        [(p, ("cluster", "controllers", "jraft_port")) for p in ctl.jraft_ports()]
