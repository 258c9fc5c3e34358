"""The run second by second (attempts by outcome, busy answers, deliveries, latency, keys lost or
duplicated, where the acked sends went) and per timeline event's window (keys by class, the acked-rate
drop, the time to recover)."""
from __future__ import annotations

import collections
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends

NOT_WINDOWS = ("stage", "cluster_up", "check", "restart", "consumer_stop", "serving_gate")  # bookkeeping (a fault restart has its own event)


def series(per_second: dict[str, Any], keys: DataFrame,
           latency: dict[tuple[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Per 1 s bucket (epoch seconds) of the attempt start: attempts by outcome (timeouts include
    attempts without outcome), busy, deliveries, latency p50/p99, and keys lost / duplicated by the
    second they were meant to be sent. `per_second`: per_second's; `latency`: analysis/ledgers/latency.py percentiles per
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


def per_second(send: DataFrame) -> dict[str, Any]:
    """One grouping of the send ledger by second of the attempt's start, kind of record, the broker of
    an acked send and the text prefix of a busy answer (few rows: seconds x kinds x brokers x prefixes):
    - `send`: {t: {attempts, outcomes, acked, errors, timeouts, busy}} (the series' send columns, and
      summed, the run's attempts and outcome records);
    - `acked_by_broker`: where the acked sends went (a broker out of the route stops getting any),
      {t: {broker: n}};
    - `busy`: busy answers (code 2) per text prefix, {prefix: [[t, n]]}."""
    acked, out_is = sends.acked(), sends.is_outcome()
    busy = out_is & (F.col("code") == 2)
    kind = (F.when(sends.is_intent(), "attempts").when(acked, "acked").when(out_is & (F.col("outcome") == "error"), "errors")
            .when(out_is & (F.col("outcome") == "timeout"), "timeouts").when(out_is, "other"))
    rows = (send.groupBy((F.col("start_ms") / 1000).cast("long").alias("t"), kind.alias("kind"),
                         F.when(acked, sends.acked_at()).alias("b"),
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


def window_events(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
    """The timeline events that open a window (not stage bookkeeping), each with its start and end ms."""
    return [(e, int(e["start_ms"]), int(e.get("end_ms") or e["start_ms"])) for e in events
            if e.get("kind") not in NOT_WINDOWS]


def windows(wins: list[tuple[dict[str, Any], int, int]], series: list[dict[str, Any]],
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


def between(col: str, s: int, t: int) -> Any:
    return (F.col(col) >= s) & (F.col(col) <= t)
