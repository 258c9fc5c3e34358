"""Cluster backends: stand up, inspect, break and tear down a real RocketMQ cluster.

Everything above this package sees only `backend.ClusterBackend`'s interface, reached through
`backends.get_backend(run)`. The sub-packages import only downward (pyproject.toml [tool.importlinter]):

    watch        the live cluster observed: the monitor, who is master, heartbeats, the `expect:` probes
    backends     which backend a run's cluster is on; reaping lost runs
    container    the `docker` backend (containers of a locally built image; builds on `local`)
    local        the `local` backend (JVMs in cgroups on this machine)
    backend node the interface every caller uses, and a node behind it
    net          loopback network faults: iptables rules, Toxiproxy links, connections, round trips
    stored       what a broker's store holds, read offline (messages by key, topics, groups, offsets)
    substrate    what a node stands on: its store's FUSE layer (powerfs) and its clock (libfaketime)
    plan         what a cluster is made of: the node plan and configs, the JVM command builder, RocketMQ's
                 tools, the compose rendering, where each node's logs are
"""
from cluster.backend import ClusterBackend
from cluster.backends import get_backend, reap_lost_runs
from cluster.node import Node, NodeStatus

__all__ = ["ClusterBackend", "Node", "NodeStatus", "get_backend", "reap_lost_runs"]
