"""The cluster backend interface: everything above the cluster layer (pipeline, chaos, loadgen,
benchmarks) goes through it, so a backend (local JVMs today, containers next) is one implementation
and no caller sees cgroups, pids files or a backend's own paths. A node's side of the interface is
cluster/node.py.

What a backend records about what it started (processes, cgroups, later containers) lives in the
run directory, so `down` of a fresh backend object on the same run directory reaps it, also after
the platform itself was killed.
"""
from __future__ import annotations

import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Mapping, Sequence

from cluster.node import Neighbour, Node, NodeStatus, ProcNeighbour, same_value
from cluster.plan.nodes import NodePlan, controller_addrs, namesrv_addr, plan
from cluster.plan.tools import ToolResult
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import Scenario
from rmqchaos.machine.wait import poll_until
from rmqclient.admin import AdminClient, RemotingError
from rmqclient.controllers import ReplicaGroup, controller_leader, sync_state


class ClusterBackend(ABC):
    """One cluster of one run. Backend-neutral helpers (admin calls, topics, routes) live here."""

    def __init__(self, run: RunDir, scenario: Scenario | None = None) -> None:
        self.run = run
        self.scenario = scenario or run.scenario()
        self.plans: dict[str, NodePlan] = {p.name: p for p in plan(self.scenario)}

    # ------------------------------------------------------------ lifecycle (per backend)
    @abstractmethod
    def up(self) -> None:
        """Start every node; return only when every broker is registered and routable. On failure
        everything started is stopped before the error propagates."""

    @abstractmethod
    def down(self, grace: float | None = None) -> list[str]:
        """Stop everything this run started, as recorded in its run directory; returns what was done.
        Safe to call repeatedly, on a cluster that never came up, and after the platform was killed.
        `grace`: seconds between SIGTERM and SIGKILL (default the scenario's stop_timeout)."""

    @abstractmethod
    def status(self) -> list[NodeStatus]: ...

    @abstractmethod
    def node(self, name: str) -> Node: ...

    def power_loss(self, names: list[str]) -> dict[str, dict[str, object]]:
        """Cut the power of nodes on the powerfs layer at once; per node, what it lost (cluster/local/power.py)."""
        raise UserError(f"power loss needs the local backend's powerfs layer, not {type(self).__name__}",
                        "use cluster.backend: local")

    def nodes(self) -> list[Node]:
        return [self.node(n) for n in self.plans]

    @abstractmethod
    def spawn_client(self, name: str, cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                     log_file: Path | None = None, stdout: object = None, stderr: object = None,
                     new_session: bool = False, outlive: bool = False) -> subprocess.Popen:
        """Start a client-side process of this run (consumer, load process), recorded so `down`
        reaps it; it dies with the calling thread's process (PDEATHSIG) unless `outlive` (a consumer
        of a detached run, which a later task drains and stops)."""

    def spawn_neighbour(self, name: str, cmd: Sequence[str], *, cwd: Path, log_file: Path) -> Neighbour:
        """A program that shares the cluster's host and disk (noise), writing only under `cwd` (inside
        the run directory, on the brokers' disk): a host process here; a container on the same
        volume in a container backend. Ended by its `end`, and by `down` if we die."""
        return self.client_neighbour(name, self.spawn_client(name, cmd, cwd=cwd, log_file=log_file))

    def client_neighbour(self, name: str, proc: subprocess.Popen) -> Neighbour:
        """A client process `spawn_client` started, ended the same way as a neighbour."""
        return ProcNeighbour(self.run, name, proc)

    @abstractmethod
    def run_tool(self, main: str, args: list[str], timeout: float, workdir: Path) -> ToolResult:
        """One bounded run of a RocketMQ tool (mqadmin, the benchmark Producer) against this cluster."""

    # ------------------------------------------------------------ neutral helpers
    @property
    def namesrv_addr(self) -> str:
        """Every namesrv's address, `;` between them (clients ask any that answers)."""
        return namesrv_addr(self.plans.values())

    def namesrv_nodes(self) -> list[NodePlan]:
        return [p for p in self.plans.values() if p.role == "namesrv"]

    def proxy_grpc_addr(self) -> str:
        """The proxy's gRPC endpoints (ip:port, `;` between several), where the 5.x clients connect (the
        gRPC path, docs/grpc.md): the proxy node's, or in local mode every broker node's. A client asks
        any of them for routes; each route then names every broker's own proxy."""
        ps = [p for p in self.plans.values() if p.serves_grpc]
        if not ps:
            raise UserError("this cluster has no proxy, so nothing can go through gRPC",
                            "set cluster.proxy.enabled: true in the scenario")
        return ";".join(f"{p.host}:{self.scenario.cluster.proxy.grpc_port}" for p in ps)

    def admin(self, timeout: float = 3.0) -> AdminClient:
        return AdminClient(self.namesrv_addr, timeout)

    def masters(self) -> list[NodePlan]:
        """The master of every group: a classic group's is fixed; a replicated group's (controller
        mode, DLedger) is the replica namesrv lists as id 0 now (the first replica while none is,
        so every group is named)."""
        out = [p for p in self.plans.values() if p.role == "master"]
        groups = self.replica_groups()
        if groups:
            reg = self.registered() or {}
            for g, reps in groups.items():
                now = reg.get(g, {}).get(0)
                out.append(next((p for p in reps if p.addr == now), reps[0]))
        return out

    def replica_groups(self, replication: str | None = None) -> dict[str, list[NodePlan]]:
        """Replicated groups (of one kind: controller | dledger, or both): broker name -> its replicas' plans."""
        out: dict[str, list[NodePlan]] = {}
        for p in self.plans.values():
            if p.role == "replica" and replication in (None, p.replication):
                out.setdefault(p.broker_name or "", []).append(p)
        return out

    def controller_groups(self) -> dict[str, list[NodePlan]]:
        """Controller-mode groups: broker name -> its replicas' plans."""
        return self.replica_groups("controller")

    def sync_state(self, timeout: float = 2.0) -> dict[str, ReplicaGroup]:
        """Each controller-mode group's master, epoch and SyncStateSet, from the controller leader."""
        return sync_state(controller_addrs(self.scenario), list(self.controller_groups()), timeout)

    def controller_leader(self, timeout: float = 2.0) -> str | None:
        """The address of the controller that is the Raft leader now (None mid-election; RemotingError
        when no controller answers)."""
        return controller_leader(controller_addrs(self.scenario), timeout)

    def replicated(self) -> dict[str, str]:
        """Replicated groups not yet in steady state -> what they lack. Controller mode: a master
        elected by the controllers, that master as id 0 in namesrv's registrations, every replica in
        the SyncStateSet. DLedger: a replica as id 0 in namesrv (the leader: DLedger gives no other
        answer a client sees) and every replica registered. Empty when every group is replicated."""
        lacking = self._dledger_lacking()
        groups = self.controller_groups()
        if not groups:
            return lacking
        try:
            state = self.sync_state()
        except RemotingError as e:
            return {**lacking, **{g: f"an answer from the controllers ({e})" for g in groups}}
        reg = self.registered() or {}
        for g, reps in groups.items():
            st = state.get(g)
            if st is None or not st.master_addr:
                lacking[g] = "a master elected by the controllers"
            elif reg.get(g, {}).get(0) != st.master_addr:
                lacking[g] = f"its master {st.master_addr} listed as id 0 in namesrv"
            elif set(st.in_sync) != {p.addr for p in reps}:
                lacking[g] = f"all {len(reps)} replicas in the SyncStateSet (in sync: {', '.join(st.in_sync) or 'none'})"
        return lacking

    def _dledger_lacking(self) -> dict[str, str]:
        groups = self.replica_groups("dledger")
        reg = self.registered() if groups else {}
        if reg is None:
            return {g: "an answer from namesrv" for g in groups}
        lacking = {}
        for g, reps in groups.items():
            ids = reg.get(g, {})
            missing = [p.name for p in reps if p.addr not in ids.values()]
            if ids.get(0) not in {p.addr for p in reps}:
                lacking[g] = "a leader elected by DLedger, listed as id 0 in namesrv"
            elif missing:
                lacking[g] = f"every replica registered in namesrv (not yet: {', '.join(missing)})"
        return lacking

    def registered(self, namesrv: str | None = None) -> dict[str, dict[int, str]] | None:
        """brokerName -> {brokerId: addr} from namesrv (the first that answers, or the namesrv node
        named), or None if it does not answer."""
        addr = self.namesrv_addr if namesrv is None else self.plans[namesrv].addr
        try:
            return {b.name: b.addrs for b in AdminClient(addr, 2).cluster_info()}
        except RemotingError:
            return None

    def registered_in_each(self) -> dict[str, dict[str, dict[int, str]] | None]:
        """namesrv node -> its registrations (None: it did not answer). Namesrvs share nothing: a
        broker one of them refused can be listed by the others."""
        return {p.name: self.registered(p.name) for p in self.namesrv_nodes()}

    def listed_anywhere(self, node: str, each: dict[str, dict[str, dict[int, str]] | None] | None = None) -> bool | None:
        """Whether any namesrv lists `node` at its address (None: no namesrv answered): a broker is
        out of the route when no namesrv lists it. `each`: registered_in_each() already asked."""
        regs = [r for r in (self.registered_in_each() if each is None else each).values() if r is not None]
        return None if not regs else any(self.plans[node].listed_in(r) for r in regs)

    def routed_groups(self, topic: str) -> set[str]:
        """The broker groups namesrv routes `topic` to (empty when namesrv does not answer)."""
        try:
            return {q["brokerName"] for q in (self.admin(timeout=2).topic_route(topic) or {}).get("queueDatas", [])}
        except RemotingError:
            return set()

    def wait_routed(self, topic: str, timeout: float) -> None:
        """The one "wait until `topic` routes to every master" loop."""
        want = {p.broker_name for p in self.plans.values() if p.is_broker}
        poll_until(lambda: self.routed_groups(topic) >= want, timeout, f"topic {topic} to route to every broker group")

    def scenario_broker_keys(self, node: str) -> dict[str, object]:
        """The broker.conf keys the scenario itself sets for `node` (defaults, then the broker's own),
        with the values rendered for it (a slave's brokerRole is SLAVE whatever the defaults say)."""
        p = self.plans[node]
        b = self.scenario.cluster.broker(p.broker_name or "")
        keys = {**self.scenario.cluster.broker_defaults.config, **b.config}
        if p.role == "replica":  # its role is the controllers' or DLedger's (a default brokerRole does not apply)
            keys.pop("brokerRole", None)
        return {k: p.conf[k] for k in keys}

    def verify_broker_configs(self) -> dict[str, dict[str, str]]:
        """Read back every broker's effective config (GET_BROKER_CONFIG, as `mqadmin getBrokerConfig`)
        and fail if a key the scenario set runs with another value: the broker swallows a value its
        setter cannot parse and keeps the default, so a typo must never pass as the setting.
        Writes cluster/<node>/effective.conf; returns {node: {key: effective value}} of the set keys."""
        out: dict[str, dict[str, str]] = {}
        for p in self.plans.values():
            if not p.is_broker:
                continue
            eff = self.admin(timeout=10).broker_config(p.addr)
            d = self.run.node_dir(p.name)
            d.mkdir(parents=True, exist_ok=True)
            (d / "effective.conf").write_text("".join(f"{k}={v}\n" for k, v in sorted(eff.items())))
            want = self.scenario_broker_keys(p.name)
            got = {k: eff.get(k, "(absent)") for k in want}
            bad = [k for k, v in want.items() if not same_value(v, got[k])]
            if bad:
                k = bad[0]
                raise UserError(f"{p.name} runs {k}={got[k]}, not the {k}={want[k]} the scenario set",
                                f"the broker did not take the value; see {d / 'effective.conf'}")
            out[p.name] = got
        return out

    def start_monitor(self) -> None:
        """The cluster monitor (cluster/watch/monitor.py) as a client process of the run: it samples until
        `down` reaps it, whichever process (CLI, DAG task) brought the cluster up."""
        d = self.run.path / "monitor"
        d.mkdir(exist_ok=True)
        self.spawn_client("monitor", [sys.executable, "-m", "cluster.watch.monitor", str(self.run.path)], cwd=self.run.path,
                          env=paths.module_env(), log_file=d / "monitor.log", new_session=True, outlive=True)

    def create_groups(self, groups: list[str]) -> None:
        """Create subscription groups on every master, as a 5.x application does before its consumers
        start: a local-mode proxy refuses a consumer of a group its broker does not have ("group not
        found"), where a broker asked by remoting creates it (autoCreateSubscriptionGroup)."""
        admin = self.admin(timeout=15)
        for g in groups:
            try:
                admin.create_group(g)
            except RemotingError as e:
                raise UserError(f"cannot create consumer group {g}: {e}", "is the cluster up? (rmqchaos cluster status)") from None

    def create_topics(self, topics: list[str], queues: int, timeout: float = 30.0,
                      attributes: dict[str, str] | None = None) -> None:
        """Create (or update) `topics` on every master and wait until they route to every group."""
        admin = self.admin(timeout=15)  # a just-started broker on a starved 2-core host took >3 s to read one
        for t in topics:
            try:
                admin.create_topic_everywhere(t, queues=queues, attributes=attributes)
            except RemotingError as e:
                raise UserError(f"cannot create topic {t}: {e}", "is the cluster up? (rmqchaos cluster status)") from None
        for t in topics:
            self.wait_routed(t, timeout)

