"""Backend-neutral planning: which nodes a scenario's cluster has, their ports and roles, and the
config each one is started with (broker.conf, namesrv.properties, rmq-proxy.json), rendered the
same way for every backend."""
from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from rmqchaos.machine.loopback import loopback
from rmqchaos.spec import Broker, Jvm, Scenario
from rmqchaos.spec.cluster import DLEDGER_PORT_OFFSET

HOST = "127.0.0.1"  # the platform's own address: its admin calls, the monitor, Airflow, Spark, noise
READY_TOPIC = "RMQCHAOS_READY"
MAIN = {"namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
        "broker": "org.apache.rocketmq.broker.BrokerStartup",
        "proxy": "org.apache.rocketmq.proxy.ProxyStartup",
        "controller": "org.apache.rocketmq.controller.ControllerStartup"}


def addresses(s: Scenario) -> dict[str, str]:
    """Each node's and client's own loopback address in the cluster's subnet: namesrv .1 (namesrv-k
    .(7+k)), proxy .2,
    broker group i's master .(10i+11) and its slave one above, the load's producers .201, consumer
    j .(211+j); and `links` .200, where link faults' Toxiproxy proxies listen (a member of no
    partition); standalone controller k .(3+k); replica r of a replicated group i .(10i+11+r).
    Fixed by the scenario, so a rule or a report names the same node in every run."""
    net = s.cluster.subnet.rsplit(".", 1)[0]
    out = {"namesrv": f"{net}.1", "proxy": f"{net}.2", "links": f"{net}.200", "producers": f"{net}.201"}
    out.update({n: f"{net}.{7 + k}" for k, n in enumerate(s.cluster.namesrv.node_names()) if k})  # namesrv-k: .(7+k)
    if s.cluster.controllers is not None:  # standalone controller k: .(3+k)
        out.update({n: f"{net}.{3 + k}" for k, n in enumerate(s.cluster.controllers.node_names())})
    for i, b in enumerate(s.cluster.brokers):
        out[b.name] = f"{net}.{10 * i + 11}"
        out[f"{b.name}-s"] = f"{net}.{10 * i + 12}"
        if b.replicated:  # replica r of a replicated group: .(10i+11+r)
            out.update({n: f"{net}.{10 * i + 11 + r}" for r, (n, _) in enumerate(b.replica_nodes())})
    for j, c in enumerate(s.consumers.instances if s.consumers else []):
        out[f"consumer-{c.id}"] = f"{net}.{min(211 + j, 254)}"  # the 44th and later share .254
    return out


def port_in_use(port: int, host: str = HOST) -> bool:
    """The one port probe (nodes, Airflow, noise servers): can nobody else bind it on `host`, or on
    any loopback address (a listener on one address blocks the wildcard bind)?"""
    # SO_REUSEADDR as Netty sets it, so a socket in TIME_WAIT does not count as "in use".
    for host in (host, "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return True
    return False


def free_port(host: str = HOST) -> int:
    """A port nobody has bound on `host` right now (the kernel's pick). A race with another binder
    only costs a refused start, which the callers retry a bounded number of times or report."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((loopback(host), 0))
        return int(s.getsockname()[1])


@dataclass
class NodePlan:
    name: str
    role: str  # namesrv | master | slave | replica (its group elects the master) | controller | proxy
    ports: list[int]  # the main port first; every port the node listens on
    jvm: Jvm
    conf: dict[str, object]
    host: str = HOST  # the node's own loopback address (addresses())
    broker_name: str | None = None
    broker_id: int | None = None  # a replica's is -1: the controllers (or DLedger) assign it
    replication: str | None = None  # a replica's group: controller | dledger (Broker.replication)
    powerfs: bool = False  # its store sits on the powerfs layer (cluster.powerfs; docs/powerfs.md)
    powerfs_expire_s: float | None = None  # the layer's durable-by-age (cluster.powerfs_expire)
    faketime: bool = False  # started under libfaketime: its own clock (cluster.faketime; cluster/substrate/clock.py)
    faketime_monotonic: bool = False  # its monotonic clock moves too (cluster.faketime_monotonic)
    proxy_conf: dict[str, object] | None = None  # a broker with the proxy inside (proxy.mode local): rmq-proxy.json

    @property
    def serves_grpc(self) -> bool:
        """A gRPC endpoint of the proxy: the proxy node, or a broker with the proxy inside."""
        return self.role == "proxy" or self.proxy_conf is not None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.ports[0]}"

    @property
    def is_broker(self) -> bool:
        return self.role in ("master", "slave", "replica")

    def listed_in(self, reg: dict[str, dict[int, str]]) -> bool:
        """Whether namesrv's registrations (`LocalCluster.registered()`) list this broker at its address
        (a replica: under whichever id the controllers gave it; the master's is 0)."""
        ids = reg.get(self.broker_name or "", {})
        if self.role == "replica":
            return self.addr in ids.values()
        return ids.get(self.broker_id or 0) == self.addr


def controller_addrs(s: Scenario) -> list[str]:
    """host:port of every controller (the brokers' controllerAddr): standalone controller k on
    controllers.port + k at its own address; embedded, the one inside namesrv, at namesrv's address."""
    ctl, at = s.cluster.controllers, addresses(s)
    if ctl is None:
        return []
    if ctl.mode == "embedded":
        return [f"{at['namesrv']}:{ctl.port}"]
    return [f"{at[n]}:{ctl.port + k}" for k, n in enumerate(ctl.node_names())]


def _controller_conf(s: Scenario, k: int) -> dict[str, object]:
    """The Raft keys of controller k (controller.conf, or namesrv's for embedded): DLedger's, or with
    type jRaft, jRaft's: its peer at jraft_port + k, its RPC server (the brokers' controllerAddr) at port + k."""
    ctl = s.cluster.controllers
    assert ctl is not None
    addrs = controller_addrs(s)
    if ctl.type == "jRaft":
        at = addresses(s)
        peers = [f"{at[n]}:{p}" for n, p in zip(ctl.node_names(), ctl.jraft_ports())]
        return {"controllerType": "jRaft", "jRaftGroupId": f"{s.cluster.name}-controllers",
                "jRaftServerId": peers[k], "jRaftInitConf": ",".join(peers),
                "jRaftControllerRPCAddr": ",".join(addrs), **ctl.config}
    return {"controllerDLegerGroup": f"{s.cluster.name}-controllers",
            "controllerDLegerPeers": ";".join(f"n{i}-{a}" for i, a in enumerate(addrs)),
            "controllerDLegerSelfId": f"n{k}", **ctl.config}


def namesrv_addr(plans: Iterable[NodePlan]) -> str:
    """Every namesrv's address, `;` between them: what brokers, clients and mqadmin are given (each
    registers with all, or asks any)."""
    return ";".join(p.addr for p in plans if p.role == "namesrv")


def plan(s: Scenario) -> list[NodePlan]:
    c, at = s.cluster, addresses(s)
    namesrvs = [NodePlan(n, "namesrv", [c.namesrv.port], c.namesrv.jvm,
                         {"listenPort": c.namesrv.port, "bindAddress": at[n], **c.namesrv.config}, at[n])
                for n in c.namesrv.node_names()]
    ns, ns_addr = namesrvs[0], namesrv_addr(namesrvs)
    nodes = list(namesrvs)
    ctl = c.controllers
    if ctl is not None and ctl.mode == "embedded":  # the controller inside namesrv, on its own port
        ns.conf.update({"enableControllerInNamesrv": True, **_controller_conf(s, 0)})
        ns.ports.append(ctl.port)
    elif ctl is not None:
        for k, name in enumerate(ctl.node_names()):
            nodes.append(NodePlan(name, "controller", [ctl.port + k, *ctl.jraft_ports()[k:k + 1]], ctl.jvm,
                                  {"listenPort": ctl.port + k, "bindAddress": at[name], **_controller_conf(s, k)},
                                  at[name]))
    for b in c.brokers:
        assert b.port is not None
        if b.replicated:
            nodes += [_broker_plan(s, b, name, port, -1, at[name], ns_addr) for name, port in b.replica_nodes()]
            continue
        nodes.append(_broker_plan(s, b, b.name, b.port, 0, at[b.name], ns_addr))
        if b.slave is not None:
            assert b.slave.port is not None
            nodes.append(_broker_plan(s, b, f"{b.name}-s", b.slave.port, 1, at[f"{b.name}-s"], ns_addr))
    if c.proxy.enabled and c.proxy.mode == "local":
        for n in nodes:
            if n.is_broker:  # its ports after the broker's: ports[0] stays the broker's listener
                n.proxy_conf = _proxy_conf(s, ns_addr)
                n.ports += [c.proxy.grpc_port, c.proxy.remoting_port]
    elif c.proxy.enabled:
        p = c.proxy
        nodes.append(NodePlan("proxy", "proxy", [p.grpc_port, p.remoting_port], p.jvm, _proxy_conf(s, ns_addr),
                              at["proxy"]))
    layered = set(c.powerfs_nodes())
    for n in nodes:
        n.powerfs = n.name in layered
        n.powerfs_expire_s = c.powerfs_expire if n.powerfs else None
    faked = set(c.faketime_nodes())
    for n in nodes:
        n.faketime = n.name in faked
        n.faketime_monotonic = n.faketime and c.faketime_monotonic
    return nodes


def _proxy_conf(s: Scenario, ns_addr: str) -> dict[str, object]:
    """rmq-proxy.json: the cluster's name, namesrv (a local-mode proxy reads its own, not the
    broker's: without it 5.1.0 fails at start), the two ports. In local mode every broker's proxy
    has the same gRPC port: the route a proxy answers names each broker's host with its own port."""
    p = s.cluster.proxy
    return {"rocketMQClusterName": s.cluster.name, "namesrvAddr": ns_addr,
            "grpcServerPort": p.grpc_port, "remotingListenPort": p.remoting_port}


def dledger_conf(s: Scenario, b: Broker, r: int) -> dict[str, object]:
    """The DLedger commit log keys of replica r of group `b`: peer k is n<k> at its own address on
    its main port - 1. A follower registers as brokerId k+1 (DLedgerCommitLog's id), the leader as 0."""
    at = addresses(s)
    peers = ";".join(f"n{k}-{at[n]}:{p + DLEDGER_PORT_OFFSET}" for k, (n, p) in enumerate(b.replica_nodes()))
    return {"enableDLegerCommitLog": True, "dLegerGroup": b.name, "dLegerPeers": peers, "dLegerSelfId": f"n{r}"}


def _broker_plan(s: Scenario, b: Broker, node: str, port: int, broker_id: int, host: str, ns_addr: str) -> NodePlan:
    c = s.cluster
    conf: dict[str, object] = {
        "brokerClusterName": c.name, "brokerName": b.name, "brokerId": broker_id,
        "listenPort": port, "haListenPort": port + 1, "namesrvAddr": ns_addr,
        # the broker advertises its own address (clients: brokerIP1; its slave's HA link: brokerIP2)
        "brokerIP1": host, "brokerIP2": host, "bindAddress": host,
    }
    conf.update(c.broker_defaults.config)
    conf.update(b.config)
    ports = [port, port - 2, port + 1]
    if b.dledger:  # DLedger gives the role; BrokerStartup exits on a SLAVE whose brokerId is -1
        conf.pop("brokerRole", None)
        conf.update(dledger_conf(s, b, [n for n, _ in b.replica_nodes()].index(node)))
        ports.append(port + DLEDGER_PORT_OFFSET)
    elif broker_id:  # a slave; a controller-mode replica (-1) also starts as one until elected
        conf["brokerRole"] = "SLAVE"
    if broker_id < 0 and b.controller_mode:
        conf.update({"enableControllerMode": True, "controllerAddr": ";".join(controller_addrs(s))})
    role = "replica" if broker_id < 0 else ("slave" if broker_id else "master")
    return NodePlan(node, role, ports, b.jvm or c.broker_defaults.jvm, conf, host, b.name, broker_id,
                    b.replication if b.replicated else None)


def jvm_options(p: NodePlan, gc_log: str) -> list[str]:
    """A node's JVM options beyond heap size, the same for every backend."""
    j = p.jvm
    opts = [f"-XX:MaxDirectMemorySize={j.max_direct_memory_mb}m"] if j.max_direct_memory_mb else []
    if p.is_broker:
        # as RocketMQ's runbroker.sh: the whole heap is touched (and charged to the broker's memory
        # domain) at start, so a memory squeeze does not stall the send path on first-touch heap faults
        opts.append("-XX:+AlwaysPreTouch")
    return opts + ["-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow", *JDK_EXPORTS,
                   f"-Xlog:gc*:file={gc_log}:time,tags:filecount=2,filesize=10M", *j.options]


#: RocketMQ up to 5.1.4 frees a mapped file's buffer through sun.nio.ch.DirectBuffer (UtilAll.cleanBuffer),
#: which Java 16+ no longer exports: a 5.1.x broker restarted over its own store failed in
#: IndexService.load with IllegalAccessError, and runbroker.sh adds nothing for it. 5.2.0+ frees the
#: buffer through Netty and does not need it; an export is inert for them.
JDK_EXPORTS = ("--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",)


#: system properties every node starts with, under the scenario's own (jvm.system_properties). TLS
#: off: the platform's clients speak plain remoting, and in its default "permissive" mode each
#: server generates a self-signed certificate at start (~5 s of CPU per server on 2 cores, a key pair
#: left in /tmp each time: 1,226 were there after a day of runs).
NODE_SYSTEM_PROPERTIES: dict[str, object] = {"tls.server.mode": "disabled"}


def main_args(p: NodePlan, conf: str, namesrv_addr: str,
              proxy_conf: str | None = None) -> tuple[str, list[str], dict[str, object]]:
    """(main class, arguments, extra system properties) that start node `p` with its config file
    `conf` (and a broker with the proxy inside, its rmq-proxy.json `proxy_conf`: proxy_config)."""
    if p.proxy_conf is not None:  # as `mqbroker --enable-proxy`: the proxy starts the broker from -bc
        assert proxy_conf is not None
        return (MAIN["proxy"], ["-pm", "local", "-bc", conf, "-n", namesrv_addr],
                {"com.rocketmq.proxy.configPath": proxy_conf})
    if p.role == "namesrv":
        return MAIN["namesrv"], ["-c", conf], {}
    if p.role == "proxy":
        return MAIN["proxy"], ["-pm", "cluster", "-n", namesrv_addr], {"com.rocketmq.proxy.configPath": conf}
    if p.role == "controller":
        return MAIN["controller"], ["-c", conf], {}
    return MAIN["broker"], ["-c", conf, "-n", namesrv_addr], {}


def _props(conf: dict[str, object]) -> str:
    def v(x: object) -> str:
        return ("true" if x else "false") if isinstance(x, bool) else str(x)
    return "".join(f"{k}={v(x)}\n" for k, x in conf.items())


def _proxy_json(conf: dict[str, object]) -> tuple[str, str]:
    return "rmq-proxy.json", json.dumps(conf, indent=2) + "\n"


def proxy_config(p: NodePlan) -> tuple[str, str] | None:
    """(file name, text) of the rmq-proxy.json of a broker with the proxy inside, else None."""
    return None if p.proxy_conf is None else _proxy_json(p.proxy_conf)


def render_config(p: NodePlan, store_dir: str | None = None) -> tuple[str, str]:
    """(file name, text) of a node's config file; brokers get their store under `store_dir`."""
    if p.role == "proxy":
        return _proxy_json(p.conf)
    conf = dict(p.conf)
    if store_dir is not None and p.is_broker:
        conf.setdefault("storePathRootDir", store_dir)
        conf.setdefault("storePathCommitLog", f"{store_dir}/commitlog")
    if store_dir is not None and ("controllerDLegerSelfId" in conf or "jRaftServerId" in conf):  # a controller's Raft log and metadata
        conf.setdefault("controllerStorePath", f"{store_dir}/controller")
    name = {"namesrv": "namesrv.properties", "controller": "controller.conf"}.get(p.role, "broker.conf")
    return name, _props(conf)
