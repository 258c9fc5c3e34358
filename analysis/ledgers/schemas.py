"""Spark schemas of the ledgers, derived from the one schema source (rmqchaos/ledger/schema.py). Explicit,
so reading needs no inference pass; the `_corrupt` column catches malformed records, which the job
reports with file and position."""
from __future__ import annotations

from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from rmqchaos.ledger.schema import RECEIVE_FIELDS, SEALED_EXTRA, SEND_FIELDS, TXN_FIELDS

CORRUPT = "_corrupt"
_SPARK = {"string": StringType(), "int": IntegerType(), "long": LongType(), "bool": BooleanType()}


def _s(fields: tuple[tuple[str, str], ...]) -> StructType:
    return StructType([StructField(n, _SPARK[t], True) for n, t in fields] + [StructField(CORRUPT, StringType(), True)])


SEND = _s(SEND_FIELDS + SEALED_EXTRA)  # the sealed copies' columns
RECEIVE = _s(RECEIVE_FIELDS + SEALED_EXTRA)
TXN = _s(TXN_FIELDS)


def used(schema: StructType, *names: str) -> StructType:
    """`schema` cut to the fields the analysis reads (plus `_corrupt`): the JSON reader then skips the
    rest without converting it."""
    missing = set(names) - {f.name for f in schema.fields}
    if missing:
        raise KeyError(f"not in the ledger schema: {sorted(missing)}")
    return StructType([f for f in schema.fields if f.name in names or f.name == CORRUPT])


SEND_USED = used(SEND, "rec", "producer_id", "attempt_id", "key", "attempt", "topic", "intended_ms", "start_ms",
                 "end_ms", "outcome", "status", "code", "remark", "error", "sent", "broker", "msg_id", "msg_hi", "msg_lo",
                 "offset_msg_id", "queue_id", "queue_offset")
RECEIVE_USED = used(RECEIVE, "key", "msg_id", "msg_hi", "msg_lo", "origin_topic", "broker", "queue_id", "queue_offset",
                    "reconsume_times", "batch_index", "receive_ms", "body_key", "body_ok",
                    # read by the failover analysis only (its stale reads, who served a redelivery);
                    # Spark prunes them elsewhere
                    "offset_msg_id", "store_ms", "served_by",
                    # POP through the proxy (analysis/contracts/pop.py)
                    "receipt_handle", "ack", "ack_ms", "ack_error", "change", "delivery_attempt")
