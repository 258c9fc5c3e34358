"""The PySpark reconciliation: every business key of the send ledger against the receive ledger.

Runs with `local[*]` by default and on any Spark master by configuration (`--master`, or
`spark-submit analysis/job.py RUN_DIR`). Nothing is collected to the driver in proportion to the
data: only per-class counts, per-code counts, per-second series (one row per second of the run)
and per-event aggregates come back. Rules: analysis/rules.py; outputs: docs/analysis.md.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import rules, schemas
from rmqchaos.errors import UserError


NOT_WINDOWS = ("stage", "cluster_up", "check", "restart")  # bookkeeping (a fault restart has its own event)


class LedgerError(UserError):
    pass


def spark_session(master: str | None = None, shuffle_partitions: int | None = None) -> SparkSession:
    master = master or os.environ.get("RMQCHAOS_SPARK_MASTER", "local[*]")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver listens on loopback only
    b = (SparkSession.builder.appName("rmqchaos-analyze").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.memory", os.environ.get("RMQCHAOS_SPARK_DRIVER_MEMORY", "1g"))
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions or (8 if master.startswith("local") else 200)))
         .config("spark.driver.extraJavaOptions", "-Djava.net.preferIPv4Stack=true")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---------------------------------------------------------------- reading, with malformed-record checks

def read(spark: SparkSession, files: list[Path], schema: Any, warnings: list[str], staging: Path) -> DataFrame:
    """Parse the JSON once into Parquet under `staging` (every later pass reads columns, not JSON),
    checking for malformed records on the way."""
    if not files:
        return spark.createDataFrame([], schema).drop(schemas.CORRUPT)
    (spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", schemas.CORRUPT)
     .json([str(f) for f in files]).write.mode("overwrite").parquet(str(staging)))
    df = spark.read.parquet(str(staging))
    if df.where(F.col(schemas.CORRUPT).isNotNull()).limit(1).count():
        # rare path: find the files and positions (a torn last record is a warning, anything else an error)
        for f in files:
            torn = _torn_tail(f)
            off = _first_bad_offset(f, stop=torn)
            if off is not None:
                raise LedgerError(f"{f}: malformed record at byte {off}",
                                  "a ledger must be complete JSON lines; fix or remove the record and analyze again")
            if torn is not None and _is_bad(f, torn):
                warnings.append(f"{f}: torn last record at byte {torn} (crash mid-write); not counted")
    return df.where(F.col(schemas.CORRUPT).isNull()).drop(schemas.CORRUPT)


def _torn_tail(f: Path) -> int | None:
    """Byte offset of the last record if the file does not end with a newline (a crash mid-write)."""
    size = f.stat().st_size
    if size == 0:
        return None
    with open(f, "rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        pos, chunk = size, 65536
        while pos > 0:  # find the previous newline, reading backwards
            start = max(0, pos - chunk)
            fh.seek(start)
            data = fh.read(pos - start)
            nl = data.rfind(b"\n")
            if nl >= 0:
                return start + nl + 1
            pos = start
        return 0


def _first_bad_offset(f: Path, stop: int | None = None) -> int | None:
    """Offset of the first unparsable complete line before `stop` (the torn tail), or None."""
    off = 0
    with open(f, "rb") as fh:
        for line in fh:
            if stop is not None and off >= stop:
                return None
            if line.strip():
                try:
                    json.loads(line)
                except ValueError:
                    return off
            off += len(line)
    return None


def _is_bad(f: Path, off: int) -> bool:
    with open(f, "rb") as fh:
        fh.seek(off)
        try:
            json.loads(fh.read())
            return False
        except ValueError:
            return True


# ---------------------------------------------------------------- classification

def attempts(send: DataFrame) -> DataFrame:
    """One row per attempt: the intent joined with its outcome (an intent without one: unknown)."""
    intents = send.where(F.col("rec") == "intent").select("producer_id", "attempt_id", "key", "attempt", "topic",
                                                          "intended_ms", "start_ms")
    outs = send.where(F.col("rec") == "outcome").select(
        "producer_id", "attempt_id", F.col("start_ms").alias("o_start_ms"), "end_ms", "outcome", "status", "code",
        "remark", "sent", "broker", "queue_id", "queue_offset", "msg_id")
    a = intents.join(outs, ["producer_id", "attempt_id"], "left")
    outcome = F.coalesce(F.col("outcome"), F.lit("no_outcome"))
    cls = (F.when(outcome == "ok", "acked")
           .when((outcome == "error") & (F.col("code").isin(*rules.DEFINITE_REJECT_CODES) |
                                         (F.col("code").isNull() & (F.col("sent") == F.lit(False)))), "rejected")
           .otherwise("unknown"))
    return (a.withColumn("outcome", outcome).withColumn("aclass", cls)
            .withColumn("start_ms", F.coalesce("o_start_ms", "start_ms")).drop("o_start_ms"))


def key_table(att: DataFrame, recv: DataFrame) -> DataFrame:
    """One row per key (attempted or received) with its class and duplicate causes."""
    sent = att.groupBy("key").agg(
        F.count("*").alias("attempts"),
        F.countDistinct("topic").alias("topics_attempted"),
        F.max((F.col("aclass") == "acked").cast("int")).alias("acked"),
        F.max(((F.col("aclass") == "acked") & (F.col("status") == "SEND_OK")).cast("int")).alias("acked_strong"),
        F.min((F.col("aclass") == "rejected").cast("int")).alias("all_rejected"),
        F.min("intended_ms").alias("first_intended_ms"),
        F.min("start_ms").alias("first_start_ms"))
    # Distinct copies and topics per key by aggregating twice (cheaper than countDistinct's expand):
    # first per (key, stored copy), then per key. Retry deliveries are copies of their own (%RETRY%).
    nonretry = F.col("reconsume_times") == 0
    per_copy = recv.groupBy("key", "origin_topic", "broker", "queue_id", "queue_offset", nonretry.alias("nr")).agg(
        F.count("*").alias("n"), F.min("receive_ms").alias("rm"))
    per_topic = per_copy.groupBy("key", "origin_topic", "nr").agg(
        F.sum("n").alias("n"), F.count("*").alias("copies"), F.min("rm").alias("rm"))
    got = per_topic.groupBy("key").agg(
        F.sum("n").alias("deliveries"),
        F.sum(F.when(~F.col("nr"), F.col("n")).otherwise(0)).alias("retry_deliveries"),
        F.sum(F.when(F.col("nr"), F.col("n")).otherwise(0)).alias("first_deliveries"),
        F.sum(F.col("nr").cast("int")).alias("topics_received"),
        F.sum(F.when(F.col("nr"), F.col("copies")).otherwise(0)).alias("copies"),
        F.min("rm").alias("first_receive_ms"))
    k = sent.join(got, "key", "full_outer").fillna(0, subset=["deliveries", "retry_deliveries", "first_deliveries",
                                                              "topics_received", "copies"])
    d = F.col("deliveries")
    cls = (F.when(F.col("attempts").isNull(), "unexpected")
           .when(d > 1, "duplicated")
           .when((d == 1) & (F.col("acked") == 1), "ok")
           .when(d == 1, "recovered")
           .when(F.col("acked") == 1, "lost")
           .when(F.col("all_rejected") == 1, "failed")
           .otherwise("indeterminate"))
    k = k.withColumn("class", cls)
    dup = F.col("class") == "duplicated"
    has_first = F.col("first_deliveries") > 0
    extra_copies = F.col("copies") - F.col("topics_received")
    resent_same_topic = F.coalesce(F.col("attempts") - F.col("topics_attempted"), F.lit(0)) > 0
    causes = {
        "consumer_retry": F.when(has_first, F.col("retry_deliveries")).otherwise(d - 1),
        "backup_topic": F.when(has_first, F.col("topics_received") - 1).otherwise(0),
        "producer_resend": F.when(has_first & resent_same_topic, extra_copies).otherwise(0),
        "unexplained": F.when(has_first & ~resent_same_topic, extra_copies).otherwise(0),
        "consumer_repull": F.when(has_first, F.col("first_deliveries") - F.col("copies")).otherwise(0),
    }
    for name, expr in causes.items():
        k = k.withColumn(f"dup_{name}", F.when(dup, expr).otherwise(0))
    return k.withColumn("extra_deliveries", F.when(dup, d - 1).otherwise(0))


# ---------------------------------------------------------------- the job

def _percentiles(df: DataFrame, col: str) -> dict[str, Any]:
    r = df.agg(F.percentile_approx(col, [0.5, 0.95, 0.99], 10000).alias("p"), F.max(col).alias("max"),
               F.count(col).alias("n")).collect()[0]
    if not r["n"]:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    return {"n": r["n"], "p50": r["p"][0], "p95": r["p"][1], "p99": r["p"][2], "max": r["max"]}


def analyze_ledgers(spark: SparkSession, send_files: list[Path], recv_files: list[Path],
                    events: list[dict[str, Any]], out_dir: Path | None = None) -> dict[str, Any]:
    """The reconciliation proper; returns the `counts`, `errors`, `latency_ms`, `series`, `windows`
    parts of summary.json. With out_dir, writes keys.parquet and series.parquet there."""
    warnings: list[str] = []
    own_tmp = out_dir is None
    work = Path(tempfile.mkdtemp(prefix="rmqchaos-analyze-")) if own_tmp else out_dir
    assert work is not None
    work.mkdir(parents=True, exist_ok=True)
    stg = work / "_staging"
    try:
        send = read(spark, send_files, schemas.SEND, warnings, stg / "send")
        recv = read(spark, recv_files, schemas.RECEIVE, warnings, stg / "receive")
        attempts(send).write.mode("overwrite").parquet(str(stg / "attempts"))
        att = spark.read.parquet(str(stg / "attempts"))
        key_table(att, recv).write.mode("overwrite").parquet(str(work / "keys.parquet"))
        keys = spark.read.parquet(str(work / "keys.parquet"))
        res = _aggregate(spark, att, keys, events, warnings)
        res["counts"]["corrupted_deliveries"], res["corrupted"] = _corrupted(att, keys, recv)
        if res["series"] and not own_tmp:
            spark.createDataFrame(res["series"]).write.mode("overwrite").parquet(str(work / "series.parquet"))
        return res
    finally:
        shutil.rmtree(stg, ignore_errors=True)
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)


def _aggregate(spark: SparkSession, att: DataFrame, keys: DataFrame, events: list[dict[str, Any]],
               warnings: list[str]) -> dict[str, Any]:

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
    ).collect()[0].asDict()
    n_att = att.count()
    counts = {k: int(agg[k] or 0) for k in ("keys", "acked", "acked_weak", "acked_weak_lost", "duplicate_deliveries",
                                            "unexpected_deliveries") + rules.CLASSES + ("unexpected",)}
    counts["attempts"] = int(n_att)
    counts["no_outcome"] = int(att.where(F.col("outcome") == "no_outcome").count())
    dup_causes = {c: int(agg[f"dup_{c}"] or 0) for c in rules.DUPLICATE_CAUSES}
    dup_by_send = {n: int(agg[f"dupkeys_{n}"] or 0) for n in ("acked", "rejected", "unknown", "never_attempted")}
    total = sum(counts[c] for c in rules.CLASSES)
    if total != counts["keys"] or sum(dup_causes.values()) != counts["duplicate_deliveries"]:
        raise AssertionError(f"classification is not exact: classes sum to {total}, keys {counts['keys']}; "
                             f"duplicate causes {dup_causes} vs {counts['duplicate_deliveries']} extra deliveries")

    prefix = F.regexp_extract(F.coalesce("remark", F.lit("")), rules.REMARK_PREFIX_REGEX, 1)
    errors = {
        "by_outcome": _count_map(att, F.col("outcome")),
        "by_status": _count_map(att.where(F.col("outcome") == "ok"), F.col("status")),
        "by_code": _count_map(att.where(F.col("code").isNotNull()), F.col("code").cast("string")),
        "by_remark_prefix": _count_map(att.where(prefix != ""), prefix),
        "by_broker": _count_map(att.where(F.col("broker").isNotNull()),
                                F.concat_ws(" ", "broker", "outcome")),
    }
    ok_att = att.where(F.col("outcome") == "ok")
    latency = {
        "send": _percentiles(ok_att.withColumn("l", F.col("end_ms") - F.col("start_ms")), "l"),
        "send_from_intended": _percentiles(ok_att.withColumn("l", F.col("end_ms") - F.col("intended_ms")), "l"),
        "end_to_end": _percentiles(keys.where(F.col("first_receive_ms").isNotNull() & F.col("first_intended_ms")
                                              .isNotNull()).withColumn("l", F.col("first_receive_ms")
                                                                       - F.col("first_intended_ms")), "l"),
    }
    series = _series(att, keys)
    windows = _windows(spark, att, keys, events, series)
    return {"counts": counts, "duplicates_by_cause": dup_causes, "duplicated_keys_by_send_outcome": dup_by_send,
            "errors": errors, "latency_ms": latency, "series": series, "windows": windows, "warnings": warnings}


def _corrupted(att: DataFrame, keys: DataFrame, recv: DataFrame) -> tuple[int, list[dict[str, Any]]]:
    """Deliveries of a key never attempted whose msgId (UNIQ_KEY) is that of a sent message: the
    broker served a damaged copy (seen after an OOM kill with transientStorePoolEnable: a commit
    cut mid-write leaves a message whose tail is zeros). Count, and up to 20 examples."""
    sent = att.where(F.col("msg_id").isNotNull()).select("msg_id", F.col("key").alias("sent_key"),
                                                         F.col("outcome").alias("sent_outcome")).dropDuplicates(["msg_id"])
    unexpected = keys.where(F.col("class") == "unexpected").select("key")
    bad = recv.join(unexpected, "key").join(sent, "msg_id")
    n = bad.count()
    rows = bad.select("msg_id", "sent_key", "sent_outcome", "key", "broker", "queue_id", "queue_offset").limit(20).collect()
    return int(n), [{**r.asDict(), "key": repr(r["key"])} for r in rows]


def _count_map(df: DataFrame, col: Any) -> dict[str, int]:
    return {str(r["k"]): int(r["n"]) for r in df.groupBy(col.alias("k")).agg(F.count("*").alias("n"))
            .orderBy(F.desc("n")).limit(200).collect()}


def _series(att: DataFrame, keys: DataFrame) -> list[dict[str, Any]]:
    """Per 1 s bucket (epoch seconds): attempts by outcome, busy, deliveries, latency p50/p99,
    and keys lost / duplicated by the second they were meant to be sent."""
    sec = (F.col("start_ms") / 1000).cast("long")
    a = att.groupBy(sec.alias("t")).agg(
        F.count("*").alias("attempts"), F.sum((F.col("outcome") == "ok").cast("int")).alias("acked"),
        F.sum((F.col("outcome") == "error").cast("int")).alias("errors"),
        F.sum(F.col("outcome").isin("timeout", "no_outcome").cast("int")).alias("timeouts"),
        F.sum((F.col("code") == 2).cast("int")).alias("busy"),
        F.percentile_approx(F.when(F.col("outcome") == "ok", F.col("end_ms") - F.col("start_ms")), [0.5, 0.99], 1000)
        .alias("lat"),
        F.percentile_approx(F.when(F.col("outcome") == "ok", F.col("end_ms") - F.col("intended_ms")), [0.5, 0.99],
                            1000).alias("lat_i"))
    r = keys.where(F.col("first_receive_ms").isNotNull()).groupBy(
        (F.col("first_receive_ms") / 1000).cast("long").alias("t")).agg(F.count("*").alias("deliveries"))
    k = keys.where(F.col("first_intended_ms").isNotNull()).groupBy(
        (F.col("first_intended_ms") / 1000).cast("long").alias("t")).agg(
        F.sum((F.col("class") == "lost").cast("int")).alias("lost"),
        F.sum((F.col("class") == "duplicated").cast("int")).alias("duplicated"),
        F.sum((F.col("class") == "indeterminate").cast("int")).alias("indeterminate"))
    rows = a.join(r, "t", "full_outer").join(k, "t", "full_outer").orderBy("t").collect()
    out = []
    for x in rows:
        lat, lat_i = x["lat"] or [None, None], x["lat_i"] or [None, None]
        out.append({"t": int(x["t"]), "attempts": x["attempts"] or 0, "acked": x["acked"] or 0,
                    "errors": x["errors"] or 0, "timeouts": x["timeouts"] or 0, "busy": x["busy"] or 0,
                    "deliveries": x["deliveries"] or 0, "lost": x["lost"] or 0, "duplicated": x["duplicated"] or 0,
                    "indeterminate": x["indeterminate"] or 0, "send_p50_ms": lat[0], "send_p99_ms": lat[1],
                    "intended_p50_ms": lat_i[0], "intended_p99_ms": lat_i[1]})
    return out


def _windows(spark: SparkSession, att: DataFrame, keys: DataFrame, events: list[dict[str, Any]],
             series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per timeline event (not stage bookkeeping): keys by class meant to be sent inside the window,
    send latency inside it, the acked-rate drop against the 10 s before, and the time from the
    window's start until the rate is back to 90 % of that (RTO)."""
    out = []
    for i, e in enumerate(ev for ev in events if ev.get("kind") not in NOT_WINDOWS):
        s, t = int(e["start_ms"]), int(e.get("end_ms") or e["start_ms"])
        kw = keys.where((F.col("first_intended_ms") >= s) & (F.col("first_intended_ms") <= t))
        cls = {r["class"]: int(r["n"]) for r in kw.groupBy("class").agg(F.count("*").alias("n")).collect()}
        lat = _percentiles(att.where((F.col("start_ms") >= s) & (F.col("start_ms") <= t) & (F.col("outcome") == "ok"))
                           .withColumn("l", F.col("end_ms") - F.col("intended_ms")), "l")
        by_t = {r["t"]: r["acked"] for r in series}
        pre = [by_t.get(x, 0) for x in range(s // 1000 - 10, s // 1000)]
        pre_rate = sum(pre) / len(pre) if pre else 0.0
        during = [by_t.get(x, 0) for x in range(s // 1000, t // 1000 + 1)]
        rto = None  # first second after the window whose acked rate is back to 90 % of pre_rate
        if pre_rate > 0 and series:
            for x in range(t // 1000 + 1, series[-1]["t"] + 1):
                if by_t.get(x, 0) >= 0.9 * pre_rate:
                    rto = (x * 1000 - s) / 1000
                    break
        out.append({"id": e.get("params", {}).get("fault_id", f"{e['kind']}-{i}"), "kind": e["kind"],
                    "target": e.get("target"), "start_ms": s, "end_ms": t, "outcome": e.get("outcome"),
                    "keys_by_class": cls, "latency_from_intended_ms": lat,
                    "pre_rate": round(pre_rate, 1), "rate_during": round(sum(during) / len(during), 1) if during else None,
                    "throughput_drop": round(1 - (sum(during) / len(during)) / pre_rate, 3) if pre_rate and during else None,
                    "rto_s": rto})
    return out
