"""A RocketMQ version on this machine: its jars resolved with Maven on first use (dist.py), a release with
patches rebuilt from its sources jars (patched.py) and the gRPC Java client at another version (grpc_client.py).

May import: rmqchaos.machine and the root modules."""
