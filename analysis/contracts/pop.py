"""POP through the proxy (issue 52): what became of each delivery a gRPC SimpleConsumer received, from
the receive ledger's POP fields (rmqchaos/ledger/schema.py: delivery_attempt, receipt_handle, ack, ack_ms,
change). Only a SimpleConsumer's deliveries count (a receipt handle and an ack recorded); a remoting
consumer's have neither, a PushConsumer's no ack (its client acks by itself).

A delivery's invisible time ends at its receipt handle's pop time plus its invisible time (the handle's
2nd and 3rd fields, ExtraInfoUtil: `<ck queue offset> <pop time> <invisible time> <revive queue> <topic
type> <broker> <queue> <offset> <commit log offset>`; the handle the ledger keeps is the last one the
client held, so a changeInvisibleDuration's deadline is its own). Acked in time: the ack was answered
ok at or before that end. A delivery came again later when its stored copy was read again (same broker, queue and offset) or the
key was revived later (`delivery_attempt` above 1, from the POP retry topic); a later first delivery of
another stored copy (a producer's resend stored twice) is another message. Each delivery that came
again later is:

- `redelivered_after_invisible` (expected): it was not acked in time, by cause: `not_acked` (skipped on
  purpose), `ack_refused` (the proxy answered the ack with an error), `ack_late` (answered ok after the
  invisible time), `no_ack` (no ack recorded);
- `redelivered_after_ack`: acked in time and delivered again all the same, by cause: `re_popped` (the
  same stored copy delivered again: read again from the queue because
  the broker's POP offset went back, e.g. a broker killed -9 loses the consume offsets it had not
  persisted yet; the at-least-once duplicate a crash allows), `after_broker_crash` (revived,
  `delivery_attempt` above 1, and the key was first delivered before a crash of its broker group
  and delivered again after it: a checkpoint from before the crash whose ack the broker lost with its
  memory), else a violation: `after_change` (a changeInvisibleDuration answered ok came first:
  apache/rocketmq#9583) or `plain_ack` (revived although acked).

Each key's last delivery that was not acked in time is:

- `consumed_but_lost` (a violation): never delivered again although its invisible time (plus
  REVIVE_SLACK_MS) ended before the consumers stopped: the broker holds it as consumed, nobody
  processed it (apache/rocketmq#7914's shape), by the same causes;
- `ack_in_doubt`: the same, but its ack was answered with a transport error (no response code: the
  proxy died or the connection broke), so the ack may have taken: not judged (seen when the proxy was
  killed while acks went through it);
- `due_after_stop`: its invisible time had not ended (plus the slack) when the consumers stopped: not
  judged.

A redelivery whose earlier delivery was not acked in time, acked or answered while a fault had the proxy
away (`proxy_outages`: a fault on a node serving gRPC, a partition with it in a group or a link to or
from it, until its end or restart, plus the clients' reconnection), is also counted under
that fault (`by_fault`): the duplicates a proxy crash forces (apache/rocketmq#10278).

The fourth class of the issue, never delivered, is the key table's (`lost`: acknowledged, in no
consumer's ledger)."""
from __future__ import annotations

from typing import Any, Collection

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# the figures' names (pop.<class>.<cause>): one source
from rmqchaos.spec.expect import POP_CAUSES as CAUSES, POP_CLASSES as CLASSES
from rmqchaos.spec import Consumers

#: how long after its invisible time a message not acked may take to come back: consumers.revive_wait's
#: default, when a scenario does not say. The broker's revive service advances with the messages of its
#: revive topic and rests when none come, so on an idle broker it re-put expired checkpoints 39 s after
#: their invisible time (a proxy kill test here; pop.log "has no new msg, take a rest"); this slack also
#: covers the next receive's long polling
REVIVE_SLACK_MS = int(Consumers.model_fields["revive_wait"].default * 1000)


def proxy_outages(events: list[dict[str, Any]], proxies: Collection[str] = ("proxy",)) -> list[tuple[str, int, int]]:
    """(fault id, from, to) in ms of each fault on a node that serves gRPC (`proxies`: the proxy node, or
    in local mode the brokers with the proxy inside): one that targets it, a partition with it in a
    group, a link from or to it. From the fault's start to the end of the restart that follows it (or
    its own end), plus OUTAGE_SLACK_MS for the clients to reconnect."""
    def on_proxy(e: dict[str, Any]) -> bool:
        p = e.get("params") or {}
        groups = ((p.get("evidence") or {}).get("groups") or p.get("groups") or []  # resolved, else as asked
                  if p.get("fault_kind") == "partition" else [])  # another kind's `groups` is no partition's (a flood's count)
        return (e.get("target") in proxies or any(m in proxies for g in groups for m in g)
                or p.get("fault_kind") == "link" and (p.get("from") in proxies or p.get("to") in proxies))
    out: dict[str, list[int]] = {}
    for e in events:
        p = e.get("params") or {}
        if e.get("kind") != "fault" or not e.get("start_ms") or not on_proxy(e):
            continue
        fid = p.get("follows") or p.get("fault_id")
        span = out.setdefault(fid, [int(e["start_ms"]), int(e["end_ms"] or e["start_ms"])])
        span[0] = min(span[0], int(e["start_ms"]))
        span[1] = max(span[1], int(e["end_ms"] or e["start_ms"]))
    return [(fid, a, b + OUTAGE_SLACK_MS) for fid, (a, b) in out.items()]


#: after the proxy is back, a client's gRPC channel reconnects with backoff (1 s, then x1.6)
OUTAGE_SLACK_MS = 5_000


def broker_crashes(events: list[dict[str, Any]], brokers: dict[str, dict[str, str]]) -> list[tuple[str, int]]:
    """(broker group, ms) of each fault that ended a broker node (a kill, an OOM kill, a power loss): its
    memory (buffered acks, unpersisted POP offsets) went with it."""
    out = []
    for e in events:
        p = e.get("params") or {}
        node = e.get("target") or ""
        if (e.get("kind") == "fault" and p.get("fault_kind") in ("kill", "oom_kill", "jvm_oom", "power_loss")
                and node in brokers and e.get("start_ms")):
            out.append(((brokers[node] or {}).get("brokerName", node), int(e["start_ms"])))
    return out


def pop_check(recv: DataFrame, stop_ms: int | None,
              outages: list[tuple[str, int, int]] | None = None,
              crashes: list[tuple[str, int]] | None = None,
              revive_slack_ms: int = REVIVE_SLACK_MS) -> dict[str, Any] | None:
    """Deliveries and keys per class and cause; None when no delivery has a receipt handle.
    `stop_ms`: when the first consumer stopped (None: not known, so no last delivery is judged lost);
    a last delivery counts as due again only `revive_slack_ms` after its invisible time.
    `outages` (proxy_outages): a redelivery whose earlier delivery was acked (or not) while the proxy was
    away counts under that fault too (`by_fault`: the duplicates a proxy crash forced)."""
    # a SimpleConsumer's deliveries: a PushConsumer's (ack null: the client acked by itself, its answer
    # unseen) are reconciled like any other, not judged here
    pop = recv.where(F.col("receipt_handle").isNotNull() & F.col("ack").isNotNull())
    if not pop.select("key").limit(1).collect():
        return None
    parts = F.split(F.col("receipt_handle"), " ")
    deadline = parts.getItem(1).cast("long") + parts.getItem(2).cast("long")
    # A delivery came again later when its stored copy was read again (the same broker, queue and
    # offset: a re-pop) or the key was revived later (delivery_attempt above 1, from the POP retry
    # topic). A later first delivery of another copy (a producer's resend stored twice) is another
    # message, not this one again.
    key_w = Window.partitionBy("key", "origin_topic").orderBy("receive_ms", "ack_ms")
    copy_w = Window.partitionBy("key", "origin_topic", "broker", "queue_id", "queue_offset").orderBy("receive_ms", "ack_ms")
    after = key_w.rowsBetween(1, Window.unboundedFollowing)
    d = (pop.select("key", "origin_topic", "broker", "queue_id", "queue_offset", "receive_ms", "ack", "ack_ms", "change",
                    "ack_error", deadline.alias("deadline"), "delivery_attempt")
         .withColumn("same_copy_ms", F.lead("receive_ms").over(copy_w))
         .withColumn("revived_ms", F.min(F.when(F.col("delivery_attempt") > 1, F.col("receive_ms"))).over(after))
         .withColumn("later", F.col("same_copy_ms").isNotNull() | F.col("revived_ms").isNotNull())
         .withColumn("next_ms", F.least("same_copy_ms", "revived_ms"))
         .withColumn("first_ms", F.min("receive_ms").over(Window.partitionBy("key", "origin_topic")))
         # read again from the queue as a first delivery: the same copy, before any revive
         .withColumn("re_pop", F.col("same_copy_ms").isNotNull()
                     & (F.col("revived_ms").isNull() | (F.col("same_copy_ms") <= F.col("revived_ms")))))
    # the key was delivered before a crash of its broker group and delivered again after it
    crashed = F.lit(False)
    for group, at in crashes or []:
        crashed = crashed | ((F.col("broker") == group) & (F.col("first_ms") < at) & (F.col("next_ms") > at))
    in_time = (F.col("ack") == "ok") & (F.col("ack_ms") <= F.col("deadline"))
    why = (F.when(F.col("ack") == "skipped", "not_acked").when(F.col("ack") == "error", "ack_refused")
           .when(F.col("ack") == "ok", "ack_late").otherwise("no_ack"))
    due_late = F.lit(True) if stop_ms is None else (F.col("deadline") + revive_slack_ms > F.lit(stop_ms))
    cls = (F.when(F.col("later") & in_time, "redelivered_after_ack")
           .when(F.col("later"), "redelivered_after_invisible")
           .when(in_time | (F.col("ack") == "ok"), None)  # acked (a late ack the broker took counts as taken)
           .when(due_late, "due_after_stop")
           # an ack the proxy did not answer (a transport error, no response code) may have taken
           .when((F.col("ack") == "error") & ~F.coalesce(F.col("ack_error"), F.lit("")).contains("response-code="),
                 "ack_in_doubt")
           .otherwise("consumed_but_lost"))
    cause = (F.when(F.col("later") & in_time,
                    F.when(F.col("re_pop"), "re_popped").when(crashed, "after_broker_crash")
                    .when(F.col("change") == "ok", "after_change").otherwise("plain_ack")).otherwise(why))
    at = F.coalesce(F.col("ack_ms"), F.col("receive_ms"))
    fault_cols = [F.sum((F.col("later") & ~in_time & (at >= a) & (at <= b)).cast("int")).alias(f"f{i}")
                  for i, (_, a, b) in enumerate(outages or [])]
    rows = (d.select("key", cls.alias("cls"), cause.alias("cause")).where(F.col("cls").isNotNull())
            .groupBy("cls", "cause").agg(F.count("*").alias("n")).collect())
    tot = pop.agg(F.count("*").alias("n"), F.countDistinct("key").alias("keys"),
                  F.sum((F.col("ack") == "ok").cast("int")).alias("acked"),
                  F.sum((F.col("ack") == "error").cast("int")).alias("refused"),
                  F.sum((F.col("change") == "ok").cast("int")).alias("changed")).collect()[0]
    per_fault = d.agg(*fault_cols).collect()[0] if fault_cols else None
    out: dict[str, Any] = {"deliveries": int(tot["n"]), "keys": int(tot["keys"]), "acks_ok": int(tot["acked"] or 0),
                           "acks_refused": int(tot["refused"] or 0),
                           # deliveries whose changeInvisibleDuration was answered ok (a consumer that changes)
                           "changes_ok": int(tot["changed"] or 0),
                           "classes": dict.fromkeys(CLASSES, 0), "keys_by_class": dict.fromkeys(CLASSES, 0),
                           "causes": {c: dict.fromkeys(CAUSES[c], 0) for c in CLASSES},
                           "by_fault": {fid: int(per_fault[f"f{i}"] or 0) for i, (fid, _, _) in enumerate(outages or [])}
                           if per_fault is not None else {}}
    for r in rows:
        out["classes"][r["cls"]] += int(r["n"])
        out["causes"][r["cls"]][r["cause"]] += int(r["n"])
    # keys per class: a key with deliveries in a class counts once there
    for r in (d.select("key", cls.alias("cls")).where(F.col("cls").isNotNull()).groupBy("cls")
              .agg(F.countDistinct("key").alias("k")).collect()):
        out["keys_by_class"][r["cls"]] = int(r["k"])
    return out


def pop_phrase(s: dict[str, Any]) -> str | None:
    """The verdict's clause on POP; None when no delivery came through a SimpleConsumer."""
    p = s.get("pop")
    if not p:
        return None
    c = p["classes"]
    parts = [f"{p['acks_ok']:,} acks answered ok" + (f", {p['acks_refused']:,} refused" if p["acks_refused"] else ""),
             f"{c['redelivered_after_invisible']:,} redelivered after their invisible time"
             if c["redelivered_after_invisible"] else "",
             _after_ack(p) if c["redelivered_after_ack"] else "",
             f"{c['consumed_but_lost']:,} CONSUMED BUT LOST (not acked, never delivered again)"
             if c["consumed_but_lost"] else "",
             f"{c['due_after_stop']:,} not acked and due again only after the consumers stopped (not judged)"
             if c["due_after_stop"] else "",
             f"{c['ack_in_doubt']:,} whose ack got no answer and never came again (the ack may have taken)"
             if c.get("ack_in_doubt") else ""]
    forced = [f"{n:,} after {fid}" for fid, n in (p.get("by_fault") or {}).items() if n]
    if forced:
        parts.append("redelivered because an ack was lost with the proxy: " + ", ".join(forced))
    return f"POP: {p['deliveries']:,} deliveries through the proxy: " + ", ".join(x for x in parts if x)


def _after_ack(p: dict[str, Any]) -> str:
    c = p["causes"]["redelivered_after_ack"]
    violations = c.get("after_change", 0) + c.get("plain_ack", 0)
    crash = c.get("after_broker_crash", 0)
    parts = [f"{violations:,} REDELIVERED AFTER A SUCCESSFUL ACK" if violations else "",
             f"of which {c['after_change']:,} after changeInvisibleDuration" if c.get("after_change") else "",
             f"{c['re_popped']:,} acked and read again from the queue as a first delivery (the broker's POP offset "
             "went back)" if c.get("re_popped") else "",
             f"{crash:,} acked and revived by a checkpoint from before a crash of their broker" if crash else ""]
    return ", ".join(x for x in parts if x)
