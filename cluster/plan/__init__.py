"""What a cluster is made of, backend-neutral: the node plan and each node's config (nodes.py), the one
JVM command builder (jvm.py), RocketMQ's own tools (tools.py), the compose rendering (compose.py),
RocketMQ's log lines and where each node's logs are (rmqlog.py).

May import: nothing else of `cluster`."""
