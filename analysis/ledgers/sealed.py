"""What the analysis reads of a run's ledgers: the sealed Parquet copies only (sealing first what a
crashed writer left unsealed), the columns the passes use, and each delivery under the key it counts for."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.ledgers import rules, schemas, sends
from rmqchaos.ledger.seal import seal_closed

STAGED_SEND = ("rec", "producer_id", "attempt_id", "key", "attempt", "topic", "intended_ms", "start_ms", "end_ms", "outcome",
               "status", "code", "sent", "broker", "msg_id", "msg_hi", "msg_lo", "offset_msg_id",
               "queue_id", "queue_offset")  # the last two: analysis/durability/offsets.py only; pruned elsewhere


def seal_all(files: list[Path], warnings: list[str], what: str = "send and receive") -> list[Path]:
    """Seal every journal that has no current sealed copy (a crashed writer's, or one sealed before
    it grew): the sealed paths, in the journals' order. A torn last record is a warning; a malformed
    record fails with its file and byte offset (rmqchaos/ledger/seal.py)."""
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


def read_txn(spark: SparkSession, files: list[Path], warnings: list[str]) -> DataFrame:
    """The transaction ledger (rmqchaos/ledger/schema.py TXN_FIELDS), from the sealed copies of `files`."""
    return _parquet(spark, seal_all(files, warnings, "transaction"), schemas.TXN)


def read_send(spark: SparkSession, files: list[Path], warnings: list[str]) -> DataFrame:
    """The send ledger's columns that the classification and the aggregates use (the remark cut to
    its `[PREFIX]`, the error text to its kind), from the sealed copies of `files` (journals). Nothing
    pairs an intent with its outcome; (producer_id, attempt_id) names an answered attempt in analysis/reconcile/answers.py."""
    # the regex only where there is a remark (most records have none): ~2x cheaper scans of the send ledger
    prefix = F.when(F.col("remark").isNotNull(),
                    F.nullif(F.regexp_extract("remark", rules.REMARK_PREFIX_REGEX, 1), F.lit("")))
    return _parquet(spark, seal_all(files, warnings, "send"), schemas.SEND_USED) \
        .select(*STAGED_SEND, prefix.alias("remark_prefix"), sends.error_kind().alias("error_kind"))


def attribute(recv: DataFrame) -> DataFrame:
    """Each delivery under the key its intact self-verifying body names (rmqchaos/ledger/body.py), else its
    KEYS property (kept as `prop_key`): a copy whose properties were damaged still counts for its key."""
    return (recv.withColumn("prop_key", F.col("key"))
            .withColumn("key", F.when(F.col("body_ok") == F.lit(True), F.col("body_key")).otherwise(F.col("key"))))
