"""What the gRPC path (the proxy, the 5.x Java client, POP) takes and refuses, as spec errors: one
line each (docs/grpc.md)."""
from __future__ import annotations

from typing import Any

from rmqchaos.spec.scenario import Scenario

#: the proxy's least invisible time for a receive (ProxyConfig.minInvisibleTimeMillsForRecv, 10 s in
#: 5.1.0-5.5.0): a SimpleConsumer asking less is answered ILLEGAL_INVISIBLE_TIME on every receive
MIN_INVISIBLE_S = 10.0
#: the long polling a receive may ask for (ProxyConfig.grpcClientConsumerMin/MaxLongPollingTimeoutMillis,
#: 5 s and 20 s): with 2 s a SimpleConsumer received nothing in 60 s here (the proxy holds a receive
#: 5 s, past the client's deadline of its long polling plus its 3 s request timeout)
LONG_POLLING_S = (5.0, 20.0)


def grpc_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    errs: list[tuple[tuple[Any, ...], str]] = []
    proxy = s.cluster.proxy.enabled
    no_proxy = "it goes through the proxy, and this cluster has none: set cluster.proxy.enabled: true"
    grpc_consumers = [(i, c) for i, c in enumerate(s.consumers.instances if s.consumers else []) if c.grpc]
    if s.load is not None and s.load.client == "grpc":
        ld = s.load
        if not proxy:
            errs.append((("load", "client"), f"a gRPC load: {no_proxy}"))
        for field, on in (("order", ld.order), ("transaction", ld.transaction), ("timer", ld.timer)):
            if on is not None:
                errs.append((("load", field), f"the gRPC load sends normal messages only: drop load.{field} or "
                                              "use client: remoting"))
        if ld.policy.kind not in ("no_retry", "retry"):
            errs.append((("load", "policy", "kind"), f"the gRPC load takes policy no_retry or retry (attempts), "
                                                     f"not {ld.policy.kind}"))
        if ld.workers:
            errs.append((("load", "workers"), "the gRPC load is one Java process: drop workers"))
    for i, c in grpc_consumers:
        g = c.grpc
        assert g is not None
        loc = ("consumers", "instances", i, "grpc")
        if not proxy:
            errs.append((loc, f"consumer {c.id} through gRPC: {no_proxy}"))
        if g.kind == "simple" and g.invisible < MIN_INVISIBLE_S:
            errs.append(((*loc, "invisible"), f"{g.invisible:g} s is under the proxy's least invisible time for a "
                                              f"receive ({MIN_INVISIBLE_S:g} s, minInvisibleTimeMillsForRecv), "
                                              f"which refuses every such receive: use at least {MIN_INVISIBLE_S:g}s"))
        lo, hi = LONG_POLLING_S
        if g.kind == "simple" and not lo <= g.long_polling <= hi:
            errs.append(((*loc, "long_polling"), f"{g.long_polling:g} s is outside the proxy's long polling bounds "
                                                 f"({lo:g}-{hi:g} s, grpcClientConsumerMin/MaxLongPollingTimeoutMillis): "
                                                 f"use {lo:g}s to {hi:g}s"))
        if g.kind == "push" and (g.change_invisible is not None or c.mode != "all" or g.last_ack_delay):
            errs.append((loc, f"consumer {c.id}: a PushConsumer acks by itself; change_invisible, last_ack_delay "
                              "and mode ack_first_of_batch need kind: simple"))
        if g.last_ack_delay and g.last_ack_delay >= (g.change_invisible or g.invisible):
            errs.append(((*loc, "last_ack_delay"), f"{g.last_ack_delay:g} s is not within the invisible time "
                                                   f"({g.change_invisible or g.invisible:g} s): the late ack would "
                                                   "race it; make it shorter"))
        if c.listener != "concurrently":
            errs.append(((*loc[:-1], "listener"), f"consumer {c.id}: an orderly gRPC consumer (FIFO groups) is not "
                                                  "here yet: drop listener"))
        if c.faketime:
            errs.append(((*loc[:-1], "faketime"), f"consumer {c.id}: a gRPC consumer has no clock of its own here: "
                                                  "drop faketime"))
    ids = {c.id for _, c in grpc_consumers}
    for i, f in enumerate(s.faults):
        who = (f.model_extra or {}).get("consumer")
        if f.kind.startswith("consumer_") and who in ids:
            errs.append((("faults", i), f"a {f.kind} fault on gRPC consumer {who} is not supported yet (its ledger "
                                        "line follows the ack's answer): aim it at a remoting consumer"))
    return errs
