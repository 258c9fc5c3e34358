"""Whether the lost and indeterminate keys are in the brokers' stores (cluster/stored/messages.py): lost in the
store or in delivery, an unanswered send stored after all or not."""
from __future__ import annotations

import time
from collections import Counter
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.durability.powercuts import power_cuts
from analysis.ledgers.session import BROADCAST_MAX
from rmqchaos.ledger.schema import due_of

STORE_LOOKUP_MAX = 100_000  # keys looked up in the brokers' stores per run
STORE_EXAMPLES = 50


def store_check(send: DataFrame, keys: DataFrame, store: Any, warnings: list[str],
                delivered: list[str] | None = None) -> dict[str, Any]:
    """Every lost and indeterminate key looked up in the brokers' stores (`store.find(topic, key)`,
    cluster/stored/messages.py): lost -> lost_from_store (in no node's log; of those, lost_truncated: its bytes
    only past a DLedger replica's log, truncated when it followed a leader that never had it) or
    lost_in_delivery (stored, never delivered; of those, lost_in_wheel: a timer or delay message stored
    only in the broker's scheduled topics, which never put it into its own); indeterminate -> indeterminate_stored (the unanswered send was stored after all and
    never delivered) or indeterminate_not_stored. Bounded by the number of such keys."""
    t0 = time.monotonic()
    targets = keys.where(F.col("class").isin("lost", "indeterminate")).select("key", "class")
    n = int(targets.count())
    if n > STORE_LOOKUP_MAX:
        warnings.append(f"{n} lost or indeterminate keys: only {STORE_LOOKUP_MAX} were looked up in the store")
        targets = targets.limit(STORE_LOOKUP_MAX)
    small = F.broadcast(targets) if n <= BROADCAST_MAX else targets
    rows = _attempts(send, small, "class") if n else []
    split = {"lost_from_store": 0, "lost_in_delivery": 0, "indeterminate_stored": 0, "indeterminate_not_stored": 0,
             "lost_in_wheel": 0,  # of lost_in_delivery: only in a scheduled topic, never released to its own
             # of lost_from_store: only past a DLedger replica's log end, truncated to a new leader's log
             "lost_truncated": 0}
    stored: list[dict[str, Any]] = []
    absent: list[dict[str, Any]] = []
    by_broker: Counter[str] = Counter()  # lost keys by the broker group that acknowledged them
    gone: Counter[str] = Counter()  # acknowledged keys in no store now, by that group (with the erased below)
    gone_status: Counter[str] = Counter()  # the same keys by the status they were acknowledged with
    gone_acks: dict[str, list[int]] = {}  # their acknowledgements' times, by that group
    gone_ok: Counter[str] = Counter()  # the same keys by each group that acknowledged them SEND_OK
    gone_slots: dict[str, Counter[int]] = {}  # ... and by the slot of each group's last acknowledgement

    def count_gone(groups: list[str], statuses: list[str], acked_ms: int | None, acks: list[Any]) -> None:
        gone.update(groups)
        gone_status[strongest(statuses)] += 1
        for g in groups if acked_ms is not None else ():
            gone_acks.setdefault(g, []).append(int(acked_ms))
        ok, last = by_group(acks)
        gone_ok.update(ok)
        for g, ms in last.items():
            gone_slots.setdefault(g, Counter())[ms // GONE_SLOT_MS * GONE_SLOT_MS] += 1
    for r in sorted(rows, key=lambda r: r["key"]):
        if r["class"] == "lost":
            by_broker.update(r["acked_on"])
        # a timer or delay message may still wait in the broker's own topics (stored, not delivered)
        topics = sorted(r["topics"]) + (list(SCHEDULED_TOPICS) if due_of(r["key"]) is not None else [])
        locs = [loc for t in topics for loc in store.find(t, r["key"])]
        live = [loc for loc in locs if loc.get("in_log", True)]  # not bytes past a truncated DLedger log
        verdict = {("lost", True): "lost_in_delivery", ("lost", False): "lost_from_store",
                   ("indeterminate", True): "indeterminate_stored",
                   ("indeterminate", False): "indeterminate_not_stored"}[(r["class"], bool(live))]
        split[verdict] += 1
        if verdict == "lost_in_delivery" and all(loc["topic"] in SCHEDULED_TOPICS for loc in live):
            split["lost_in_wheel"] += 1
        if verdict == "lost_from_store" and locs:
            split["lost_truncated"] += 1
        if verdict == "lost_from_store":
            count_gone(r["acked_on"], r["statuses"], r["acked_ms"], r["acks"])
        (stored if locs else absent).append({"key": r["key"], "class": r["class"], "verdict": verdict,
                                             "topics": sorted(r["topics"]), "stored_at": locs})
    erased = _erased(send, store, delivered or [])
    for _, groups, statuses, acked_ms, acks in erased:
        count_gone(groups, statuses, acked_ms, acks)
    erased_keys = [k for k, *_ in erased]
    return {"checked": len(rows), **split, "erased_after_delivery": len(erased_keys), "erased_examples": erased_keys[:STORE_EXAMPLES],
            "gone_by_broker": dict(sorted(gone.items())), "gone_by_status": dict(sorted(gone_status.items())),
            "gone_acked_ms_by_broker": _span(gone_acks),
            # per group, the gone keys it acknowledged SEND_OK (a SYNC_FLUSH group's promise: figure
            # gone_ok_sync_flush), and its last acknowledgement of each in GONE_SLOT_MS slots, bounded by
            # the run's length (figure gone_in_disk_fault: acknowledged inside a disk fault's window)
            "gone_ok_by_broker": dict(sorted(gone_ok.items())),
            "gone_ack_slot_ms": GONE_SLOT_MS,
            "gone_ack_slots_by_broker": {g: {str(k): n for k, n in sorted(c.items())}
                                         for g, c in sorted(gone_slots.items())},
            "lost_by_broker": dict(sorted(by_broker.items())), "nodes": store.nodes(), "unread_nodes": [], "method": store.method(),
            "seconds": round(time.monotonic() - t0, 3),
            "examples": (stored + [a for a in absent if a["class"] == "lost"])[:STORE_EXAMPLES]}


#: where a broker keeps a scheduled message until it is due: the timer wheel's topic and the delay levels'
#: (TimerMessageStore.TIMER_TOPIC, TopicValidator.RMQ_SYS_SCHEDULE_TOPIC)
SCHEDULED_TOPICS = ("rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX")
GONE_SLOT_MS = 100  # the width of the slots the gone keys' acknowledgement times are counted in
ANSWER_MARGIN_MS = 1000  # a producer on a busy host reads an answer this late at most (a later one is another node's)


def power_cut_keys(send: DataFrame, keys: DataFrame, events: list[dict[str, Any]],
                   brokers: dict[str, dict[str, str]], limit: int = 50_000) -> list[str]:
    """Delivered keys acknowledged by a broker group before one of its nodes lost power (the
    power_loss events' `nodes_lost[node]`: up to its freeze, plus ANSWER_MARGIN_MS): the store must still hold each (a SYNC_FLUSH
    broker's did; an ASYNC_FLUSH broker's may be erased once read). At most `limit`, by key."""
    cuts = []
    for _, node, lost in power_cuts(events):
        group = (brokers.get(node) or {}).get("brokerName")
        if group and lost.get("cut_ms"):
            # up to when the node could last answer (its freeze), and the answer's way to the producer:
            # an acknowledgement received just after the cut was sent before it
            cuts.append((group, int(lost.get("frozen_ms") or lost["cut_ms"]) + ANSWER_MARGIN_MS))
    if not cuts:
        return []
    before = reduce(lambda a, b: a | b, [(F.col("broker") == g) & (F.col("end_ms") <= t) for g, t in cuts])
    delivered = keys.where(F.col("class").isin("ok", "duplicated")).select("key")
    return [r["key"] for r in send.where(sends.acked() & before).select("key").distinct()
            .join(delivered, "key").orderBy("key").limit(limit).collect()]


def strongest(statuses: list[str]) -> str:
    """The status a key counts under when it was acknowledged more than once: SEND_OK if any attempt
    got it, else the first weak status by name (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, ...)."""
    st = sorted(x for x in statuses if x)
    return "SEND_OK" if "SEND_OK" in st else (st[0] if st else "unknown")


def _erased(send: DataFrame, store: Any,
            delivered: list[str]) -> list[tuple[str, list[str], list[str], int | None, list[Any]]]:
    """The delivered keys in no broker's store, by key, each with the broker groups that acknowledged
    it, the statuses they acknowledged it with, when its last acknowledgement came and each
    acknowledgement (broker, status, end_ms)."""
    if not delivered:
        return []
    want = send.sparkSession.createDataFrame([(k,) for k in delivered], "key string")
    rows = _attempts(send, F.broadcast(want))
    return sorted(((r["key"], sorted(r["acked_on"]), sorted(r["statuses"]), r["acked_ms"], list(r["acks"]))
                   for r in rows if not any(loc.get("in_log", True) for t in sorted(r["topics"])
                                            for loc in store.find(t, r["key"]))), key=lambda x: x[0])


def by_group(acks: list[Any]) -> tuple[set[str], dict[str, int]]:
    """A key's acknowledgements, each (broker group, status, end_ms): the groups that acknowledged it
    SEND_OK, and each group's last acknowledgement (ms)."""
    ok: set[str] = set()
    last: dict[str, int] = {}
    for broker, status, end_ms in acks:
        if broker is None:
            continue
        if status == "SEND_OK":
            ok.add(broker)
        if end_ms is not None:
            last[broker] = max(last.get(broker, int(end_ms)), int(end_ms))
    return ok, last


def _span(acks: dict[str, list[int]]) -> dict[str, list[int]]:
    """Per broker group, the first and last acknowledgement (ms) of its keys in no store now."""
    return {g: [min(ms), max(ms)] for g, ms in sorted(acks.items()) if ms}


def _attempts(send: DataFrame, want: DataFrame, *by: str) -> list[Any]:
    """Per key of `want` (and its columns `by`): the topics its intents named (every attempt has one),
    the broker groups that acknowledged it (`acked_on`) and the statuses they answered (`statuses`),
    and when its last acknowledgement came (`acked_ms`), and each acknowledgement as (broker, status,
    end_ms) (`acks`), in one scan of the send ledger."""
    return (send.where(sends.is_intent() | sends.acked()).join(want, "key").groupBy("key", *by)
            .agg(F.collect_set(F.when(sends.is_intent(), F.col("topic"))).alias("topics"),
                 F.collect_set(F.when(sends.acked(), F.col("broker"))).alias("acked_on"),
                 F.collect_set(F.when(sends.acked(), F.col("status"))).alias("statuses"),
                 F.max(F.when(sends.acked(), F.col("end_ms"))).alias("acked_ms"),
                 F.collect_list(F.when(sends.acked(), F.struct(F.col("broker").alias("broker"),
                                                             F.col("status").alias("status"),
                                                             F.col("end_ms").alias("end_ms")))).alias("acks")).collect())
