"""The gRPC load (load.client: grpc): the 5.x Java client's Producer through the proxy, as
io.rmqchaos.GrpcProducer, one JVM (docs/grpc.md).

Why Java and not the Python client under Locust: PyPI's `rocketmq-python-client` (5.1.2) runs its gRPC
channels on an asyncio loop in a thread of its own (rocketmq/v5/client/connection/rpc_client.py), which
Locust's gevent monkey-patching turns into a greenlet; and the Java client is the one the upstream
reports on this path name (#9583 with 5.0.8). GrpcProducer keeps the Locust load's contract: the same
schedule (message i intended at start + i / rate, bounded by duration and messages), the send ledger in
its one schema, `load/started` when the faults' clock starts and `load/summary.json` at the end.
"""
from __future__ import annotations

import math
from pathlib import Path

from cluster.backend import ClusterBackend
from cluster.plan.jvm import grpc_classpath, jvm_command
from rmqchaos.ledger.schema import send_ledger_path
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import Scenario

MAIN = "io.rmqchaos.GrpcProducer"
PRODUCER_ID = "grpc0"


def command(run: RunDir, c: ClusterBackend, s: Scenario, heap_mb: int = 256, user_home: Path | None = None) -> list[str]:
    ld = s.load
    assert ld is not None and ld.client == "grpc"
    attempts = ld.policy.attempts if ld.policy.kind == "retry" else 1
    messages = ld.messages or math.ceil(ld.rate * ld.duration)
    args = ["--endpoints", c.proxy_grpc_addr(), "--topic", ld.topic,
            "--out", str(send_ledger_path(run.path, PRODUCER_ID)), "--run-id", run.run_id,
            "--producer-id", PRODUCER_ID, "--key-base", f"{ld.key_prefix}{run.run_id[-6:]}-{PRODUCER_ID}-",
            "--rate", repr(ld.rate), "--duration", repr(ld.duration), "--messages", str(messages),
            "--size", str(ld.message_size), "--timeout-ms", str(round(ld.timeout * 1000)),
            "--attempts", str(attempts), "--policy", ld.policy.kind, "--threads", str(ld.users),
            "--started", str(run.load_started_file), "--summary", str(run.load_dir / "summary.json")]
    if ld.tags:
        args += ["--tag", ld.tags]
    return jvm_command(MAIN, args, cp=grpc_classpath(s.cluster.dist, s.cluster.proxy.client_version), heap_mb=heap_mb, client=True,
                       user_home=user_home)  # the client's own logs: <user_home>/logs/rocketmq/
