"""Stage `check`: the checks of the scenario's `checks:` section (now: the RocketMQ-tools witness),
a steady-state probe that needs nothing of the platform's own client."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cluster import get_backend
from cluster.plan import tools
from cluster.backend import ClusterBackend
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import WitnessCheck
from rmqclient.admin import RemotingError


class CheckFailed(UserError):
    pass


def run(run_dir: str | Path | RunDir) -> dict[str, Any]:
    r = as_run(run_dir)
    with stage(r, "check"):
        w = r.scenario().checks.witness
        if w is None:
            say("no checks configured")
            return {"witness": None}
        result = witness(r, get_backend(r), w)
        if not result["ok"]:
            raise CheckFailed(f"witness check failed: {result['problems'][0]}",
                              f"details in {r.checks_dir / f'witness-{w.topic}.json'}")
        return {"witness": {k: result[k] for k in ("ok", "sent", "read_back_total")}}


#: a group that never consumes: its lag on a topic is every message the topic holds
_NOBODY = "RMQCHAOS_WITNESS_NOBODY"


def stored_per_broker(cluster: ClusterBackend, topic: str) -> dict[str, int]:
    """Messages each broker group holds in `topic` (its queues' max offsets, asked over the remoting
    protocol: one connection, not a JVM of mqadmin topicStatus, ~3 s each here)."""
    per: dict[str, int] = {}
    try:
        lag = cluster.admin().consumer_lag(_NOBODY, [topic])
    except RemotingError as e:
        raise CheckFailed(f"witness: cannot read {topic}'s offsets: {e}", "is the cluster healthy? "
                          "(rmqchaos cluster status)") from None
    for where, n in lag.items():
        broker = where.split("/", 1)[0]
        per[broker] = per.get(broker, 0) + n
    return per


def witness(run: RunDir, cluster: ClusterBackend, w: WitnessCheck) -> dict[str, Any]:
    """Send with RocketMQ's own tool (tools.witness_send), count what each broker stored (the queues' max
    offsets), read everything back with mqadmin printMsg (a real pull consumer): RocketMQ's own
    tools send and read, so the check needs nothing of the platform's client."""
    ns, out = cluster.namesrv_addr, run.checks_dir
    out.mkdir(parents=True, exist_ok=True)
    masters = cluster.masters()
    topic = w.topic
    cluster.create_topics([topic], queues=4)
    tool: tools.Runner = lambda main, args, timeout: cluster.run_tool(main, args, timeout, out / "tools")  # noqa: E731
    t0 = now_ms()
    before = stored_per_broker(cluster, topic)
    version = run.scenario().cluster.rocketmq_version
    say(f"witness: RocketMQ's own tool sends {w.messages} x {w.message_size} B to {topic}")
    sender, prod, done = tools.witness_send(tool, version, ns, topic, w.messages, w.message_size, w.threads, w.timeout)
    (out / f"witness-{topic}-producer.log").write_text(prod.out)
    sent, send_failed = (done[0], done[1] + done[2]) if done else (0, w.messages)
    stored_after = stored_per_broker(cluster, topic)
    stored = {b: stored_after.get(b, 0) - before.get(b, 0) for b in stored_after}
    say(f"witness: stored per broker {stored}; reading everything back with mqadmin printMsg")
    msgs = tools.read_back(tool, ns, topic, w.timeout, names={p.addr: p.broker_name or p.name for p in masters})
    read_per: dict[str, int] = {}
    for _, broker, _, _ in msgs:
        read_per[broker] = read_per.get(broker, 0) + 1
    expected_total = sum(before.values()) + w.messages
    problems = []
    if sent != w.messages or send_failed:
        problems.append(f"producer reported {sent} sent, {send_failed} failed; expected {w.messages} sent")
    if sum(stored.values()) != w.messages:
        problems.append(f"brokers stored {sum(stored.values())} new messages, expected {w.messages}")
    for p in masters:
        if stored.get(p.broker_name or "", 0) <= 0:
            problems.append(f"{p.broker_name} stored none of the messages")
    # distinct by where each is stored (broker, queue, offset): checkMsgSendRT sends one Message object
    # again and again, so every copy carries the same msgId; a message stored twice shows in `stored`
    distinct = len({x[1:] for x in msgs})
    if len(msgs) != expected_total or distinct != expected_total:
        problems.append(f"read back {len(msgs)} messages ({distinct} distinct), expected {expected_total}")
    result = {"ok": not problems, "problems": problems, "topic": topic, "messages": w.messages, "sender": sender,
              "sent": sent, "send_failed": send_failed, "stored_per_broker": stored,
              "read_back_total": len(msgs), "read_back_per_broker": read_per,
              "read_back_distinct": distinct, "start_ms": t0, "end_ms": now_ms()}
    (out / f"witness-{topic}.json").write_text(json.dumps(result, indent=2) + "\n")
    run.event("check", "witness", t0, now_ms(), "ok" if result["ok"] else "failed",
              **{k: result[k] for k in ("sent", "stored_per_broker", "read_back_total")})
    say(f"witness: {'OK' if result['ok'] else 'FAILED'}: sent {sent}, stored {sum(stored.values())}, "
        f"read back {len(msgs)} ({read_per})")
    return result
