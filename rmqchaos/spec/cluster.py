"""The `cluster` section: namesrv, broker groups, proxy, the nodes' loopback subnet."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictInt, model_validator

from rmqchaos.machine import paths
from rmqchaos.rocketmq import patched
from rmqchaos.spec.types import ConfValue, Duration, NodeName, Port, Strict

class Jvm(Strict):
    heap_mb: Annotated[StrictInt, Field(ge=32, le=16384)]
    max_direct_memory_mb: Annotated[StrictInt, Field(ge=16, le=65536)] | None = None
    options: list[str] = []
    system_properties: dict[str, ConfValue] = {}


class Namesrv(Strict):
    """`count` namesrvs (production runs three): `namesrv`, then `namesrv-1`, `namesrv-2`, each on its
    own address and the same port, sharing nothing (namesrvs never talk to each other: every broker
    registers with each, every client asks any). `namesrvs` names them all in a fault's target."""
    count: Annotated[StrictInt, Field(ge=1, le=3)] = 1
    port: Port = 9876
    jvm: Jvm = Jvm(heap_mb=128)
    config: dict[str, ConfValue] = {}

    def node_names(self) -> list[str]:
        return ["namesrv", *(f"namesrv-{k}" for k in range(1, self.count))]


class BrokerDefaults(Strict):
    """Applied to every broker; a broker's own `jvm` replaces it, its `config` keys override it."""
    jvm: Jvm = Jvm(heap_mb=512, max_direct_memory_mb=512)
    config: dict[str, ConfValue] = {}


class Slave(Strict):
    port: Port | None = None  # default: the master's port + 5


REPLICA_PORT_STEP = 4  # replica r of a replicated group listens on port + 4r (and port-2, port+1 of that)
DLEDGER_PORT_OFFSET = -1  # a DLedger replica's peer port: its main port - 1, the free slot of its 4-port block


class SeedTopics(Strict):
    """Topics already in the group's topic table when its nodes first start (written into each node's
    config/topics.json), as months of consumer groups would have left it: `retry_groups` groups'
    `%RETRY%<group>` topics named `<prefix><i>` (incident 002: 71,111 topics). Not re-written on a
    restart: the broker's own table is what it is by then."""
    retry_groups: Annotated[StrictInt, Field(ge=1, le=500_000)]
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,120}$")] = "stale_group_"


class Broker(Strict):
    name: NodeName
    seed_topics: SeedTopics | None = None
    port: Port | None = None  # default: 10911 + 10 * index; also uses port-2 (fast) and port+1 (HA), DLedger port-1
    jvm: Jvm | None = None
    config: dict[str, ConfValue] = {}
    slave: Slave | None = None
    # a replicated group: this many replicas (nodes <name>-0, <name>-1, ...), each its own node
    replicas: Annotated[StrictInt, Field(ge=1, le=5)] | None = None
    # who elects a replicated group's master: `controller` (the default with `replicas`): replicas
    # start as SLAVEs with enableControllerMode and cluster.controllers elect; `dledger`: the replicas
    # run a DLedger (Raft) commit log among themselves (enableDLegerCommitLog) and its leader is master
    replication: Literal["controller", "dledger"] | None = None

    @property
    def replicated(self) -> bool:
        return self.replicas is not None

    @property
    def controller_mode(self) -> bool:
        return self.replicas is not None and self.replication != "dledger"

    @property
    def dledger(self) -> bool:
        return self.replicas is not None and self.replication == "dledger"

    def replica_nodes(self) -> list[tuple[str, int]]:
        """(node name, main port) of each replica of a replicated group."""
        assert self.port is not None
        return [(f"{self.name}-{r}", self.port + REPLICA_PORT_STEP * r) for r in range(self.replicas or 0)]


class Controllers(Strict):
    """Controller mode (RIP-44): a Raft (DLedger, or jRaft with `type: jRaft`) group of controllers that elects the master of every
    controller-mode broker group from its SyncStateSet. `standalone` (the default): `count`
    ControllerStartup JVMs, nodes controller-0.., each with its own address, port and store, so a
    fault can take one controller without namesrv. `embedded`: inside namesrv
    (enableControllerInNamesrv); this platform runs one namesrv, hence one controller (count 1)."""
    mode: Literal["standalone", "embedded"] = "standalone"
    count: Annotated[StrictInt, Field(ge=1, le=5)] = 3
    port: Port = 9878  # controller k listens on port + k: its DLedger peer address, the brokers' controllerAddr
    jvm: Jvm = Jvm(heap_mb=256)  # standalone only (embedded: namesrv's)
    config: dict[str, ConfValue] = {}  # ControllerConfig keys (controller.conf), e.g. enableElectUncleanMaster
    # the controllers' own Raft: DLedger (RocketMQ's default) or jRaft (controllerType=jRaft, standalone only)
    type: Literal["DLedger", "jRaft"] = "DLedger"
    jraft_port: Port | None = None  # jRaft only: controller k's jRaft peer port is jraft_port + k (default port + count)

    def node_names(self) -> list[str]:
        return [f"controller-{k}" for k in range(self.count)] if self.mode == "standalone" else []

    def jraft_ports(self) -> list[int]:
        """jRaft: each controller's Raft peer port (its RPC port, the brokers' controllerAddr, is port + k)."""
        if self.type != "jRaft":
            return []
        base = self.jraft_port if self.jraft_port is not None else self.port + self.count
        return [base + k for k in range(self.count)]


class Proxy(Strict):
    enabled: bool = False
    # cluster: the proxy is a node of its own (`proxy`), apart from the brokers; local: every broker
    # node runs the proxy inside its own JVM (ProxyStartup -pm local), on its own address (docs/grpc.md)
    mode: Literal["cluster", "local"] = "cluster"
    grpc_port: Port = 8081
    remoting_port: Port = 8080
    jvm: Jvm = Jvm(heap_mb=256)
    # the 5.x gRPC Java client the run's gRPC load and consumers use (rocketmq-client-java); none:
    # pom.xml's (docs/grpc.md); another one is resolved on its first use, e.g. an upstream report's
    client_version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+$")] | None = None


def _default_brokers() -> list[Broker]:
    return [Broker(name="broker-a"), Broker(name="broker-b")]


def _loopback_subnet(v: Any) -> str:
    import ipaddress
    try:
        net = ipaddress.IPv4Network(str(v), strict=True)
    except ValueError as e:
        raise ValueError(f"not an IPv4 subnet: {e}") from None
    if not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) or net.prefixlen != 24 or str(net) == "127.0.0.0/24":
        raise ValueError("must be a /24 inside 127.0.0.0/8 other than 127.0.0.0/24 (e.g. 127.0.10.0/24)")
    return str(net)


class Cluster(Strict):
    backend: Literal["local", "docker"] = "local"  # docker: `rmqchaos image build` + an engine
    rocketmq_version: str = Field(default_factory=paths.pinned_rocketmq_version)
    # unified diffs against upstream's source tree, applied in order to the release's own sources and
    # rebuilt into its jars (rmqchaos/rocketmq/patched.py; docs/spec.md, "A release with patches"); a
    # relative path is relative to the scenario file that names it (loading.py makes it absolute)
    patches: list[str] = []
    name: NodeName = "DefaultCluster"
    namesrv: Namesrv = Namesrv()
    broker_defaults: BrokerDefaults = BrokerDefaults()
    brokers: Annotated[list[Broker], Field(min_length=1, max_length=8)] = Field(default_factory=_default_brokers)
    proxy: Proxy = Proxy()
    controllers: Controllers | None = None  # controller mode: needed by groups with `replicas` (replication: controller)
    ready_timeout: Duration = 120.0
    stop_timeout: Duration = 20.0  # SIGTERM grace: a broker's shutdown hooks take ~5-15 s here
    # Every node and client listens on and connects from its own address in this loopback /24
    # (cluster/plan/nodes.py `addresses`), so that every link is an address pair a partition can name.
    subnet: Annotated[str, BeforeValidator(lambda v: _loopback_subnet(v))] = "127.0.10.0/24"
    # Nodes whose store sits on the powerfs layer (docs/powerfs.md): node names, broker group names
    # (every node of the group) or `controllers`. A power_loss, disk_error or disk_slow fault adds the
    # nodes it may hit when the scenario loads; a scenario without one pays nothing for the layer.
    powerfs: list[str] = []
    # durable by age on the layer: a file changed at least this long ago (the kernel's
    # vm.dirty_expire_centisecs, 30 s by default) is written back at the next 5 s tick, as a real
    # kernel and ext4's journal would, fsynced or not. None: only a sync makes data durable (the
    # worst case, as LazyFS models it; the default)
    powerfs_expire: Duration | None = None
    # Nodes started under libfaketime, each with its own clock a `clock` fault moves (docs/faults.md):
    # node names, broker group names (every node of the group), `controllers` or `namesrv`. Only
    # these nodes take a clock fault; the rest keep the host's clock.
    faketime: list[str] = []
    # whether their CLOCK_MONOTONIC moves with the wall clock (System.nanoTime, the JVM's scheduled
    # executors): needed for a drift rate; off, only the wall clock moves, as an NTP step moves it
    faketime_monotonic: bool = False

    @model_validator(mode="after")
    def _assign_ports(self) -> "Cluster":
        for i, b in enumerate(self.brokers):
            if b.port is None:
                b.port = 10911 + 10 * i
            if b.slave is not None and b.slave.port is None:
                b.slave.port = b.port + 5
            if b.replicas is not None and b.replication is None:
                b.replication = "controller"
        return self

    def patch_files(self) -> list[Path]:
        return [Path(p) for p in self.patches]

    @property
    def dist(self) -> str:
        """The jars the nodes run, as rmqchaos.rocketmq.dist names them: the release, or with patches
        its patched build's key (`5.5.0+p<hash12>`)."""
        return patched.key(self.rocketmq_version, self.patch_files()) if self.patches else self.rocketmq_version

    @property
    def version_label(self) -> str:
        """The version as a run records it: `5.5.0`, or `5.5.0+fix.patch(<hash12>)` with patches."""
        return patched.label(self.rocketmq_version, self.patch_files()) if self.patches else self.rocketmq_version

    def broker(self, name: str) -> Broker:
        for b in self.brokers:
            if b.name == name:
                return b
        raise KeyError(name)

    def group_node_names(self, group: str) -> list[str]:
        """The nodes of broker group `group` (its master and slave, or its replicas)."""
        b = self.broker(group)
        if b.replicated:
            return [n for n, _ in b.replica_nodes()]
        return [b.name] + ([f"{b.name}-s"] if b.slave is not None else [])

    def powerfs_nodes(self) -> list[str]:
        """`powerfs` as node names, in node order (unknown members are the checks' to report)."""
        return self.member_nodes(self.powerfs)

    def faketime_nodes(self) -> list[str]:
        """`faketime` as node names, in node order."""
        return self.member_nodes(self.faketime)

    def member_nodes(self, members: list[str]) -> list[str]:
        """Node names, broker group names and `controllers` as node names, in node order."""
        want: set[str] = set()
        groups = {b.name for b in self.brokers}
        for m in members:
            if m in groups:
                want |= set(self.group_node_names(m))
            elif m == "controllers" and self.controllers is not None:
                want |= set(self.controllers.node_names())
            elif m == "namesrvs":
                want |= set(self.namesrv.node_names())
            else:
                want.add(m)
        return [n for n in self.node_names() if n in want]

    def broker_node_names(self) -> list[str]:
        """Every broker node (masters, slaves, replicas): the nodes that are neither a namesrv, a
        controller nor the proxy."""
        others = {"proxy", *self.namesrv.node_names(), *(self.controllers.node_names() if self.controllers else ())}
        return [n for n in self.node_names() if n not in others]

    def node_names(self) -> list[str]:
        names = self.namesrv.node_names()
        if self.controllers is not None:
            names += self.controllers.node_names()
        for b in self.brokers:
            if b.replicated:
                names += [n for n, _ in b.replica_nodes()]
                continue
            names.append(b.name)
            if b.slave is not None:
                names.append(f"{b.name}-s")
        if self.proxy.enabled and self.proxy.mode == "cluster":
            names.append("proxy")
        return names
