"""The PySpark reconciliation: every business key of the send ledger against the receive ledger.

Runs with `local[*]` by default and on any Spark master by configuration (`--master`, or
`spark-submit analysis/job.py RUN_DIR`). Nothing is collected to the driver in proportion to the
data: only per-class counts, per-code counts, per-second series (one row per second of the run)
and per-event aggregates come back. Rules: analysis/rules.py; outputs: docs/analysis.md.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import rules, schemas
from analysis.latency import PERCENTS, by_broker, pct_result as _pct_result  # noqa: F401  (PERCENTS: tests)
from analysis.latency import histogram as _histogram, percentiles as _percentiles
from rmqchaos.progress import say
from rmqchaos.seal import LedgerError, seal_closed  # noqa: F401  (LedgerError: what a malformed ledger raises)


NOT_WINDOWS = ("stage", "cluster_up", "check", "restart", "consumer_stop")  # bookkeeping (a fault restart has its own event)


_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


#: ledgers smaller than this are analyzed by a driver JVM that JIT-compiles with C1 only: a small
#: analysis is over before C2's compilations pay for their CPU (a 20 MB run, cold process, 2 cores:
#: 28.2 and 27.8 s against 32.9 and 35.9 s with both tiers, interleaved); large ones keep C2
C1_ONLY_BELOW_BYTES = 256 << 20


def spark_session(master: str | None = None, log_file: Path | None = None, small: bool = False) -> SparkSession:
    """A Spark session on `master` (default local[*] or $RMQCHAOS_SPARK_MASTER), listening on loopback.
    With `log_file`, Spark's own log (its log4j profile notice, NativeCodeLoader, ...) goes there, not
    to the terminal (it applies when this process starts its first session, as does `small`: the
    driver JVM's JIT tier, C1_ONLY_BELOW_BYTES)."""
    master = master or os.environ.get("RMQCHAOS_SPARK_MASTER", "local[*]")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver listens on loopback only
    # the throughput collector: the job is batch work, where G1's concurrent marking and barriers only
    # cost; at 30M rows `analyze` took 66.5 s against 73.3 s with G1 (three interleaved pairs)
    gc = "-XX:+UseParallelGC"
    java_opts = f"-Djava.net.preferIPv4Stack=true {gc}" + (" -XX:TieredStopAtLevel=1" if small else "")
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        conf = log_file.with_suffix(".log4j2.properties")
        conf.write_text(_LOG4J2.format(log=log_file))
        java_opts += f" -Dlog4j2.configurationFile=file:{conf}"
    b = (SparkSession.builder.appName("rmqchaos-analyze").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC")
         # 2 GiB: with local[*] the driver is the executor too; its hash aggregations then fit in
         # memory at ~1 GiB of journal per shuffle partition (at 1 GiB, 30M rows took ~5 % longer)
         .config("spark.driver.memory", os.environ.get("RMQCHAOS_SPARK_DRIVER_MEMORY", "2g"))
         .config("spark.driver.extraJavaOptions", java_opts)
         .config("spark.executor.extraJavaOptions", gc)  # a cluster's executors (local[*] runs in the driver)
         # the key join's sides are co-partitioned, each partition from ~1 GiB of ledger: hashing
         # the smaller side beats sorting both (measured ~1.2x on the key table)
         .config("spark.sql.join.preferSortMergeJoin", "false")
         # no broadcast the planner picks from file sizes: zstd Parquet of regular ledgers is tiny on
         # disk (30M rows: 10M msgIds from ~3 MB) and the broadcast ran the 1 GiB driver out of
         # memory; the joins that should broadcast say so (F.broadcast, BROADCAST_MAX rows)
         .config("spark.sql.autoBroadcastJoinThreshold", "-1")
         .config("spark.sql.adaptive.autoBroadcastJoinThreshold", "-1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    # one session per process, kept until the process exits: the analyses of a matrix run in one
    # process (`rmqchaos run a.yaml b.yaml`, dag.test()) pay Spark's start-up (~10 s here) once. A
    # different master or driver memory stops it first: getOrCreate() would hand back the live one.
    key = (master, os.environ.get("RMQCHAOS_SPARK_DRIVER_MEMORY", "2g"))
    old = _KEPT.get("session")
    if old is not None and old.sparkContext._jsc is not None:  # not stopped by someone since
        if _KEPT.get("key") == key:
            if log_file is not None:
                log_file.parent.mkdir(parents=True, exist_ok=True)
                with open(log_file, "a") as f:
                    f.write(f"(the Spark session of this process, started for {_KEPT['log']}: its log is there)\n")
            return old
        old.stop()
    if log_file is None:
        spark = b.getOrCreate()
    else:  # the JVM inherits this process's stdout/stderr when it starts: give it the log file instead
        with _fds_to(log_file):
            spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not _KEPT:
        atexit.register(_stop_kept)
    _KEPT.update(session=spark, key=key, log=str(log_file))
    return spark


_KEPT: dict[str, Any] = {}  # the process's session, what it was made for, where its log went


def _stop_kept() -> None:
    if _KEPT.get("session") is not None:
        try:
            _KEPT["session"].stop()
        except Exception:  # noqa: BLE001 - at exit: the JVM may be gone already
            pass
    _KEPT.clear()


@contextlib.contextmanager
def _fds_to(log_file: Path) -> Iterator[None]:
    """Point fds 1 and 2 at `log_file` while a child process is started (it keeps them), then back."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (fd, *saved):
            os.close(x)


# ---------------------------------------------------------------- reading: sealed ledgers only

def seal_all(files: list[Path], warnings: list[str], what: str = "send and receive") -> list[Path]:
    """Seal every journal that has no current sealed copy (a crashed writer's, or one sealed before
    it grew): the sealed paths, in the journals' order. A torn last record is a warning; a malformed
    record fails with its file and byte offset (rmqchaos/seal.py)."""
    done = seal_closed(files, what, strict=True)
    warnings.extend(x.warning for x in done if x.warning)
    return [x.path for x in done]


def _parquet(spark: SparkSession, files: list[Path], schema: Any) -> DataFrame:
    """The sealed ledgers, read with the explicit schema (no footer merge, no inference): Spark reads
    only the columns a pass uses."""
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*[str(f) for f in files])


def read_receive(spark: SparkSession, files: list[Path], warnings: list[str]) -> DataFrame:
    """The receive ledger's used columns, from the sealed copies of `files` (journals)."""
    return _parquet(spark, seal_all(files, warnings, "receive"), schemas.RECEIVE_USED)


def read_send(spark: SparkSession, files: list[Path], warnings: list[str]) -> DataFrame:
    """The send ledger's columns that the classification and the aggregates use (the remark cut to
    its `[PREFIX]`, the error text to its kind), from the sealed copies of `files` (journals). Nothing
    pairs an intent with its outcome; (producer_id, attempt_id) names an answered attempt in _answers."""
    # the regex only where there is a remark (most records have none): ~2x cheaper scans of the send ledger
    prefix = F.when(F.col("remark").isNotNull(),
                    F.nullif(F.regexp_extract("remark", rules.REMARK_PREFIX_REGEX, 1), F.lit("")))
    return _parquet(spark, seal_all(files, warnings, "send"), schemas.SEND_USED) \
        .select(*STAGED_SEND, prefix.alias("remark_prefix"), error_kind().alias("error_kind"))


def error_kind() -> Any:
    """A transport failure in a word, from the producer's error text (rmqclient/producer.py): what a
    person acts on differs between a refused connection, a dropped one and no route."""
    e = F.col("error")
    return (F.when(F.col("outcome") != "error", F.lit(None))
            .when(e.startswith("route lookup failed"), "route lookup failed")  # namesrv, not the broker
            .when(e.rlike("(?i)refused"), "connection refused")
            .when(e.startswith("connect to"), "connect failed")
            .when(e.rlike("(?i)closed|reset|broken pipe"), "connection lost")
            .when(e.isNotNull(), "transport error"))


# ---------------------------------------------------------------- classification

STAGED_SEND = ("rec", "producer_id", "attempt_id", "key", "topic", "intended_ms", "start_ms", "end_ms", "outcome",
               "status", "code", "sent", "broker", "msg_id", "msg_hi", "msg_lo")

# Send records, column by column. An intent and its outcome share key, producer_id, attempt_id,
# topic and start_ms, so nothing needs pairing them: a key's attempts are its intents; an attempt
# without outcome is one intent more than outcomes (per key, per second, in total).
def _is_intent() -> Any:
    return F.col("rec") == "intent"


def _is_outcome() -> Any:
    return F.col("rec") == "outcome"


def _acked() -> Any:
    return _is_outcome() & (F.col("outcome") == "ok")


def _rejected() -> Any:
    """A definite rejection (rules.DEFINITE_REJECT_CODES), or a request that never left the producer."""
    return _is_outcome() & (F.col("outcome") == "error") & (
        F.col("code").isin(*rules.DEFINITE_REJECT_CODES) | (F.col("code").isNull() & (F.col("sent") == F.lit(False))))


def _n(cond: Any) -> Any:
    return F.sum(cond.cast("long"))


RECV_KEYED = ("key", "origin_topic", "broker", "queue_id", "queue_offset", "receive_ms", "batch_index")


def key_table(send: DataFrame, recv: DataFrame, receive_complete: bool = True) -> DataFrame:
    """One row per key (attempted or received) with its class and duplicate causes. With the
    receive side incomplete, an acknowledged key never delivered is `undelivered_at_stop`, not
    `lost` (analysis/completeness.py)."""
    # Per (key, topic), then per key: only numeric aggregation buffers, so Spark hash-aggregates;
    # one shuffle by key on each side serves every aggregation and the join (measured: ~1.5x
    # faster than letting Spark shuffle by (key, topic) first, then by key). Each send record is
    # cut to its flags before the shuffle (fewer bytes shuffled than its text columns).
    # The msgIds ride along as the seal's numeric halves (msg_hi/msg_lo: exact, hash-aggregatable): a
    # key whose one answered attempt was delivered under its own msgId, and under no other, needs no
    # msgId join in _answers (`own_msgid_delivered`).
    outcome = _is_outcome()
    flags = send.select("key", "topic", _is_intent().cast("long").alias("i"), _acked().cast("int").alias("a"),
                        (_acked() & (F.col("status") == "SEND_OK")).cast("int").alias("s"),
                        _rejected().cast("long").alias("r"), "intended_ms", "start_ms",
                        outcome.cast("long").alias("o"), (outcome & F.col("msg_hi").isNotNull()).cast("long").alias("c"),
                        F.when(outcome, F.col("msg_hi")).alias("h"), F.when(outcome, F.col("msg_lo")).alias("l"))
    per_topic = flags.repartition("key").groupBy("key", "topic").agg(
        F.sum("i").alias("attempts"), F.max("a").alias("acked"), F.max("s").alias("acked_strong"),
        F.sum("r").alias("rejected"), F.min("intended_ms").alias("intended_ms"), F.min("start_ms").alias("start_ms"),
        F.sum("o").alias("o"), F.sum("c").alias("c"), F.min("h").alias("h"), F.min("l").alias("l"))
    sent = per_topic.groupBy("key").agg(
        F.sum("attempts").alias("attempts"), _n(F.col("attempts") > 0).alias("topics_attempted"),
        F.max("attempts").alias("max_attempts_per_topic"), F.max("acked").alias("acked"),
        F.max("acked_strong").alias("acked_strong"), F.sum("rejected").alias("rejected"),
        F.min("intended_ms").alias("first_intended_ms"), F.min("start_ms").alias("first_start_ms"),
        F.sum("o").alias("s_outcomes"), F.sum("c").alias("s_canonical"), F.min("h").alias("s_h"), F.min("l").alias("s_l"),
    ).where(F.col("attempts") > 0).withColumn(
        "all_rejected", (F.col("rejected") == F.col("attempts")).cast("int")).drop("rejected")
    # Distinct copies and topics per key by aggregating twice (cheaper than countDistinct's expand):
    # first per (key, stored copy), then per key. Retry deliveries are copies of their own (%RETRY%).
    nonretry = F.col("reconsume_times") == 0
    msg = [F.min("h").alias("h0"), F.max("h").alias("h1"), F.min("l").alias("l0"), F.max("l").alias("l1")]
    msg_again = [F.min("h0").alias("h0"), F.max("h1").alias("h1"), F.min("l0").alias("l0"), F.max("l1").alias("l1")]
    per_copy = recv.select(*RECV_KEYED, nonretry.alias("nr"), F.col("msg_hi").alias("h"), F.col("msg_lo").alias("l")) \
        .repartition("key").groupBy("key", "origin_topic", "broker", "queue_id", "queue_offset", "nr").agg(
        F.count("*").alias("n"), F.min("receive_ms").alias("rm"), F.max("batch_index").alias("bi"),
        F.count("h").alias("dm"), *msg)
    per_topic = per_copy.groupBy("key", "origin_topic", "nr").agg(
        F.sum("n").alias("n"), F.count("*").alias("copies"), F.min("rm").alias("rm"), F.max("bi").alias("bi"),
        F.sum("dm").alias("dm"), *msg_again)
    got = per_topic.groupBy("key").agg(F.sum("dm").alias("r_canonical"), *msg_again,
        F.sum("n").alias("deliveries"),
        F.sum(F.when(~F.col("nr"), F.col("n")).otherwise(0)).alias("retry_deliveries"),
        F.sum(F.when(F.col("nr"), F.col("n")).otherwise(0)).alias("first_deliveries"),
        F.sum(F.col("nr").cast("int")).alias("topics_received"),
        F.sum(F.when(F.col("nr"), F.col("copies")).otherwise(0)).alias("copies"),
        F.min("rm").alias("first_receive_ms"),
        # the highest place the key had in a listener batch of a first-hand delivery (a re-pull after
        # a rebalance delivers it first-hand again): an SDK that acks only index 0 (incident 004)
        # sends back exactly the keys that were once at 1..n-1
        F.max(F.when(F.col("nr"), F.col("bi"))).alias("first_batch_index"))
    k = sent.join(got, "key", "full_outer").fillna(0, subset=["deliveries", "retry_deliveries", "first_deliveries",
                                                              "topics_received", "copies"])
    d = F.col("deliveries")
    cls = (F.when(F.col("attempts").isNull(), "unexpected")
           .when(d > 1, "duplicated")
           .when((d == 1) & (F.col("acked") == 1), "ok")
           .when(d == 1, "recovered")
           .when(F.col("acked") == 1, "lost" if receive_complete else "undelivered_at_stop")
           .when(F.col("all_rejected") == 1, "failed")
           .otherwise("indeterminate"))
    own = ((F.col("s_outcomes") == 1) & (F.col("s_canonical") == 1) & (d > 0) & (F.col("r_canonical") == d)
           & (F.col("h0") == F.col("s_h")) & (F.col("h1") == F.col("s_h"))
           & (F.col("l0") == F.col("s_l")) & (F.col("l1") == F.col("s_l")))
    k = k.withColumn("class", cls).withColumn("own_msgid_delivered", F.coalesce(own, F.lit(False)).cast("int")).drop(
        "s_outcomes", "s_canonical", "s_h", "s_l", "r_canonical", "h0", "h1", "l0", "l1")
    dup = F.col("class") == "duplicated"
    has_first = F.col("first_deliveries") > 0
    extra_copies = F.col("copies") - F.col("topics_received")
    resent_same_topic = F.coalesce(F.col("max_attempts_per_topic"), F.lit(0)) > 1
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

def shuffle_partitions(files: list[Path]) -> int:
    """Shuffle partitions for this input: one per ~1 GiB of ledger JSON (a partition's hash tables
    stay bounded at any scale: ~1M keys each), at least 4 (adaptive execution merges small ones).
    Measured at 30M rows on 2 cores: 12 partitions took 78.6 s, 30 took 79.9 s, 91 (one per 128 MiB)
    ~84 s and 240 took 92.2 s: fewer, larger tasks pay less per-task and per-block overhead."""
    total = sum(f.stat().st_size for f in files)
    return max(4, min(2000, total // (1 << 30) + 1))


def analyze_ledgers(spark: SparkSession, send_files: list[Path], recv_files: list[Path],
                    events: list[dict[str, Any]], out_dir: Path | None = None,
                    receive_complete: bool = True, store: Any = None) -> dict[str, Any]:
    """The reconciliation proper; returns the `counts`, `errors`, `latency_ms`, `series`, `windows`
    parts of summary.json. With out_dir, writes keys.parquet and series.parquet there. With `store`
    (cluster/store.py's, over the run's broker stores), lost and indeterminate keys are looked up in it.

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
        step("ledgers sealed")
        w = key_table(send, recv, receive_complete).write.mode("overwrite")
        for c in KEYS_NO_DICTIONARY:
            w = w.option(f"parquet.enable.dictionary#{c}", "false")
        w.parquet(str(work / "keys.parquet"))
        keys = spark.read.parquet(str(work / "keys.parquet"))
        step("keys classified")
        groups, answer_totals = answer_groups(send, warnings)
        res = _aggregate(spark, send, keys, events, groups, warnings)
        step("counts, errors, latency, series, windows")
        res["corrupted_by_kind"], res["corrupted"], res["unexpected_examples"] = _corrupted(
            send, keys, recv, res["counts"]["unexpected_deliveries"])
        res["counts"]["corrupted_deliveries"] = sum(res["corrupted_by_kind"].values())
        step("damaged deliveries by kind")
        res["store_check"] = store_check(send, keys, store, warnings) if store is not None else None
        if store is not None:
            step(f"{res['store_check']['checked']} lost or indeterminate keys looked up in the brokers' stores")
        res["answers"] = _answers(send, recv, keys, res["counts"]["duplicated"], answer_totals)
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
ERROR_GROUPS_MAX = 100_000  # distinct (outcome, status, code, prefix, broker, answer) combinations brought back


def _aggregate(spark: SparkSession, send: DataFrame, keys: DataFrame, events: list[dict[str, Any]],
               answer_rows: list[Any], warnings: list[str]) -> dict[str, Any]:
    """Counts, errors, latency, series and windows: a few column scans, nothing brought back to the
    driver in proportion to the data (per key class, per error kind, per second, per event). Every
    event window is a few more columns of the key and send aggregations, not scans of its own."""
    wins = _window_events(events)
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
        *[F.count(F.when(_between("first_intended_ms", s, t) & (F.col("class") == c), 1)).alias(f"w{i}_{c}")
          for i, (_, s, t) in enumerate(wins) for c in win_classes],
    ).collect()[0].asDict()
    ok = _acked()
    per_second = _per_second(send)
    # latency: exact percentiles from one histogram per second of the acked attempts' start (the
    # series reads it per second, the totals summed over seconds) and one of the keys' end to end
    hist = _histogram(send.where(ok), {
        "send": F.col("end_ms") - F.col("start_ms"), "intended": F.col("end_ms") - F.col("intended_ms"),
        **{f"w{i}": F.when(_between("start_ms", s, t), F.col("end_ms") - F.col("intended_ms"))
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
    series = _series(per_second, keys, lat_by_second)
    windows = _windows(wins, series,
                       [{c: int(agg[f"w{i}_{c}"]) for c in win_classes if agg[f"w{i}_{c}"]} for i in range(len(wins))],
                       [_pct_result(lat, (0, f"w{i}")) for i in range(len(wins))])
    for w, b in zip(windows, by_broker(send.where(ok), wins)):
        w["send_ms_by_broker"] = b
    retried = {n: int(agg[f"retried_{n}"] or 0) for n in ("first_in_batch", "later_in_batch", "never_first")}
    return {"counts": counts, "duplicates_by_cause": dup_causes, "duplicated_keys_by_send_outcome": dup_by_send,
            "retried_keys_by_batch_position": retried,
            "errors": _errors(answer_rows, counts["no_outcome"]), "latency_ms": latency, "series": series, "windows": windows,
            "busy_series": per_second["busy"], "warnings": warnings}


def _between(col: str, s: int, t: int) -> Any:
    return (F.col(col) >= s) & (F.col(col) <= t)


def answer_groups(send: DataFrame, warnings: list[str]) -> tuple[list[Any], dict[str, int] | None]:
    """One grouping of the outcome records by (outcome, status, code, remark prefix, broker, answer):
    its rows (distinct kinds of answer, not attempts; _errors sums them up), and the attempts per
    answer (answer_label) summed from the same rows — None when there were more than
    ERROR_GROUPS_MAX kinds (the rows then cover only some; _answers counts apart, exactly)."""
    rows = (send.where(_is_outcome()).groupBy("outcome", "status", "code", "remark_prefix", "broker", answer_label())
            .agg(F.count("*").alias("n")).limit(ERROR_GROUPS_MAX + 1).collect())
    if len(rows) > ERROR_GROUPS_MAX:
        warnings.append(f"more than {ERROR_GROUPS_MAX} kinds of answer; error counts cover the first {ERROR_GROUPS_MAX}")
        return rows[:ERROR_GROUPS_MAX], None
    totals: collections.Counter[str] = collections.Counter()
    for r in rows:
        totals[r["answer"]] += int(r["n"])
    return rows, dict(totals)


def _errors(rows: list[Any], no_outcome: int) -> dict[str, dict[str, int]]:
    """Attempts by outcome (`no_outcome`: intents without one), send status (stored ones), response
    code, remark prefix and broker, summed from answer_groups' rows."""
    maps: dict[str, collections.Counter[str]] = {m: collections.Counter() for m in
                                                 ("by_outcome", "by_status", "by_code", "by_remark_prefix", "by_broker")}
    for r in rows:
        n = int(r["n"])
        maps["by_outcome"][r["outcome"]] += n
        if r["outcome"] == "ok":
            maps["by_status"][str(r["status"])] += n
        if r["code"] is not None:
            maps["by_code"][str(r["code"])] += n
        if r["remark_prefix"]:
            maps["by_remark_prefix"][r["remark_prefix"]] += n
        if r["broker"] is not None:
            maps["by_broker"][f"{r['broker']} {r['outcome']}"] += n
    if no_outcome:
        maps["by_outcome"]["no_outcome"] += no_outcome
    return {m: dict(c.most_common(200)) for m, c in maps.items()}


def answer_label() -> Any:
    """What an outcome record says, in a word: a busy answer's text prefix, a stored answer's status,
    another rejection's code, or the outcome (timeout; error without code = transport)."""
    return (F.when(F.col("code") == 2, F.coalesce(F.col("remark_prefix"), F.lit("code 2")))
            .when(F.col("outcome") == "ok", F.col("status"))
            .when(F.col("code").isNotNull(), F.concat(F.lit("code "), F.col("code").cast("string")))
            .when(F.col("outcome") == "error", F.coalesce(F.col("error_kind"), F.lit("transport error")))
            .otherwise(F.col("outcome"))).alias("answer")


def _answers(send: DataFrame, recv: DataFrame, keys: DataFrame, n_dup: int,
             totals: dict[str, int] | None) -> list[dict[str, Any]]:
    """Per kind of answer: attempts that got it, how many of them were stored all the same, and the
    duplicated keys whose first attempt got it (and of those, whose first attempt was stored).
    Exact, not inferred: every attempt carries a fresh UNIQ_KEY (rmqclient), which the consumer
    records as msgId, so an attempt was stored iff its own msgId was delivered (a batch's attempt:
    iff any of its msgIds was). Attempts without an outcome record are not here (no answer).

    Most keys need no matching here: the key table already knows the keys whose one answered attempt
    was delivered under its own msgId (`own_msgid_delivered`; stored). Only the other keys' attempts,
    and the duplicated keys' (for their first answers), are matched with the delivered msgIds: a
    broadcast of those keys while they are few (PATH_BROADCAST_MAX), a shuffle beyond."""
    label = answer_label()
    outcomes = send.where(_is_outcome())
    if totals is None:  # answer_groups had too many kinds to sum them all
        totals = {r["answer"]: int(r["n"]) for r in outcomes.groupBy(label).agg(F.count("*").alias("n")).collect()}
    rest = keys.where(F.col("attempts").isNotNull()
                      & ((F.col("own_msgid_delivered") == 0) | (F.col("class") == "duplicated"))).select("key")
    n_rest = int(rest.count())
    out = {a: {"answer": a, "attempts": n, "stored": n, "dup_keys_first_answer": 0, "dup_keys_first_stored": 0}
           for a, n in totals.items()}  # until matched below, every attempt is one of an own-msgId key: stored
    if n_rest:
        small = F.broadcast if n_rest <= PATH_BROADCAST_MAX else (lambda df: df.hint("shuffle_hash"))
        # one row per msgId of an attempt (a batch has several); (producer_id, attempt_id) names the attempt.
        # Both kept until the last grouping, on disk: in memory they competed with the broadcasts, were
        # evicted and recomputed (a scan of the send ledger each time)
        att = (outcomes.join(small(rest), "key", "left_semi")
               .select("key", "producer_id", "attempt_id", "start_ms", label,
                       F.explode_outer(F.split("msg_id", ",")).alias("msg_id"))).persist(StorageLevel.DISK_ONLY)
        matched: DataFrame | None = None
        try:
            ids = att.where(F.col("msg_id").isNotNull()).select("msg_id")
            few_ids = ids.count() <= PATH_BROADCAST_MAX
            delivered = (recv.where(F.col("msg_id").isNotNull()).select("msg_id")
                         .join(F.broadcast(ids) if few_ids else ids.hint("shuffle_hash"), "msg_id", "left_semi")
                         .distinct().withColumn("stored", F.lit(1)))
            matched = (att.join(delivered, "msg_id", "left").repartition("key")
                       .groupBy("key", "producer_id", "attempt_id", "start_ms", "answer")
                       .agg(F.max(F.coalesce("stored", F.lit(0))).alias("stored"))).persist(StorageLevel.DISK_ONLY)
            dup = keys.where(F.col("class") == "duplicated").select("key")
            rows = matched.groupBy("answer").agg(F.lit(False).alias("dup"), F.count("*").alias("n"),
                                                 F.sum("stored").alias("stored")).collect()
            rows += (matched.join(F.broadcast(dup) if n_dup <= BROADCAST_MAX else dup.hint("shuffle_hash"), "key",
                                  "left_semi")
                     .groupBy("key").agg(F.min(F.struct("start_ms", "answer", "stored")).alias("first"))
                     .groupBy(F.col("first.answer").alias("answer"))
                     .agg(F.lit(True).alias("dup"), F.count("*").alias("n"), F.sum("first.stored").alias("stored"))
                     .collect())
        finally:
            for df in (matched, att):
                if df is not None:
                    df.unpersist()
        for r in rows:
            row = out[r["answer"]]
            if r["dup"]:
                row["dup_keys_first_answer"], row["dup_keys_first_stored"] = int(r["n"]), int(r["stored"] or 0)
            else:  # these attempts were counted as stored above: as they were matched, instead
                row["stored"] += int(r["stored"] or 0) - int(r["n"])
    return sorted(out.values(), key=lambda r: -r["attempts"])


BROADCAST_MAX = 100_000  # rows up to which the small side of a join is broadcast
PATH_BROADCAST_MAX = 2_000_000  # keys (or msgIds) to match by msgId up to which they are broadcast (~100 MB)
CORRUPTED_KINDS = ("properties_damaged", "body_damaged", "msgid_only")
CORRUPTED_EXAMPLES = 20  # listed per kind


def attribute(recv: DataFrame) -> DataFrame:
    """Each delivery under the key its intact self-verifying body names (rmqchaos/body.py), else its
    KEYS property (kept as `prop_key`): a copy whose properties were damaged still counts for its key."""
    return (recv.withColumn("prop_key", F.col("key"))
            .withColumn("key", F.when(F.col("body_ok") == F.lit(True), F.col("body_key")).otherwise(F.col("key"))))


def _corrupted(send: DataFrame, keys: DataFrame, recv: DataFrame, n_unexpected: int
               ) -> tuple[dict[str, int], list[dict[str, Any]], list[dict[str, Any]]]:
    """Damaged deliveries by kind, and up to CORRUPTED_EXAMPLES of each with where they were read from:
    - properties_damaged: the body is intact but the KEYS property is missing or names another key
      (attributed to the body's key); seen after an OOM kill: a copy whose tail the kill cut;
    - body_damaged: a self-verifying body that fails its checksum;
    - msgid_only: no verifiable body, a key never attempted, but the msgId (UNIQ_KEY) of a sent
      message (only the unexpected deliveries' msgIds are looked up among the sent ones).
    Also up to CORRUPTED_EXAMPLES deliveries of keys never attempted (`n_unexpected` deliveries).
    The receive ledger is read once: its few odd deliveries (damaged or unexpected) are kept and
    everything here is counted and listed from them."""
    cols = ["key", "prop_key", "body_key", "msg_id", "broker", "queue_id", "queue_offset", "receive_ms"]
    conds = {"properties_damaged": (F.col("body_ok") == F.lit(True)) & ~F.col("prop_key").eqNullSafe(F.col("body_key")),
             "body_damaged": F.col("body_ok") == F.lit(False)}
    small = (lambda df: F.broadcast(df)) if n_unexpected <= BROADCAST_MAX else (lambda df: df)
    if n_unexpected:
        unexp = keys.where(F.col("class") == "unexpected").select("key", F.lit(True).alias("unexpected"))
        flagged = recv.join(small(unexp), "key", "left")
    else:
        flagged = recv.withColumn("unexpected", F.lit(None).cast("boolean"))
    odd = flagged.where(conds["properties_damaged"] | conds["body_damaged"] | F.col("unexpected")).persist()
    try:
        n = odd.agg(*[_n(c).alias(k) for k, c in conds.items()]).collect()[0]
        counts, examples = {k: int(n[k] or 0) for k in conds}, []
        for kind, c in conds.items():
            if counts[kind]:
                examples += [{"kind": kind, **r.asDict()} for r in odd.where(c).select(*cols).limit(CORRUPTED_EXAMPLES).collect()]
        counts["msgid_only"] = 0
        unexpected: list[dict[str, Any]] = []
        if n_unexpected:
            bad_recv = odd.where(F.col("unexpected"))
            unexpected = [r.asDict() for r in bad_recv.select(
                "key", "prop_key", "body_key", "body_ok", "msg_id", "origin_topic", "broker", "queue_id", "queue_offset",
                "receive_ms").limit(CORRUPTED_EXAMPLES).collect()]
            ids = bad_recv.select("msg_id").where(F.col("msg_id").isNotNull()).distinct()
            sent = (send.where(_is_outcome() & F.col("msg_id").isNotNull()).join(small(ids), "msg_id", "left_semi")
                    .select("msg_id", F.col("key").alias("sent_key"), F.col("outcome").alias("sent_outcome"))
                    .dropDuplicates(["msg_id"]))
            bad = bad_recv.join(sent, "msg_id").select(*cols, "sent_key", "sent_outcome").persist()
            try:
                counts["msgid_only"] = int(bad.count())
                examples += [{"kind": "msgid_only", **r.asDict()} for r in bad.limit(CORRUPTED_EXAMPLES).collect()]
            finally:
                bad.unpersist()
    finally:
        odd.unpersist()
    for e in examples:
        e["damage"] = _damage(e)
    return counts, examples, unexpected


def _damage(e: dict[str, Any]) -> str:
    """What was damaged in one corrupted delivery, in words."""
    if e["kind"] == "properties_damaged":
        return ("KEYS property missing" if e["prop_key"] is None else f"KEYS property reads {e['prop_key']!r}") + \
            f"; the intact body names {e['body_key']!r}"
    if e["kind"] == "body_damaged":
        return "body fails its checksum" + (f" (its header names {e['body_key']!r})" if e["body_key"] else "")
    return (f"KEYS property reads {e['prop_key']!r}; its msgId is that of the {e.get('sent_outcome')} send of "
            f"{e.get('sent_key')!r} (no verifiable body)")


STORE_LOOKUP_MAX = 100_000  # keys looked up in the brokers' stores per run
STORE_EXAMPLES = 50


def store_check(send: DataFrame, keys: DataFrame, store: Any, warnings: list[str]) -> dict[str, Any]:
    """Every lost and indeterminate key looked up in the brokers' stores (`store.find(topic, key)`,
    cluster/store.py): lost -> lost_from_store (in no commit log) or lost_in_delivery (stored, never
    delivered); indeterminate -> indeterminate_stored (the unanswered send was stored after all and
    never delivered) or indeterminate_not_stored. Bounded by the number of such keys."""
    t0 = time.monotonic()
    targets = keys.where(F.col("class").isin("lost", "indeterminate")).select("key", "class")
    n = int(targets.count())
    if n > STORE_LOOKUP_MAX:
        warnings.append(f"{n} lost or indeterminate keys: only {STORE_LOOKUP_MAX} were looked up in the store")
        targets = targets.limit(STORE_LOOKUP_MAX)
    small = F.broadcast(targets) if n <= BROADCAST_MAX else targets
    rows = (send.where(_is_intent()).join(small, "key").groupBy("key", "class")
            .agg(F.collect_set("topic").alias("topics")).collect()) if n else []
    split = {"lost_from_store": 0, "lost_in_delivery": 0, "indeterminate_stored": 0, "indeterminate_not_stored": 0}
    stored: list[dict[str, Any]] = []
    absent: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: r["key"]):
        locs = [loc for t in sorted(r["topics"]) for loc in store.find(t, r["key"])]
        verdict = {("lost", True): "lost_in_delivery", ("lost", False): "lost_from_store",
                   ("indeterminate", True): "indeterminate_stored",
                   ("indeterminate", False): "indeterminate_not_stored"}[(r["class"], bool(locs))]
        split[verdict] += 1
        (stored if locs else absent).append({"key": r["key"], "class": r["class"], "verdict": verdict,
                                             "topics": sorted(r["topics"]), "stored_at": locs})
    return {"checked": len(rows), **split, "nodes": store.nodes(), "method": store.method(),
            "seconds": round(time.monotonic() - t0, 3),
            "examples": (stored + [a for a in absent if a["class"] == "lost"])[:STORE_EXAMPLES]}


def _series(per_second: dict[str, Any], keys: DataFrame,
            latency: dict[tuple[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Per 1 s bucket (epoch seconds) of the attempt start: attempts by outcome (timeouts include
    attempts without outcome), busy, deliveries, latency p50/p99, and keys lost / duplicated by the
    second they were meant to be sent. `per_second`: _per_second's; `latency`: _percentiles per
    (second, "send" | "intended")."""
    r = keys.where(F.col("first_receive_ms").isNotNull()).groupBy(
        (F.col("first_receive_ms") / 1000).cast("long").alias("t")).agg(F.count("*").alias("deliveries"))
    k = keys.where(F.col("first_intended_ms").isNotNull()).groupBy(
        (F.col("first_intended_ms") / 1000).cast("long").alias("t")).agg(
        F.sum((F.col("class") == "lost").cast("int")).alias("lost"),
        F.sum((F.col("class") == "duplicated").cast("int")).alias("duplicated"),
        F.sum((F.col("class") == "indeterminate").cast("int")).alias("indeterminate"))
    by_t: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    for x in r.join(k, "t", "full_outer").collect():
        by_t[int(x["t"])].update(deliveries=x["deliveries"] or 0, lost=x["lost"] or 0,
                                 duplicated=x["duplicated"] or 0, indeterminate=x["indeterminate"] or 0)
    for t, a in per_second["send"].items():
        if t is not None:
            by_t[t].update(a)
    out = []
    for t in sorted(by_t):
        x = by_t[t]
        lat, lat_i = latency.get((t, "send"), {}), latency.get((t, "intended"), {})
        out.append({"t": t, "attempts": x.get("attempts", 0), "acked": x.get("acked", 0), "errors": x.get("errors", 0),
                    # an attempt without an outcome record counts as a timeout
                    "timeouts": x.get("timeouts", 0) + x.get("attempts", 0) - x.get("outcomes", 0),
                    "busy": x.get("busy", 0), "deliveries": x.get("deliveries", 0), "lost": x.get("lost", 0),
                    "duplicated": x.get("duplicated", 0), "indeterminate": x.get("indeterminate", 0),
                    "send_p50_ms": lat.get("p50"), "send_p99_ms": lat.get("p99"),
                    "intended_p50_ms": lat_i.get("p50"), "intended_p99_ms": lat_i.get("p99"),
                    "acked_by_broker": per_second["acked_by_broker"].get(t, {})})
    return out


def _per_second(send: DataFrame) -> dict[str, Any]:
    """One grouping of the send ledger by second of the attempt's start, kind of record, the broker of
    an acked send and the text prefix of a busy answer (few rows: seconds x kinds x brokers x prefixes):
    - `send`: {t: {attempts, outcomes, acked, errors, timeouts, busy}} (the series' send columns, and
      summed, the run's attempts and outcome records);
    - `acked_by_broker`: where the acked sends went (a broker out of the route stops getting any),
      {t: {broker: n}};
    - `busy`: busy answers (code 2) per text prefix, {prefix: [[t, n]]}."""
    acked, out_is = _acked(), _is_outcome()
    busy = out_is & (F.col("code") == 2)
    kind = (F.when(_is_intent(), "attempts").when(acked, "acked").when(out_is & (F.col("outcome") == "error"), "errors")
            .when(out_is & (F.col("outcome") == "timeout"), "timeouts").when(out_is, "other"))
    rows = (send.groupBy((F.col("start_ms") / 1000).cast("long").alias("t"), kind.alias("kind"),
                         F.when(acked, F.coalesce("broker", F.lit("?"))).alias("b"),
                         F.when(busy, F.coalesce("remark_prefix", F.lit("code 2"))).alias("p"))
            .agg(F.count("*").alias("n")).collect())
    per_t: dict[int | None, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_broker: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_prefix: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for r in rows:  # t None: a record without start_ms, counted in the totals, in no second
        t, n = (None if r["t"] is None else int(r["t"])), int(r["n"])
        c = per_t[t]
        c[r["kind"]] += n
        if r["kind"] != "attempts":
            c["outcomes"] += n
        if r["p"] is not None:
            c["busy"] += n
        if t is None:
            continue
        if r["b"] is not None:
            by_broker[t][r["b"]] += n
        if r["p"] is not None:
            by_prefix[r["p"]][t] += n
    return {"send": {t: {k: c[k] for k in ("attempts", "outcomes", "acked", "errors", "timeouts", "busy")}
                     for t, c in per_t.items()},
            "acked_by_broker": {t: dict(c) for t, c in by_broker.items()},
            "busy": {p: [[t, n] for t, n in sorted(c.items())] for p, c in sorted(by_prefix.items())}}


def _window_events(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
    """The timeline events that open a window (not stage bookkeeping), each with its start and end ms."""
    return [(e, int(e["start_ms"]), int(e.get("end_ms") or e["start_ms"])) for e in events
            if e.get("kind") not in NOT_WINDOWS]


def _windows(wins: list[tuple[dict[str, Any], int, int]], series: list[dict[str, Any]],
             classes: list[dict[str, int]], latency: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per timeline event (not stage bookkeeping): keys by class meant to be sent inside the window
    (`classes`), send latency from intended inside it (`latency`), the acked-rate drop against the
    10 s before, and the time from the window's start until the rate is back to 90 % of that (RTO)."""
    out = []
    by_t = {r["t"]: r["acked"] for r in series}
    for i, (e, s, t) in enumerate(wins):
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
                    "keys_by_class": classes[i], "latency_from_intended_ms": latency[i],
                    "pre_rate": round(pre_rate, 1), "rate_during": round(sum(during) / len(during), 1) if during else None,
                    "throughput_drop": round(1 - (sum(during) / len(during)) / pre_rate, 3) if pre_rate and during else None,
                    "rto_s": rto})
    return out
