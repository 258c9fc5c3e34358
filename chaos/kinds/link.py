"""link: a slow or broken link between two members (latency with jitter, a bandwidth limit, a
blackhole, resets) through Toxiproxy, placed by iptables DNAT (cluster/net/links.py), for `duration`
or until the load ends. The kernel here has no netem.

`from` is the side that connects (a node, `producers`, `consumers`, `consumer-<id>`), `to` the side
that listens (a node): every listener port of `to` gets a proxy, and new connections from `from`'s
address to it are sent there. `both: true` adds `to`'s connections to `from`'s listeners.
The DNAT rules only catch new connections, and RocketMQ clients keep one connection per broker and
reconnect only when it breaks. `reconnect: true` (the default) therefore breaks the links'
established connections (`ss -K` on `from`'s side: exactly from `from`'s address to `to`'s address
and listener port) once the rules and proxies are in place, so the clients reconnect through the
proxy, and again at the fault's stop once the rules are gone, so they reconnect direct. The default
is on because a link fault that silently leaves a running load on its direct path measures nothing;
its cost is that a request in flight on a broken connection fails (a transport error, at the
fault's start and stop), which the ledger shows. `reconnect: false` leaves open connections on
their direct path (only connections opened later go through the proxy). Evidence: the connections
open at the start (`links_at_start`), and at start and stop which were broken and which came back
within a few seconds, each `via proxy` or `direct` (`reconnect_at_start`, `reconnect_at_stop`).

Toxics act on `stream`: `downstream` (the answers: a request's round trip grows by `latency`, the
default), `upstream` (the requests) or `both` (each toxic both ways: a round trip grows by twice).
Evidence: the proxies, toxics and rules, and a probe's round trip from `from`'s address to `to`'s
first remoting port before (direct) and during (through the proxy): `rtt_before_ms`, `rtt_during_ms`.

Its intent, from those: a latency as the round trip's growth through the proxy against the latency
asked (twice it with `stream: both`); a blackhole or a reset as the probe through the proxy getting
no answer; and with `reconnect`, the share of the reconnected connections that went through the
proxy (a bandwidth cap shows in nothing a one-frame probe measures: that share is its measure)."""
from __future__ import annotations

import random
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, model_validator

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent, measure, num
from chaos.kinds.partition import Member
from chaos.protocol import FaultError, Lasting, LastingKind, register
from cluster.net import toxiproxy as tp
from cluster.net.conns import established
from cluster.net.links import Link, LinkFault, Probe
from cluster.plan.nodes import addresses
from cluster.net.roundtrip import PROBE_REQUEST, endpoints, members, read_frame, remoting_port
from rmqchaos.errors import UserError
from rmqchaos.spec import Duration, Fault, Scenario

class LinkParams(Lasting):
    model_config = ConfigDict(extra="forbid", validate_default=True, serialize_by_alias=True)
    from_: Member = Field(alias="from")
    to: Member
    both: StrictBool = False
    latency: Duration | None = None
    jitter: Duration | None = None
    bandwidth_kb_s: Annotated[StrictInt, Field(ge=1, le=10_000_000)] | None = None
    blackhole: StrictBool = False
    reset: StrictBool = False
    stream: Literal["downstream", "upstream", "both"] = "downstream"
    reconnect: StrictBool = True

    @model_validator(mode="after")
    def _one_effect(self) -> "LinkParams":
        if self.latency is None and self.bandwidth_kb_s is None and not self.blackhole and not self.reset:
            raise ValueError("set at least one of latency, bandwidth_kb_s, blackhole, reset")
        if self.jitter is not None and (self.latency is None or self.jitter > self.latency):
            raise ValueError("jitter needs a latency at least as large (the delay is latency ± jitter)")
        if self.blackhole and self.reset:
            raise ValueError("blackhole and reset exclude each other (a blackhole drops what would trigger the reset)")
        if self.from_ == self.to:
            raise ValueError(f"from and to are both {self.to!r}: a link joins two members")
        return self

    def toxics(self) -> dict[str, tp.Toxic]:
        streams = tp.STREAMS if self.stream == "both" else (self.stream,)
        out: dict[str, tp.Toxic] = {}
        for s in streams:
            if self.latency is not None:
                out[f"latency-{s}"] = tp.latency(round(self.latency * 1000), round((self.jitter or 0) * 1000), s)
            if self.bandwidth_kb_s is not None:
                out[f"bandwidth-{s}"] = tp.bandwidth(self.bandwidth_kb_s, s)
            if self.blackhole:
                out[f"blackhole-{s}"] = tp.blackhole(0, s)  # 0: the connection is held until the fault stops
            if self.reset:
                out[f"reset-{s}"] = tp.reset(0, s)
        return out


def link_intent(p: LinkParams, ev: dict[str, Any]) -> dict[str, Any]:
    """What the link fault's evidence (LinkFault's start and stop) measured against `p`."""
    before, during = ev.get("rtt_before_ms"), ev.get("rtt_during_ms")
    err = (ev.get("probe_during") or {}).get("error")
    ms = []
    if p.latency is not None:
        asked = p.latency * 1000 * (2 if p.stream == "both" else 1)
        added = max(0.0, during - (before or 0.0)) if during is not None else 0.0
        ms.append(measure("ms added", ev.get("probe", ""), asked, added,
                          f"added {num(added)} of {num(asked)} ms to a round trip" if during is not None else
                          f"its probe got no answer ({err})"))
    if p.blackhole or p.reset:
        what = "blackhole" if p.blackhole else "reset"
        ms.append(happened(what, ev.get("probe", ""), err is not None,
                           f"its probe got no answer ({err})" if err else f"its probe was answered in {during} ms"))
    got = (ev.get("reconnect_at_start") or {}).get("reconnected") or []
    if got:
        via = sum(x.endswith(" via proxy") for x in got)
        ms.append(measure("connections via the proxy", p.to, len(got), via,
                          f"{via} of {len(got)} reconnected connections went through the proxy"))
    return intent(ms, f"link fault ({p.from_} -> {p.to})",
                  none="nothing measured (a bandwidth cap shows in no one-frame probe, and no connection reconnected)")


def links(s: Scenario, frm: str, to: str, both: bool) -> list[Link]:
    """Every (client address, server address, listener ports) the fault puts a proxy on."""
    out = [Link(a, b, tuple(pb)) for a, _ in endpoints(s, frm) for b, pb in endpoints(s, to) if pb]
    if both:
        out += [Link(b, a, tuple(pa)) for b, _ in endpoints(s, to) for a, pa in endpoints(s, frm) if pa]
    return out


@register
class LinkKind(LastingKind):
    name = "link"
    Params = LinkParams
    target = "none"

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        # a client's link to a broker, or a replication link between two nodes of a broker group
        src = rng.choice(["producers", "consumers", *(n for ns in topo.groups.values() if len(ns) > 1 for n in ns)])
        g = topo.group_of(src)
        dst = rng.choice([n for n in topo.groups[g] if n != src] if g else [n for ns in topo.groups.values() for n in ns])
        d = seconds(rng, 5, 30)
        f: dict[str, Any] = {"from": src, "to": dst, "duration": dur(d)}
        if rng.random() < 0.3:
            f["blackhole"] = True
        else:
            lat = rng.choice([50, 200, 450, 800])
            f |= {"latency": f"{lat}ms", "jitter": f"{lat // 4}ms"}
        return Draw(f, d + 10, frozenset({dst}), network=True, tags=("blackhole" if "blackhole" in f else "slow",))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        known = members(scenario)
        errs = [((key,), f"no node or client {m!r}; members: {', '.join(known)}")
                for key, m in (("from", params.from_), ("to", params.to)) if m not in known]
        if errs:
            return errs
        if not any(ports for _, ports in endpoints(scenario, params.to)):
            errs.append((("to",), f"{params.to!r} listens on no port: `to` is the side that listens (a node)"))
        if params.both and not any(ports for _, ports in endpoints(scenario, params.from_)):
            errs.append((("both",), f"{params.from_!r} listens on no port: `both` needs two nodes"))
        if not errs and not links(scenario, params.from_, params.to, params.both):
            errs.append((("from",), f"{params.from_!r} has no process in this scenario (no consumer instance?)"))
        return errs

    def start(self) -> None:
        p: LinkParams = self.params  # type: ignore[assignment]
        c = self.ctx.cluster
        s = c.scenario
        want = links(s, p.from_, p.to, p.both)
        tag = re.sub(r"[^A-Za-z0-9._-]", "_", self.occurrence)
        probe = Probe(request=PROBE_REQUEST, reply=read_frame,
                      port=remoting_port(s, p.to))
        self.core = LinkFault(c.run.run_id, tag, want, p.toxics(), addresses(s)["links"], c.run.path / "links",
                              c.run.processes, probe, reconnect=p.reconnect)
        open_conns = [f"{la}:{lp}->{pa}:{pp}" for la, lp, pa, pp in established()
                      if any(la == ln.client and pa == ln.server and pp in ln.ports for ln in want)]
        try:
            ev = self.core.start()
        except UserError as e:
            raise FaultError(f"link {self.occurrence}: {e.message}", e.hint) from None
        self.evidence = {"from": p.from_, "to": p.to, "both": p.both, "stream": p.stream, **ev,
                         "links_at_start": sorted(open_conns)}

    def stop(self) -> dict[str, Any]:
        self.evidence.update(self.core.stop())
        return {"intent": link_intent(self.params, self.evidence), **self.evidence}  # type: ignore[arg-type]
