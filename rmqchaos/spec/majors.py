"""What a RocketMQ 4.x release does not have, refused at validation, one line each naming the feature,
the version and what to use instead (docs/spec.md, "RocketMQ versions"): controller mode, the proxy
and everything through it (the gRPC clients, POP), the timer wheel (4.x has delay levels). A key only
5.x brokers read is refused by the version's own config keys (checks.py), as for any release.

Config keys across two versions (the pre-release test's candidate and baseline share the base
scenario's keys): a key RocketMQ renamed is carried under the other version's name (confkeys.RENAMED_IN_5),
a key only one of the two versions has is refused in one line (`across`)."""
from __future__ import annotations

from typing import Any, Collection, Mapping

from rmqchaos.rocketmq.dist import major
from rmqchaos.spec.confkeys import RENAMED_EITHER_WAY, REMOVED_IN_5
from rmqchaos.spec.scenario import Scenario


def major_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """One line per 5.0 feature the scenario asks of a 4.x release, at the first place that asks."""
    v = s.cluster.rocketmq_version
    if major(v) >= 5:
        return []
    lacks = f"RocketMQ {v} has no"
    errs: list[tuple[tuple[Any, ...], str]] = []
    controlled = [i for i, b in enumerate(s.cluster.brokers) if b.controller_mode]
    if s.cluster.controllers is not None or controlled:
        loc = ("cluster", "controllers") if s.cluster.controllers is not None else \
            ("cluster", "brokers", controlled[0], "replication")
        errs.append((loc, f"{lacks} controller mode (5.0+): a 4.x group replicates with a slave or with "
                          "replication: dledger (4.5+)"))
    grpc = [(i, c.grpc) for i, c in enumerate(s.consumers.instances if s.consumers else []) if c.grpc is not None]
    pop = any(g.kind == "simple" for _, g in grpc)
    grpc_load = s.load is not None and s.load.client == "grpc"
    if s.cluster.proxy.enabled or grpc or grpc_load:
        loc = (("cluster", "proxy", "enabled") if s.cluster.proxy.enabled else ("load", "client") if grpc_load
               else ("consumers", "instances", grpc[0][0], "grpc"))
        what = "proxy, gRPC clients or POP (5.0+)" if pop else "proxy or gRPC clients (5.0+)"  # after "has no"
        errs.append((loc, f"{lacks} {what}: the load and the consumers speak remoting to the brokers "
                          "(client: remoting, no grpc, proxy.enabled: false)"))
    if s.load is not None and s.load.timer is not None and s.load.timer.delay is not None:
        errs.append((("load", "timer", "delay"), f"{lacks} timer wheel (5.0+, TIMER_DELIVER_MS): use "
                                                 "delay_level (one of the brokers' messageDelayLevel)"))
    return errs


def across(conf: Mapping[str, Any], where: str, version: str, known: Collection[str], other: str,
           other_known: Collection[str], fix: str) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """`conf`, keys meant for both `version` and `other`, as `version` takes it: (the conf, the keys
    mapped {name given: name on version}, one refusal line per key that only `other` has, `fix`
    saying what to do). A key neither version has is kept: the validation names it as unknown."""
    out: dict[str, Any] = {}
    mapped: dict[str, str] = {}
    refused: list[str] = []
    for key, value in conf.items():
        if key not in known and RENAMED_EITHER_WAY.get(key) in known:
            out[RENAMED_EITHER_WAY[key]] = value
            mapped[key] = RENAMED_EITHER_WAY[key]
        elif key not in known and key in other_known:
            why = f" ({REMOVED_IN_5[key]})" if key in REMOVED_IN_5 else ""
            refused.append(f"key {key} ({where}) is a RocketMQ {other} key that {version} does not have{why}: {fix}")
        else:  # this version's key, or one neither has (the validation names it)
            out[key] = value
    return out, mapped, refused
