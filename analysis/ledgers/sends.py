"""What a send record says, column by column: intent or outcome, acknowledged, definitely rejected,
the kind of a transport failure; and counting the rows where a condition holds."""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from analysis.ledgers import rules

# Send records, column by column. An intent and its outcome share key, producer_id, attempt_id,
# topic and start_ms, so nothing needs pairing them: a key's attempts are its intents; an attempt
# without outcome is one intent more than outcomes (per key, per second, in total).
def is_intent() -> Any:
    return F.col("rec") == "intent"


def is_outcome() -> Any:
    return F.col("rec") == "outcome"


def acked() -> Any:
    return is_outcome() & (F.col("outcome") == "ok")


def acked_at() -> Any:
    """Where an acknowledged send went: its broker; a gRPC receipt names none (the proxy's receipt
    carries no broker, docs/grpc.md), so "proxy": the latency a link to the proxy adds shows there."""
    return F.coalesce("broker", F.lit("proxy"))


def rejected() -> Any:
    """A definite rejection (rules.DEFINITE_REJECT_CODES), or a request that never left the producer."""
    return is_outcome() & (F.col("outcome") == "error") & (
        F.col("code").isin(*rules.DEFINITE_REJECT_CODES) | (F.col("code").isNull() & (F.col("sent") == F.lit(False))))


def refused() -> Any:
    """An attempt the client refused before anything left the host: the remoting producer never chose a
    broker for it (rmqclient/producer.py `queue_or_fail`, loadgen/context.py `_pinned_queue`), so
    `sent` false and `broker` null; a failed connection or a dropped one names the broker it tried
    (docs/ledgers.md). Not on the gRPC ledger: it never names a broker, so there these rows are its
    failed connections to the proxy (analysis/reconcile/pace.py sets them apart by the load's client)."""
    return is_outcome() & (F.col("sent") == F.lit(False)) & F.col("broker").isNull()


def refusal_kind() -> Any:
    """Why the client refused (of a `refused()` row), in a word, from what the producer wrote."""
    k = F.col("error_kind")  # the staged send ledger keeps the error's kind, not its text (analysis/ledgers/sealed.py)
    return (F.when(k.isin("no writable queue", "the key's queue is not in the route"), k)  # code 17 too: first
            .when(F.col("code") == 17, "no route")  # namesrv's own answer: it routes no such topic
            .otherwise("route lookup failed"))  # namesrv could not be asked


def count_where(cond: Any) -> Any:
    return F.sum(cond.cast("long"))


def error_kind() -> Any:
    """A transport failure in a word, from the producer's error text (rmqclient/producer.py): what a
    person acts on differs between a refused connection, a dropped one and no route."""
    e = F.col("error")
    return (F.when(F.col("outcome") != "error", F.lit(None))
            .when(e.startswith("route lookup failed"), "route lookup failed")  # namesrv, not the broker
            # the client's own refusals: nothing left the host (refusal_kind below)
            .when(e.endswith("has no writable queue"), "no writable queue")
            .when(e.startswith("strict order:"), "the key's queue is not in the route")
            .when(e.rlike("(?i)refused"), "connection refused")
            .when(e.startswith("connect to"), "connect failed")
            .when(e.rlike("(?i)closed|reset|broken pipe"), "connection lost")
            .when(e.isNotNull(), "transport error"))
