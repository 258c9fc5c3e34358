"""partition: cut named groups of nodes and clients apart (Jepsen's partition nemesis) with iptables
DROP rules in the run's own chain (cluster/net/netrules.py), for `duration` or until the load ends.

Members are names, never addresses: a node (namesrv, broker-a, broker-a-s, proxy), `producers`
(the load), `consumers` (every consumer instance) or `consumer-<id>`, or a role (`master-of:<group>`,
`controller-leader`, the several-node `slaves-of:<group>`, `controller-followers`, and one of a
group's slaves, `slave-of:<group>#<k>`) resolved to its nodes when the occurrence starts
(chaos/targets.py; the evidence's `groups` are the resolved names, `asked` the groups as written).
Each has its own loopback address in the cluster's subnet (cluster/plan/nodes.py `addresses`), so the
rules can only name 127.0.0.0/8. Every rule also names a node's listening port, so another cluster
on the same addresses (other ports) is untouched: a link between a and b is a's connections to b's listeners
and b's connections to a's. `one_way`: only what the first group sends to the others is dropped
(TCP then fails both ways at the handshake, but packets from the others still arrive).

Evidence: the rules, and the established connections across the cut when it started and which
of them were gone when it ended (`ss`). Its intent: the rules the kernel lists in the run's chain
once they are added and again at the end, against those asked; and the links across the cut (a
probe on a fresh connection, as the monitor's `links`, cluster/net/roundtrip.py) that answered just before
it and gave no answer once it was in place. A DROP does not close an open connection (its packets
are retransmitted until a timeout), so the connections closed by the end are told, not measured."""
from __future__ import annotations

import random
import re
import time
from typing import Annotated, Any

from pydantic import Field, StrictBool

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import intent, measure
from chaos.protocol import FaultError, Lasting, LastingKind, register
from chaos.targets import resolve_all
from cluster.net import netrules
from cluster.net.conns import established
from cluster.net.roundtrip import cross_pairs, endpoints, members, pair_links, probe_now
from rmqchaos.errors import UserError
from rmqchaos.spec import Fault, Scenario, is_role, role_error

Member = Annotated[str, Field(pattern=r"^((master-of:|slaves-of:)?[A-Za-z][A-Za-z0-9_-]{0,60}"
                                      r"|slave-of:[A-Za-z][A-Za-z0-9_-]{0,60}#[1-9])$")]


class PartitionParams(Lasting):
    groups: Annotated[list[Annotated[list[Member], Field(min_length=1)]], Field(min_length=2, max_length=8)]
    one_way: StrictBool = False


SHAPES = ("one", "minority", "majority", "primaries", "bridge", "clients")


def shape_groups(rng: random.Random, topo: Topology) -> tuple[list[list[str]], str]:
    """A partition in Jepsen's shapes over the cluster's nodes: `one` node cut from the rest; a
    `minority` (at most a third) from the majority; `majority`: two halves; `primaries`: every
    group's master alone (replicated groups by role) and the rest together; `bridge`: two halves cut
    apart, one node left in neither, reaching both; `clients`: the producers or the consumers cut
    from the cluster. Returns (groups, shape)."""
    shape = rng.choice(SHAPES)
    nodes = list(topo.cluster_nodes)
    rng.shuffle(nodes)
    if shape == "bridge" and len(nodes) < 3:
        shape = "one"
    if shape == "one":
        return [nodes[:1], nodes[1:]], shape
    if shape == "minority":
        k = max(1, len(nodes) // 3)
        return [nodes[:k], nodes[k:]], shape
    if shape == "majority":
        k = len(nodes) // 2
        return [nodes[:k], nodes[k:]], shape
    if shape == "bridge":
        rest = nodes[1:]
        k = len(rest) // 2
        return [rest[:k], rest[k:]], shape
    if shape == "clients":
        return [[rng.choice(["producers", "consumers"])], sorted(topo.cluster_nodes)], shape
    primaries = [[f"master-of:{g}"] if g in topo.replicated else [ns[0]] for g, ns in sorted(topo.groups.items())]
    rest = [topo.namesrv, *topo.controllers]
    for g, ns in sorted(topo.groups.items()):
        rest += [f"slaves-of:{g}"] if g in topo.replicated else list(ns[1:])
    return primaries + [rest], shape


#: (src address, dst address, dport, sport): one DROP
Drop = tuple[str, str, "int | None", "int | None"]


def drops(s: Scenario, groups: list[list[str]], one_way: bool) -> list[Drop]:
    """Every DROP that cuts each member of a group from each member of the others (one_way: only
    what the first group sends to the others)."""
    k = len(groups)
    pairs = [(0, j) for j in range(1, k)] if one_way else [(i, j) for i in range(k) for j in range(i + 1, k)]
    ends = [[e for m in g for e in endpoints(s, m)] for g in groups]  # each member resolved once
    out: list[Drop] = []
    for i, j in pairs:
        for a, pa in ends[i]:
            for b, pb in ends[j]:
                out += [(a, b, p, None) for p in pb] + [(a, b, None, p) for p in pa]  # what a sends b
                if not one_way:
                    out += [(b, a, p, None) for p in pa] + [(b, a, None, p) for p in pb]  # what b sends a
    return list(dict.fromkeys(out))


def across(rules: list[Drop], conns: list[tuple[str, int, str, int]]) -> list[str]:
    """The connections (as 'a:p->b:q', each once) that a rule drops packets of."""
    out = set()
    for la, lp, pa, pp in conns:
        if any(la == src and pa == dst and (dport is None or pp == dport) and (sport is None or lp == sport)
               for src, dst, dport, sport in rules):
            out.add(f"{la}:{lp}->{pa}:{pp}")
    return sorted(out)


def partition_intent(label: str, asked_rules: int, listed_rules: int, answered_before: list[str],
                     silent_after: list[str], open_conns: int, closed_conns: int) -> dict[str, Any]:
    """`listed_rules`: the fewest of its rules the kernel listed (once added, at the end);
    `answered_before`: the links that answered a probe before the cut; `silent_after`: of those, the
    ones that gave none once it was in place; the open connections across it and how many closed."""
    ms = [measure("rules held", "the run's chain", asked_rules, listed_rules, f"{listed_rules} of {asked_rules} rules held")]
    if answered_before:
        ms.append(measure("links cut", ", ".join(answered_before), len(answered_before), len(silent_after),
                          f"{len(silent_after)} of {len(answered_before)} links went silent"))
    note = f"{closed_conns} of {open_conns} open connections closed by its end" if open_conns else ""
    return intent(ms, label, note=note)


UP_PROBE_S = 3.0  # before the cut, a link that did not answer the quick probe is asked again this long


@register
class Partition(LastingKind):
    name = "partition"
    Params = PartitionParams
    target = "none"

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw:
        groups, shape = shape_groups(rng, topo)
        d = seconds(rng, 5, 30)
        hit = frozenset(n for g in groups for m in g for n in
                        (topo.groups[m.split(":", 1)[1]] if ":" in m else (m,)) if n in topo.cluster_nodes)
        return Draw({"groups": groups, "duration": dur(d)}, d + 15, hit, network=True, tags=(shape,))

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        known, errs, seen = members(scenario), [], {}
        for i, g in enumerate(params.groups):
            for k, m in enumerate(g):
                if is_role(m) and (why := role_error(scenario, m)) is not None:
                    errs.append((("groups", i, k), why))
                elif not is_role(m) and m not in known:
                    errs.append((("groups", i, k), f"no node or client {m!r}; members: {', '.join(known)}"))
                elif m in seen:
                    errs.append((("groups", i, k), f"{m!r} is in groups {seen[m]} and {i}: a member is in one group"))
                else:
                    seen[m] = i
        if not errs and not drops(scenario, params.groups, params.one_way):
            errs.append((("groups",), "these groups share no link (clients only talk to nodes): nothing to cut"))
        return errs

    def start(self) -> None:
        p: PartitionParams = self.params  # type: ignore[assignment]
        s = self.ctx.cluster.scenario
        groups = self.resolved(p.groups)
        # the chain belongs to the cluster's run (registered, so `down` and reaping find it), the
        # rules to this occurrence
        self.rules = netrules.RunRules(self.ctx.cluster.run.run_id)
        self.tag = re.sub(r"[^A-Za-z0-9._-]", "_", self.occurrence)
        self.want = drops(s, groups, p.one_way)
        before = across(self.want, established())
        probed = pair_links(s, [(a, b) for a, b in cross_pairs(groups) if not p.one_way or a in groups[0] or b in groups[0]])
        answered = [k for k, rtt in probe_now(probed).items() if rtt is not None]  # a dead node's link: not ours to cut
        slow = [x for x in probed if x.key not in answered]
        if slow:  # a loaded host can answer past the monitor's 0.5 s (CI: one of two links): ask once more, longer
            answered += [k for k, rtt in probe_now(slow, UP_PROBE_S).items() if rtt is not None]
        applied: list[str] = []
        try:
            for src, dst, dport, sport in self.want:
                applied.append(self.rules.drop(src, dst, dport=dport, sport=sport, tag=self.tag))
        except UserError as e:
            self.rules.remove_tag(self.tag)
            raise FaultError(f"partition {self.occurrence}: {e.message}", e.hint) from None
        self.t0 = time.monotonic()
        self.listed = len(self.rules.tagged(self.tag))
        after = probe_now([x for x in probed if x.key in answered])
        self.answered, self.silent = answered, [k for k in answered if after.get(k) is None]
        self.evidence = {"groups": groups, "one_way": p.one_way, "rules": len(applied), "applied": applied,
                         "links_at_start": before, "links_probed": {"answered_before": answered, "silent_after": self.silent}}
        if groups != p.groups:
            self.evidence["asked"] = p.groups

    def resolved(self, groups: list[list[str]]) -> list[list[str]]:
        """The groups with each role replaced by its node now; FaultError if it names a node that is
        also in another group (e.g. master-of:broker-a resolved to broker-a-1, named on the other side)."""
        named = [[(n, m) for m in g for n in resolve_all(self.ctx.cluster, m, self.ctx.halt)] for g in groups]
        out = [[n for n, _ in g] for g in named]
        seen: dict[str, tuple[int, str]] = {}  # node -> (group, the member that named it)
        for i, g in enumerate(named):
            for m, asked in g:
                j, other = seen.setdefault(m, (i, asked))
                if j != i:
                    role, k = (asked, j) if is_role(asked) else (other, i)
                    raise FaultError(f"partition {self.occurrence}: {role} is {m} now, which is also in group {k}",
                                     "a member is in one group")
        return out

    def stop(self) -> dict[str, Any]:
        still = across(self.want, established())
        removed = self.rules.remove_tag(self.tag)
        start = self.evidence["links_at_start"]
        self.evidence.update(held_s=round(time.monotonic() - self.t0, 3), removed=removed,
                             links_at_stop=still, links_broken=sorted(set(start) - set(still)))
        groups = self.evidence["groups"]
        label = f"network partition ({' | '.join(', '.join(g) for g in groups)})"
        self.evidence = {"intent": partition_intent(label, self.evidence["rules"], min(self.listed, removed),
                                                    self.answered, self.silent, len(start),
                                                    len(self.evidence["links_broken"])), **self.evidence}
        if removed < self.evidence["rules"]:  # another process removed them: the cut did not hold as long as asked
            raise FaultError(f"partition {self.occurrence}: {self.evidence['rules'] - removed} of its "
                             f"{self.evidence['rules']} rules were gone before it ended (held_s {self.evidence['held_s']}, "
                             f"links reconnected across it: {len(set(still) - set(start))})",
                             "something else removed the run's iptables chain: see `iptables-save | grep RMQC`")
        return self.evidence
