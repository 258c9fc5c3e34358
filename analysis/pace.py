"""Did the load keep its schedule? The rate it reached against the rate asked, and how far its sends
left behind their intended times (the send ledger's `intended_ms` against `start_ms`, first attempts
only: a retry is late by design). A load that fell behind while its users were mostly not waiting on
the broker was held back by the generator (its CPU), not by the broker: the run then did not put on the
broker the load its scenario names, and its latency and busy figures judge the host."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import sends
from analysis.latency import histogram, pct_result, percentiles
from rmqchaos.shortfall import SHORT_BELOW

# A load is short of its schedule when it reached less than SHORT_BELOW of its asked messages (the
# margin every fault's achieved-against-asked uses too), or when its sends left a median of more than this after their intended times: a second behind
# is a burst of `rate` messages the broker saw at once instead of spread out.
LAG_MARGIN_MS = 1000


# Little's law: a user waits on the broker for the sum of its sends' round trips. Users that fell
# behind while waiting on the broker less than this share of the time were held back by something else:
# the generator's own CPU.
WAITING_BELOW = 0.5


def lag(send: DataFrame) -> dict[str, Any]:
    """Start minus intended time of every first attempt (ms): {"total": {n, p50, p95, p99, max},
    "by_second": {t: {n, p50, p99, wait_ms}}} by the second the attempt started (the series' axis);
    wait_ms: the round trips (end - start) of every attempt with an answer or a timeout started in it."""
    first = send.where(sends.is_intent() & (F.col("attempt") == 1) & F.col("intended_ms").isNotNull())
    h = histogram(first, {"lag": F.col("start_ms") - F.col("intended_ms")},
                  (F.col("start_ms") / 1000).cast("long")).persist()
    try:
        total = pct_result(percentiles(h.groupBy(F.lit(0).alias("g"), "m", "v").agg(F.sum("c").alias("c"))),
                           (0, "lag"))
        per = percentiles(h)
    finally:
        h.unpersist()
    waits = {int(r["t"]): int(r["w"] or 0) for r in send.where(sends.is_outcome() & F.col("end_ms").isNotNull())
             .groupBy((F.col("start_ms") / 1000).cast("long").alias("t"))
             .agg(F.sum(F.col("end_ms") - F.col("start_ms")).alias("w")).collect() if r["t"] is not None}
    return {"total": total, "by_second": {int(g): {"n": d["n"], "p50": d.get("p50"), "p99": d.get("p99"),
                                                   "wait_ms": waits.get(int(g), 0)}
                                         for (g, _), d in per.items() if g is not None}}


def pace(load: dict[str, Any] | None, lags: dict[str, Any] | None) -> dict[str, Any] | None:
    """The load's achieved against asked: {asked_rate, asked_messages, first_attempts, reached (share of
    the asked messages sent), lag_ms {p50, p99, max}, generator_bound, waiting_share, short, words}.
    None without a load or without intents (a load run without its ledger)."""
    if not load or not lags or not lags["total"]["n"]:
        return None
    rate, users = float(load["rate"]), int(load["users"])
    asked = int(load["messages"]) if load.get("messages") else round(rate * float(load["duration"]))
    n, tot = lags["total"]["n"], lags["total"]
    reached = round(n / asked, 3) if asked else None
    short = (reached is not None and reached < SHORT_BELOW) or (tot.get("p50") or 0) > LAG_MARGIN_MS
    bound, waiting = generator_bound(lags["by_second"], users)
    out = {"asked_rate": rate, "asked_messages": asked, "first_attempts": n, "reached": reached,
           "lag_ms": {k: tot.get(k) for k in ("p50", "p99", "max")}, "users": users,
           "generator_bound": bool(short and bound), "waiting_share": waiting, "short": short}
    out["words"] = words(out)
    return out


def generator_bound(by_second: dict[int, dict[str, Any]], users: int) -> tuple[bool, float | None]:
    """Whether the load fell behind while its users were mostly not waiting on the broker: over the
    seconds in which the median lag grew by more than 100 ms, the median share of the users' time spent
    waiting for answers (the round trips started that second over users x 1 s). Every user sends one
    message at a time, so a load behind schedule whose users were busy waiting was held back by the
    broker; one whose users sat idle, by the generator. Returns (bound, that share; None when the lag
    never grew)."""
    ts = sorted(t for t, d in by_second.items() if d.get("p50") is not None)
    growing = [t for a, t in zip(ts, ts[1:]) if by_second[t]["p50"] > by_second[a]["p50"] + 100]
    if not growing or users <= 0:
        return False, None
    shares = sorted(by_second[t].get("wait_ms", 0) / (1000 * users) for t in growing)
    med = round(shares[(len(shares) - 1) // 2], 3)
    return med < WAITING_BELOW, med


def words(p: dict[str, Any]) -> str:
    """e.g. 'the load reached 60 % of its 1,000 msg/s; its sends left a median 5.1 s (p99 8.1 s) after
    their intended times; the generator, not the broker, set the pace (its 20 users waited on the broker
    12 % of the time while the load fell behind)'."""
    got = p["reached"] * 100 if p["reached"] is not None else None
    rate = f"{p['asked_rate']:,.0f}" if p["asked_rate"] >= 10 else f"{p['asked_rate']:g}"
    head = f"the load reached {got:.0f} % of its {rate} msg/s" if got is not None else f"the load at {rate} msg/s"
    lag = p["lag_ms"]
    out = head + f"; its sends left a median {_s(lag['p50'])} (p99 {_s(lag['p99'])}) after their intended times"
    if p["generator_bound"]:
        out += (f"; the generator, not the broker, set the pace (its {p['users']} users waited on the broker "
                f"{p['waiting_share'] * 100:.0f} % of the time while the load fell behind)")
    return out


def _s(ms: int | None) -> str:
    if ms is None:
        return "?"
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"
