"""Exact latency percentiles in Spark (from a histogram of integer milliseconds), and the round trip
of the acknowledged sends per broker inside each event window and outside it: what a fault on one
broker's link (a `link` latency) does to its own sends and to the other brokers'."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends

PERCENTS = (50, 95, 99)


def histogram(df: DataFrame, measures: dict[str, Any], group: Any) -> DataFrame:
    """(g, m, v, c): how many rows of `df` have the integer value v (ms) of measure m, per group g;
    nulls are not counted. One grouping for every measure: latencies take few distinct values."""
    cells = F.explode(F.array(*[F.struct(F.lit(m).alias("m"), col.cast("long").alias("v"))
                                for m, col in measures.items()]))
    return (df.select(group.alias("g"), cells.alias("x")).where(F.col("x.v").isNotNull())
            .groupBy("g", F.col("x.m").alias("m"), F.col("x.v").alias("v")).agg(F.count("*").alias("c")))


def percentiles(h: DataFrame) -> dict[tuple[Any, str], dict[str, Any]]:
    """Exact nearest-rank percentiles from a histogram (g, m, v, c): per (g, m) its n, p50/p95/p99
    (the smallest value with at least p % of the values at or below it) and max. Running counts
    over each measure's distinct values, in Spark; only those few rows reach the driver."""
    from pyspark.sql import Window
    n, cum = F.sum("c").over(Window.partitionBy("g", "m")), F.sum("c").over(
        Window.partitionBy("g", "m").orderBy("v").rowsBetween(Window.unboundedPreceding, 0))
    h = h.select("g", "m", "v", "c", n.alias("n"), cum.alias("cum"))
    # rank ceil(n * p / 100), in integers; the row whose running count first reaches it holds it
    rank = {p: F.expr(f"(n * {p} + 99) div 100") for p in PERCENTS}
    hit = {p: (F.col("cum") - F.col("c") < r) & (F.col("cum") >= r) for p, r in rank.items()}
    last = F.col("cum") == F.col("n")
    rows = h.select("g", "m", "v", "n", last.alias("last"), *[c.alias(f"p{p}") for p, c in hit.items()]).where(
        F.col("last") | F.greatest(*[F.col(f"p{p}") for p in PERCENTS])).collect()
    out: dict[tuple[Any, str], dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault((r["g"], r["m"]), {"n": int(r["n"])})
        for p in PERCENTS:
            if r[f"p{p}"]:
                d[f"p{p}"] = int(r["v"])
        if r["last"]:
            d["max"] = int(r["v"])
    return out


def pct_result(pcts: dict[tuple[Any, str], dict[str, Any]], key: tuple[Any, str]) -> dict[str, Any]:
    d = pcts.get(key, {})
    return {"n": d.get("n", 0), **{f"p{p}": d.get(f"p{p}") for p in PERCENTS}, "max": d.get("max")}


def by_broker(acked: DataFrame, wins: list[tuple[dict[str, Any], int, int]]) -> list[dict[str, dict[str, Any]]]:
    """Per window (start, end ms): {broker: {"during": pct, "outside": pct}}, the round trip (end - start)
    of the acknowledged sends (`acked`: the ledger's ok outcomes) that started inside the window and
    of those that started outside it, in one scan; brokers as sends.acked_at names them."""
    if not wins:
        return []
    rt = F.col("end_ms") - F.col("start_ms")
    measures: dict[str, Any] = {}
    for i, (_, s, t) in enumerate(wins):
        inside = (F.col("start_ms") >= s) & (F.col("start_ms") <= t)
        measures[f"w{i}"], measures[f"o{i}"] = F.when(inside, rt), F.when(~inside, rt)
    pcts = percentiles(histogram(acked, measures, sends.acked_at()))
    brokers = sorted({g for g, _ in pcts})
    return [{b: {"during": pct_result(pcts, (b, f"w{i}")), "outside": pct_result(pcts, (b, f"o{i}"))}
             for b in brokers} for i in range(len(wins))]
