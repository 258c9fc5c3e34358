"""What answers the sends got: attempts per kind of answer, response code, remark prefix and broker,
and which answered attempts were stored all the same (matched with the msgIds delivered)."""
from __future__ import annotations

import collections
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.ledgers.session import BROADCAST_MAX

ERROR_GROUPS_MAX = 100_000  # distinct (outcome, status, code, prefix, broker, answer) combinations brought back
PATH_BROADCAST_MAX = 2_000_000  # keys (or msgIds) to match by msgId up to which they are broadcast (~100 MB)


def answer_groups(send: DataFrame, warnings: list[str]) -> tuple[list[Any], dict[str, int] | None]:
    """One grouping of the outcome records by (outcome, status, code, remark prefix, broker, answer):
    its rows (distinct kinds of answer, not attempts; error_counts sums them up), and the attempts per
    answer (answer_label) summed from the same rows — None when there were more than
    ERROR_GROUPS_MAX kinds (the rows then cover only some; answers counts apart, exactly)."""
    rows = (send.where(sends.is_outcome()).groupBy("outcome", "status", "code", "remark_prefix", "broker", answer_label())
            .agg(F.count("*").alias("n")).limit(ERROR_GROUPS_MAX + 1).collect())
    if len(rows) > ERROR_GROUPS_MAX:
        warnings.append(f"more than {ERROR_GROUPS_MAX} kinds of answer; error counts cover the first {ERROR_GROUPS_MAX}")
        return rows[:ERROR_GROUPS_MAX], None
    totals: collections.Counter[str] = collections.Counter()
    for r in rows:
        totals[r["answer"]] += int(r["n"])
    return rows, dict(totals)


def error_counts(rows: list[Any], no_outcome: int) -> dict[str, dict[str, int]]:
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


def answers(send: DataFrame, recv: DataFrame, keys: DataFrame, n_dup: int,
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
    outcomes = send.where(sends.is_outcome())
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



def window_answers(send: DataFrame, wins: list[tuple[dict[str, Any], int, int]]) -> list[dict[str, dict[str, int]]]:
    """Per window (start, end ms): {broker group: {answer: attempts}} of the attempts that ended inside
    it, in one scan; an answer is the send status of an acknowledged attempt (SEND_OK,
    FLUSH_DISK_TIMEOUT, ...), else its outcome with its code (`error:2`, `timeout`). What a broker
    answered while a fault held, e.g. while its fsyncs failed (disk_error)."""
    if not wins:
        return []
    inside = F.array(*[F.when((F.col("end_ms") >= s) & (F.col("end_ms") <= t), F.lit(i)) for i, (_, s, t) in enumerate(wins)])
    answer = F.when(F.col("outcome") == "ok", F.coalesce("status", F.lit("ok"))).otherwise(
        F.concat_ws(":", "outcome", F.col("code").cast("string")))
    rows = (send.where(sends.is_outcome()).select(F.explode(inside).alias("w"), F.coalesce("broker", F.lit("?")).alias("b"),
                                                  answer.alias("a"))
            .where(F.col("w").isNotNull()).groupBy("w", "b", "a").agg(F.count("*").alias("n")).collect())
    out: list[dict[str, dict[str, int]]] = [{} for _ in wins]
    for r in sorted(rows, key=lambda r: (r["w"], r["b"], -r["n"], r["a"])):
        out[r["w"]].setdefault(r["b"], {})[r["a"]] = int(r["n"])
    return out
