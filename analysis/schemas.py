"""Spark schemas of the ledgers (docs/ledgers.md). Explicit, so reading needs no inference pass; the
`_corrupt` column catches malformed records, which the job reports with file and position."""
from __future__ import annotations

from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

CORRUPT = "_corrupt"


def _s(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(n, t, True) for n, t in fields] + [StructField(CORRUPT, StringType(), True)])


SEND = _s(("rec", StringType()), ("run_id", StringType()), ("producer_id", StringType()),
          ("attempt_id", LongType()), ("key", StringType()), ("attempt", IntegerType()), ("topic", StringType()),
          ("policy", StringType()), ("intended_ms", LongType()), ("start_ms", LongType()), ("end_ms", LongType()),
          ("outcome", StringType()), ("status", StringType()), ("code", IntegerType()), ("remark", StringType()),
          ("error", StringType()), ("sent", BooleanType()), ("msg_id", StringType()),
          ("offset_msg_id", StringType()), ("broker", StringType()), ("queue_id", IntegerType()),
          ("queue_offset", LongType()), ("app_ok", BooleanType()))

RECEIVE = _s(("run_id", StringType()), ("key", StringType()), ("msg_id", StringType()),
             ("offset_msg_id", StringType()), ("topic", StringType()), ("origin_topic", StringType()),
             ("broker", StringType()), ("queue_id", IntegerType()), ("queue_offset", LongType()),
             ("reconsume_times", IntegerType()), ("consumer_id", StringType()), ("batch_size", IntegerType()),
             ("batch_index", IntegerType()), ("store_ms", LongType()), ("receive_ms", LongType()))


def used(schema: StructType, *names: str) -> StructType:
    """`schema` cut to the fields the analysis reads (plus `_corrupt`): the JSON reader then skips the
    rest without converting it."""
    return StructType([f for f in schema.fields if f.name in names or f.name == CORRUPT])


SEND_USED = used(SEND, "rec", "producer_id", "attempt_id", "key", "attempt", "topic", "intended_ms", "start_ms",
                 "end_ms", "outcome", "status", "code", "remark", "sent", "broker", "msg_id")
RECEIVE_USED = used(RECEIVE, "key", "msg_id", "origin_topic", "broker", "queue_id", "queue_offset",
                    "reconsume_times", "receive_ms")
