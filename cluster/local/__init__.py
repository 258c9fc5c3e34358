"""The `local` backend: namesrv, brokers (and optionally slaves and the gRPC proxy) as JVMs on this
machine, each in its own cgroup (cluster.py: the cluster; node.py: a node; cgroups.py, power.py,
orphans.py: its cgroups, power losses and lost runs).

May import: cluster.backend, cluster.node and below."""
