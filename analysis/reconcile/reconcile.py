"""The PySpark reconciliation: every business key of the send ledger against the receive ledger.

Runs with `local[*]` by default and on any Spark master by configuration (`--master`, or
`spark-submit analysis/job.py RUN_DIR`). Nothing is collected to the driver in proportion to the
data: only per-class counts, per-code counts, per-second series (one row per second of the run)
and per-event aggregates come back. Rules: analysis/ledgers/rules.py; outputs: docs/analysis.md.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Collection

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.ledgers import rules, sends
from analysis.reconcile import timeline
from analysis.reconcile.answers import answer_groups, answers, error_counts, window_answers
from analysis.durability.corrupted import corrupted
from analysis.replication.failover import failover
from analysis.reconcile.keys import key_table
from analysis.ledgers.latency import by_broker, pct_result as _pct_result
from analysis.reconcile.pace import lag as send_lag
from analysis.ledgers.latency import histogram as _histogram, percentiles as _percentiles
from analysis.durability.offsets import reused_queue_offsets
from analysis.contracts.order import order_check
from analysis.contracts.pop import REVIVE_SLACK_MS, broker_crashes, pop_check, proxy_outages
from analysis.contracts.timers import timer_check
from analysis.contracts.transactions import transaction_check, txn_keys
from analysis.replication.redeliveries import rollback_repeats, rollbacks
from analysis.ledgers.sealed import attribute, read_receive, read_send, read_txn
from analysis.durability.store_check import power_cut_keys, store_check
from rmqchaos.progress import say


def shuffle_partitions(files: list[Path]) -> int:
    """Shuffle partitions for this input: one per ~1 GiB of ledger JSON (a partition's hash tables
    stay bounded at any scale: ~1M keys each), at least 4 (adaptive execution merges small ones).
    Measured at 30M rows on 2 cores: 12 partitions took 78.6 s, 30 took 79.9 s, 91 (one per 128 MiB)
    ~84 s and 240 took 92.2 s: fewer, larger tasks pay less per-task and per-block overhead."""
    total = sum(f.stat().st_size for f in files)
    return max(4, min(2000, total // (1 << 30) + 1))


def analyze_ledgers(spark: SparkSession, send_files: list[Path], recv_files: list[Path],
                    events: list[dict[str, Any]], out_dir: Path | None = None,
                    receive_complete: bool = True, store: Any = None,
                    brokers: dict[str, dict[str, str]] | None = None,
                    monitor: list[dict[str, Any]] | None = None, ordered: bool = False,
                    txn_files: list[Path] | None = None, txn_timing: tuple[int, int] | None = None,
                    timer_slack_ms: int | None = None, proxies: Collection[str] = ("proxy",),
                    revive_slack_ms: int = REVIVE_SLACK_MS) -> dict[str, Any]:
    """The reconciliation proper; returns the `counts`, `errors`, `latency_ms`, `series`, `windows`
    parts of summary.json. With out_dir, writes keys.parquet and series.parquet there. With `store`
    (cluster/stored/messages.py's, over the run's broker stores), lost and indeterminate keys are looked up in it.
    With `brokers` (node -> broker.conf) and the `monitor` samples, the `failover` part
    (analysis/replication/failover.py; None without a replicated group). `ordered`: an ordered load, whose keys get
    the per-key order check (analysis/contracts/order.py; `order` is None otherwise). `txn_files`: a transactional
    load's transaction ledgers, judged with the brokers' (transactionTimeOut, transactionCheckInterval)
    in ms (analysis/contracts/transactions.py; `transactions` is None otherwise). `timer_slack_ms`: a timer load,
    whose keys are judged early, late or lost with that slack (analysis/contracts/timers.py; `timers` is None otherwise).
    `proxies`: the nodes that serve gRPC, whose faults force POP redeliveries (analysis/contracts/pop.py `by_fault`);
    `revive_slack_ms`: how long after its invisible time a POP message may take to come back.

    `send_files`/`recv_files` are the journals (JSON Lines); Spark reads their sealed Parquet copies
    only, sealing first whatever a crashed writer left unsealed. Passes over the data: one job by key
    (→ keys.parquet), then column scans of the sealed ledgers and the key table for the aggregates."""
    warnings: list[str] = []
    own_tmp = out_dir is None
    work = Path(tempfile.mkdtemp(prefix="rmqchaos-analyze-")) if own_tmp else out_dir
    assert work is not None
    work.mkdir(parents=True, exist_ok=True)
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(send_files + recv_files)))
    t0 = time.monotonic()

    def step(what: str) -> None:  # progress: which pass took how long
        say(f"analyze: {what} ({time.monotonic() - t0:.1f}s)")
    try:
        send = read_send(spark, send_files, warnings)
        recv = attribute(read_receive(spark, recv_files, warnings))
        txn = read_txn(spark, txn_files, warnings) if txn_files else None
        step("ledgers sealed")
        w = key_table(send, recv, receive_complete, txn_keys(txn) if txn is not None else None).write.mode("overwrite")
        for c in KEYS_NO_DICTIONARY:
            w = w.option(f"parquet.enable.dictionary#{c}", "false")
        w.parquet(str(work / "keys.parquet"))
        keys = spark.read.parquet(str(work / "keys.parquet"))
        step("keys classified")
        groups, answer_totals = answer_groups(send, warnings)
        res = _aggregate(spark, send, keys, events, groups, warnings)
        res["lag"] = send_lag(send)
        step("counts, errors, latency, series, windows, the sends' lag behind their schedule")
        res["corrupted_by_kind"], res["corrupted"], res["unexpected_examples"] = corrupted(
            send, keys, recv, res["counts"]["unexpected_deliveries"])
        res["counts"]["corrupted_deliveries"] = sum(res["corrupted_by_kind"].values())
        step("damaged deliveries by kind")
        res["reused_queue_offsets"] = reused_queue_offsets(send, keys)
        delivered = res["reused_queue_offsets"].pop("delivered_keys")
        if store is not None:
            delivered = sorted(set(delivered) | set(power_cut_keys(send, keys, events, brokers or {})))
        res["store_check"] = store_check(send, keys, store, warnings, delivered) if store is not None else None
        if store is not None:
            step(f"{res['store_check']['checked']} lost or indeterminate keys looked up in the brokers' stores")
        step(f"{res['reused_queue_offsets']['positions']} queue position(s) acknowledged to two messages")
        res["failover"] = failover(send, keys, events, monitor or [], brokers, store, recv) if brokers else None
        if res["failover"]:
            step(f"{len(res['failover']['failovers'])} failover(s) of the replicated groups")
        res["offset_rollback"] = rollback_repeats(recv, rollbacks(events, brokers or {}))
        if res["offset_rollback"]:
            step(f"{res['offset_rollback']['deliveries']} delivery(ies) read again after a power loss rolled offsets back")
        res["order"] = order_check(send, recv) if ordered else None
        res["timers"] = timer_check(keys, events, timer_slack_ms, send) if timer_slack_ms is not None else None
        if res["timers"]:
            step(f"{res['timers']['keys']} timer message(s) judged against their due times")
        res["transactions"] = transaction_check(send, txn, recv, receive_complete, *(txn_timing or (6000, 30000)),
                                                store=store) if txn is not None else None
        if res["transactions"]:
            step(f"{res['transactions']['keys']} transaction(s) sorted")
        # POP through the proxy (analysis/contracts/pop.py): judged up to the first consumer's stop
        stops = [int(e["start_ms"]) for e in events if e.get("kind") == "consumer_stop" and e.get("start_ms")]
        res["pop"] = pop_check(recv, min(stops) if stops else None, proxy_outages(events, proxies),
                               broker_crashes(events, brokers or {}), revive_slack_ms)
        if res["pop"]:
            step(f"{res['pop']['deliveries']} POP deliveries judged against their invisible time")
        if res["order"]:
            step(f"{res['order']['keys'] - res['order']['keys_in_order']} of {res['order']['keys']} sharding key(s) "
                 "out of order")
        res["answers"] = answers(send, recv, keys, res["counts"]["duplicated"], answer_totals)
        step("answers matched with the msgIds delivered")
        if res["series"] and not own_tmp:
            # through a JSON Lines file, not createDataFrame(list): that starts Python workers for
            # the write, ~8 s of a cold analysis here against ~1 s
            lines = work / "series.jsonl"
            lines.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in res["series"]))
            spark.read.json(str(lines)).write.mode("overwrite").parquet(str(work / "series.parquet"))
            lines.unlink()
        return res
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)


# keys.parquet's columns of (nearly) unique values: a dictionary would fill up and be dropped, after
# the work; without one the 30M-row key table was written in ~29 s against ~33 s, and smaller
KEYS_NO_DICTIONARY = ("key", "first_intended_ms", "first_start_ms", "first_receive_ms")


def _aggregate(spark: SparkSession, send: DataFrame, keys: DataFrame, events: list[dict[str, Any]],
               answer_rows: list[Any], warnings: list[str]) -> dict[str, Any]:
    """Counts, errors, latency, series and windows: a few column scans, nothing brought back to the
    driver in proportion to the data (per key class, per error kind, per second, per event). Every
    event window is a few more columns of the key and send aggregations, not scans of its own."""
    wins = timeline.window_events(events)
    e2e = F.when(F.col("first_receive_ms").isNotNull() & F.col("first_intended_ms").isNotNull(),
                 F.col("first_receive_ms") - F.col("first_intended_ms"))
    win_classes = rules.CLASSES + ("unexpected",)
    agg = keys.agg(
        F.sum((F.col("class") != "unexpected").cast("long")).alias("keys"),
        *[F.sum((F.col("class") == c).cast("long")).alias(c) for c in rules.CLASSES + ("unexpected",)],
        F.sum(F.coalesce("acked", F.lit(0))).alias("acked"),
        F.sum(((F.col("acked") == 1) & (F.col("acked_strong") == 0)).cast("long")).alias("acked_weak"),
        F.sum(((F.col("acked") == 1) & (F.col("acked_strong") == 0) & (F.col("class") == "lost")).cast("long"))
        .alias("acked_weak_lost"),
        F.sum("extra_deliveries").alias("duplicate_deliveries"),
        F.sum(F.when(F.col("class") == "unexpected", F.col("deliveries")).otherwise(0)).alias("unexpected_deliveries"),
        *[F.sum(f"dup_{c}").alias(f"dup_{c}") for c in rules.DUPLICATE_CAUSES],
        *[F.sum(((F.col("class") == "duplicated") & cond).cast("long")).alias(f"dupkeys_{n}")
          for n, cond in (("acked", F.col("acked") == 1), ("rejected", F.col("all_rejected") == 1),
                          ("unknown", (F.col("acked") == 0) & (F.col("all_rejected") == 0)),
                          ("never_attempted", F.col("attempts").isNull()))],
        *[F.sum(((F.col("retry_deliveries") > 0) & cond).cast("long")).alias(f"retried_{n}")
          for n, cond in (("first_in_batch", F.col("first_batch_index") == 0),
                          ("later_in_batch", F.col("first_batch_index") > 0),
                          ("never_first", F.col("first_batch_index").isNull()))],
        *[F.count(F.when(timeline.between("first_intended_ms", s, t) & (F.col("class") == c), 1)).alias(f"w{i}_{c}")
          for i, (_, s, t) in enumerate(wins) for c in win_classes],
    ).collect()[0].asDict()
    ok = sends.acked()
    per_second = timeline.per_second(send)
    # latency: exact percentiles from one histogram per second of the acked attempts' start (the
    # series reads it per second, the totals summed over seconds) and one of the keys' end to end
    hist = _histogram(send.where(ok), {
        "send": F.col("end_ms") - F.col("start_ms"), "intended": F.col("end_ms") - F.col("intended_ms"),
        **{f"w{i}": F.when(timeline.between("start_ms", s, t), F.col("end_ms") - F.col("intended_ms"))
           for i, (_, s, t) in enumerate(wins)}}, (F.col("start_ms") / 1000).cast("long")).persist()
    try:
        lat = _percentiles(hist.groupBy(F.lit(0).alias("g"), "m", "v").agg(F.sum("c").alias("c")))
        lat_by_second = _percentiles(hist.where(F.col("m").isin("send", "intended")))
    finally:
        hist.unpersist()
    lat.update(_percentiles(_histogram(keys, {"e2e": e2e}, F.lit(0))))
    counts = {k: int(agg[k] or 0) for k in ("keys", "acked", "acked_weak", "acked_weak_lost", "duplicate_deliveries",
                                            "unexpected_deliveries") + rules.CLASSES + ("unexpected",)}
    counts["attempts"] = sum(r["attempts"] for r in per_second["send"].values())
    counts["no_outcome"] = counts["attempts"] - sum(r["outcomes"] for r in per_second["send"].values())
    dup_causes = {c: int(agg[f"dup_{c}"] or 0) for c in rules.DUPLICATE_CAUSES}
    dup_by_send = {n: int(agg[f"dupkeys_{n}"] or 0) for n in ("acked", "rejected", "unknown", "never_attempted")}
    n_classes = sum(counts[c] for c in rules.CLASSES)
    if n_classes != counts["keys"] or sum(dup_causes.values()) != counts["duplicate_deliveries"]:
        raise AssertionError(f"classification is not exact: classes sum to {n_classes}, keys {counts['keys']}; "
                             f"duplicate causes {dup_causes} vs {counts['duplicate_deliveries']} extra deliveries")
    latency = {"send": _pct_result(lat, (0, "send")), "send_from_intended": _pct_result(lat, (0, "intended")),
               "end_to_end": _pct_result(lat, (0, "e2e"))}
    series = timeline.series(per_second, keys, lat_by_second)
    windows = timeline.windows(wins, series,
                               [{c: int(agg[f"w{i}_{c}"]) for c in win_classes if agg[f"w{i}_{c}"]} for i in range(len(wins))],
                               [_pct_result(lat, (0, f"w{i}")) for i in range(len(wins))])
    for w, b, a in zip(windows, by_broker(send.where(ok), wins), window_answers(send, wins)):
        w["send_ms_by_broker"], w["answers_by_broker"] = b, a
    retried = {n: int(agg[f"retried_{n}"] or 0) for n in ("first_in_batch", "later_in_batch", "never_first")}
    return {"counts": counts, "duplicates_by_cause": dup_causes, "duplicated_keys_by_send_outcome": dup_by_send,
            "retried_keys_by_batch_position": retried,
            "errors": error_counts(answer_rows, counts["no_outcome"]), "latency_ms": latency, "series": series, "windows": windows,
            "busy_series": per_second["busy"], "warnings": warnings}
