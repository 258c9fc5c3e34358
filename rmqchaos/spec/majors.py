"""What a RocketMQ 4.x release does not have, refused at validation, one line each naming the feature,
the version and what to use instead (docs/spec.md, "RocketMQ versions"): controller mode, the proxy
and everything through it (the gRPC clients, POP), the timer wheel (4.x has delay levels). A key only
5.x brokers read is refused by the version's own config keys (checks.py), as for any release."""
from __future__ import annotations

from typing import Any

from rmqchaos.rocketmq.dist import major
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
