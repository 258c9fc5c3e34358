"""power_loss: the machine of one node, or of several at once (a rack), loses power. What each node
had not fsynced is gone (its store sits on the powerfs layer: docs/powerfs.md); the node stays down,
or with `back_after` comes back on what it kept, every node of the occurrence together. A node that
cannot start on what it kept stays down, and the run goes on: that is the system's answer (the
evidence's `not_started`, the figure `not_started_after_power_loss`), not the fault's failure.

`target:` is a node or a role (master-of:<group>); `nodes:` adds more members, resolved at the same
moment: node names or roles (`slaves-of:<group>` with `target: master-of:<group>` is the whole
group). The nodes it may hit go on the layer when the scenario loads (cluster.powerfs).

Its intent, per node: the process died, no write reached the layer after the cut (the FUSE
connection's abort held), and the layer was mounted again for the restart. The evidence names, per
node, the bytes and files it forgot with each file's last sync, and each broker's commit-log max
offset before the loss and after it came back.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chaos.draw import Draw, Topology, dur, seconds
from chaos.intent import happened, intent
from chaos.protocol import BackAfter, ComingBackKind, register
from chaos.targets import resolve_all
from cluster.watch.groups import ask_max_offset
from cluster.node import ClusterStartError
from rmqchaos.spec import Fault, FaultTarget, Scenario, is_role, role_error
from rmqchaos.progress import say
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import RemotingError

OFFSET_TIMEOUT_S = 2.0
AFTER_TIMEOUT_S = 15.0


class PowerLossParams(BackAfter):
    nodes: list[FaultTarget] = []  # back_after: every node restarted this long after the loss (else they stay down)


def power_intent(lost: dict[str, dict[str, Any]], back: dict[str, int | None] | None = None,
                 not_started: dict[str, str] | None = None) -> dict[str, Any]:
    """From the backend's per-node record: died, its disk cut (the layer fenced), remounted; and with `back`
    (node -> its new pid, None: not running), powered back after `back_after`. A node in `not_started`
    (node -> why) was started and exited, or never became ready, on its own: the power came back as
    asked, and what the node made of its store is the system's answer, not the fault's failure."""
    refused = not_started or {}
    ms = []
    for node, ev in lost.items():
        if ev.get("was_running"):
            ms.append(happened("died", node, ev.get("dead", False), f"{node} pid {ev.get('pid')} "
                               + ("killed at the cut" if ev.get("dead") else "still alive after the cut")))
        after, fenced = ev.get("ops_after_fence"), ev.get("fenced_ms")
        ms.append(happened("cut", node, fenced is not None, f"{node}: disk cut at the power loss"
                           + (f", {after} later write(s) or sync(s) refused" if after else "")
                           if fenced is not None else f"{node}: its disk was NOT cut"))
        ms.append(happened("remounted", node, bool(ev.get("remounted")),
                           f"{node}: layer mounted again" if ev.get("remounted") else f"{node}: layer NOT mounted again"))
    ms += [happened("back", n, pid is not None or n in refused,
                    f"{n} back as pid {pid}" if pid else f"{n} powered back; it did not start again: {refused[n]}"
                    if n in refused else f"{n} not running") for n, pid in (back or {}).items()]
    return intent(ms, f"power loss of {', '.join(lost)}")


@register
class PowerLoss(ComingBackKind):
    name = "power_loss"
    Params = PowerLossParams
    roles = True
    powerfs = True

    @classmethod
    def explore(cls, rng: random.Random, topo: Topology) -> Draw | None:
        if not topo.local:  # the layer is the local backend's
            return None
        target, hit = topo.broker_target(rng)
        g = topo.group_of(next(iter(hit))) if len(hit) == 1 else target.removeprefix("master-of:")
        whole = g is not None and len(topo.groups[g]) > 1 and rng.random() < 0.3  # a rack: the whole group
        back = seconds(rng, 5, 30)
        f: dict[str, Any] = {"target": target, "back_after": dur(back)}
        if whole and g is not None:
            f["nodes"] = list(topo.groups[g])
            hit = frozenset(topo.groups[g])
        return Draw(f, back + 25, hit, tags=("group",) if whole else ())

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        nodes, errs = scenario.cluster.node_names(), []
        for i, m in enumerate(params.nodes):
            if is_role(m) and (why := role_error(scenario, m)) is not None:
                errs.append((("nodes", i), why))
            elif not is_role(m) and m not in nodes:
                errs.append((("nodes", i), f"no node {m!r} in this cluster; nodes: {', '.join(nodes)}"))
        return errs

    def start(self) -> None:
        p: PowerLossParams = self.params  # type: ignore[assignment]
        c = self.ctx.cluster
        names = list(dict.fromkeys([self.node.name, *(n for m in p.nodes for n in resolve_all(c, m, self.ctx.halt))]))
        self.names = names
        before = self._offsets(names)
        lost = c.power_loss(names)
        for n in names:
            lost[n]["dead"] = c.node(n).pid is None
        self.evidence = {"intent": power_intent(lost), "nodes": names, "nodes_lost": lost,
                         "max_offset_before": before}

    def stop(self) -> dict[str, Any]:
        p: PowerLossParams = self.params  # type: ignore[assignment]
        if p.back_after is None or not getattr(self, "names", None):
            return self.evidence
        nodes = [self.ctx.cluster.node(n) for n in self.names]
        not_started: dict[str, str] = {}

        def power_back(node: Any) -> None:
            try:
                node.restart()
            except ClusterStartError as e:  # e.g. a checkpoint it never fsynced, empty now (docs/findings.md)
                # exited: what it made of its store; running but never ready (a whole controller-mode group
                # back at once whose controllers refused every election, code 2012): the cluster's answer
                # too. The power came back as asked either way; the run goes on and says which.
                why = e.cause or e.message
                not_started[node.name] = f"running, never ready: {why}" if node.running() else why
                say(f"{node.name} did not start again after its power loss: {not_started[node.name]}")
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:  # together: a rack's power comes back for all
            for f in [pool.submit(power_back, n) for n in nodes]:
                f.result()
        back = {n.name: n.pid for n in nodes}
        self.evidence["restarted"] = back
        self.evidence["not_started"] = not_started
        # a broker just restarted beside others on a busy host may be slow to answer its first request:
        # ask again for AFTER_TIMEOUT_S (CI once saw None from a broker that was up)
        self.evidence["max_offset_after"] = self._offsets(self.names, AFTER_TIMEOUT_S)
        self.evidence["intent"] = power_intent(self.evidence["nodes_lost"], back, not_started)
        return self.evidence

    def _offsets(self, names: list[str], within: float = 0.0) -> dict[str, int | None]:
        """Each broker's commit-log max offset (None: it did not answer, asked again for `within` s)."""
        plans, out = self.ctx.cluster.plans, {}

        def ask(addr: str) -> tuple[int] | None:  # boxed: an offset of 0 is an answer
            try:
                return (ask_max_offset(addr, OFFSET_TIMEOUT_S),)
            except RemotingError:
                return None
        for n in names:
            if plans[n].is_broker:
                up = self.ctx.cluster.node(n).pid is not None  # a node that did not start is not waited for
                got = poll_until(lambda: ask(plans[n].addr), within if up else 0.0, f"{n}'s max offset", interval=0.5,
                                 raise_on_timeout=False)
                out[n] = got[0] if got else None
        return out
