"""Did the load keep its schedule? The rate it reached against the rate asked, and how far its sends
left behind their intended times (the send ledger's `intended_ms` against `start_ms`, first attempts
only: a retry is late by design). Two parties can fall short of it:

- the cluster: a send the client refused before anything left the host (no route, no writable queue:
  sends.refused) did not put load on a broker. The load reached only the sends that left; seconds in
  which nothing did are named. A finding of the run about the cluster, not the generator's fault.
- the generator: a load that fell behind (in jumps, or slipping steadily) while its users were mostly
  not waiting on the broker was held back by the generator (its CPU), not by the broker: the run then
  did not put on the broker the load its scenario names, and its latency and busy figures judge the host."""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.ledgers import sends
from analysis.ledgers.latency import histogram, pct_result, percentiles
from rmqchaos.shortfall import SHORT_BELOW

# A load is short of its schedule when it reached less than SHORT_BELOW of its asked messages (the
# margin every fault's achieved-against-asked uses too), or when its sends left a median of more than
# this after their intended times, or fell this much further behind across the load: a second behind
# is a burst of `rate` messages the broker saw at once instead of spread out.
LAG_MARGIN_MS = 1000

# A second whose median lag is this much above the last one's fell behind (a jump); so is a second this
# much above where the load started, once it slipped by more than LAG_MARGIN_MS.
GROWTH_MS = 100

# Little's law: a user waits on the broker for the sum of its sends' round trips. Users that fell
# behind while waiting on the broker less than this share of the time were held back by something else:
# the generator's own CPU.
WAITING_BELOW = 0.5

# A load in which nothing reached a broker for more than this share of its seconds is short whatever
# it reached overall: a scenario's fault window can be that long, and the broker never saw the load then.
DARK_SHARE = 0.1


def lag(send: DataFrame) -> dict[str, Any]:
    """Start minus intended time of every first attempt (ms), and what left the host:
    {"total": {n, p50, p95, p99, max}, "refused_first": first attempts the client refused,
    "by_second": {t: {n, p50, p99, wait_ms, attempts, refused}}} by the second the attempt started (the
    series' axis); wait_ms: the round trips (end - start) of every attempt with an answer or a timeout
    started in it; attempts: every attempt started in it (intents); refused: {why: attempts the client
    refused} (sends.refusal_kind)."""
    first = send.where(sends.is_intent() & (F.col("attempt") == 1) & F.col("intended_ms").isNotNull())
    h = histogram(first, {"lag": F.col("start_ms") - F.col("intended_ms")},
                  (F.col("start_ms") / 1000).cast("long")).persist()
    try:
        total = pct_result(percentiles(h.groupBy(F.lit(0).alias("g"), "m", "v").agg(F.sum("c").alias("c"))),
                           (0, "lag"))
        per = percentiles(h)
    finally:
        h.unpersist()
    secs, refused_first = attempts_by_second(send)
    lags = {int(g): d for (g, _), d in per.items() if g is not None}
    by_second = {t: {"n": lags.get(t, {}).get("n", 0), "p50": lags.get(t, {}).get("p50"),
                     "p99": lags.get(t, {}).get("p99"), **secs.get(t, {"attempts": 0, "wait_ms": 0, "refused": {}})}
                 for t in sorted(set(lags) | set(secs))}
    return {"total": total, "refused_first": refused_first, "by_second": by_second}


def attempts_by_second(send: DataFrame) -> tuple[dict[int, dict[str, Any]], int]:
    """Per second of start: {attempts, wait_ms, refused {why: n}}, and the first attempts refused. One
    scan, grouped by (second, why the client refused; null for everything else)."""
    rows = (send.groupBy((F.col("start_ms") / 1000).cast("long").alias("t"),
                         F.when(sends.refused(), sends.refusal_kind()).alias("why"))
            .agg(F.count(F.lit(1)).alias("c"), sends.count_where(sends.is_intent()).alias("intents"),
                 sends.count_where(F.col("attempt") == 1).alias("first"),
                 F.sum(F.when(sends.is_outcome(), F.col("end_ms") - F.col("start_ms"))).alias("w"))
            .collect())
    out: dict[int, dict[str, Any]] = {}
    refused_first = 0
    for r in rows:
        if r["t"] is None:
            continue
        d = out.setdefault(int(r["t"]), {"attempts": 0, "wait_ms": 0, "refused": {}})
        d["attempts"] += int(r["intents"] or 0)
        d["wait_ms"] += int(r["w"] or 0)
        if r["why"] is not None:  # refused outcomes only: every row of the group is one
            d["refused"][r["why"]] = int(r["c"])
            refused_first += int(r["first"] or 0)
    return out, refused_first


def pace(load: dict[str, Any] | None, lags: dict[str, Any] | None) -> dict[str, Any] | None:
    """The load's achieved against asked: {asked_rate, asked_messages, first_attempts, refused (first
    attempts the client refused), reached (share of the asked messages whose first attempt left the
    host), lag_ms {p50, p99, max}, slip_ms, nothing_reached, generator_bound, waiting_share, short,
    words}. None without a load or without intents (a load run without its ledger)."""
    if not load or not lags or not lags["total"]["n"]:
        return None
    rate, users = float(load["rate"]), int(load["users"])
    asked = int(load["messages"]) if load.get("messages") else round(rate * float(load["duration"]))
    n, tot, by = lags["total"]["n"], lags["total"], lags["by_second"]
    # the gRPC ledger marks no refusal: its `sent` false without a broker is a failed connection to the
    # proxy, which left the host (docs/ledgers.md)
    marked = load.get("client", "remoting") != "grpc"
    refused = int(lags.get("refused_first") or 0) if marked else 0
    reached = round((n - refused) / asked, 3) if asked else None
    made = round(n / asked, 3) if asked else None  # what the generator itself started
    slip = slip_ms(by)
    dark = nothing_reached(by) if marked else None
    # the generator's own shortfall: too few first attempts, or too late
    behind = (made is not None and made < SHORT_BELOW) or (tot.get("p50") or 0) > LAG_MARGIN_MS \
        or slip > LAG_MARGIN_MS
    short = behind or (reached is not None and reached < SHORT_BELOW) \
        or (dark is not None and dark["s"] > DARK_SHARE * dark["of_s"])
    bound, waiting = generator_bound(by, users)
    out = {"asked_rate": rate, "asked_messages": asked, "first_attempts": n, "refused": refused, "reached": reached,
           "lag_ms": {k: tot.get(k) for k in ("p50", "p99", "max")}, "slip_ms": slip, "users": users,
           "nothing_reached": dark, "generator_bound": bool(behind and bound), "waiting_share": waiting,
           "short": bool(short)}
    out["words"] = words(out, slip_said=slip > LAG_MARGIN_MS and (tot.get("p50") or 0) <= LAG_MARGIN_MS
                         and (made is None or made >= SHORT_BELOW))
    return out


def nothing_reached(by_second: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The seconds in which the load made attempts and the client refused every one: {seconds [[from,
    to]] (s after the load's first second, `to` exclusive), s (their count), of_s (the load's seconds),
    why [kinds, most refused first]}; None when there were none."""
    ts = sorted(by_second)
    dark = [t for t in ts if (r := sum((by_second[t].get("refused") or {}).values()))
            and by_second[t].get("attempts", 0) <= r]
    if not dark:
        return None
    t0 = ts[0]
    ranges: list[list[int]] = []
    for t in dark:
        if ranges and ranges[-1][1] == t - t0:
            ranges[-1][1] += 1
        else:
            ranges.append([t - t0, t - t0 + 1])
    why: dict[str, int] = {}
    for t in dark:
        for k, c in by_second[t]["refused"].items():
            why[k] = why.get(k, 0) + c
    return {"seconds": ranges, "s": len(dark), "of_s": ts[-1] - t0 + 1,
            "why": sorted(why, key=lambda k: (-why[k], k))}


def slip_ms(by_second: dict[int, dict[str, Any]]) -> int:
    """How much further behind its schedule the load fell across it: the least-squares slope of its
    per-second median lags times the seconds they span (ms; 0 under 3 seconds). Second-to-second jumps
    miss a generator that slips a little every second (+30 ms a second is 1.8 s a minute)."""
    pts = [(t, d["p50"]) for t, d in by_second.items() if d.get("p50") is not None]
    if len(pts) < 3:
        return 0
    mt, ml = sum(t for t, _ in pts) / len(pts), sum(v for _, v in pts) / len(pts)
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (v - ml) for t, v in pts) / var
    return round(slope * (max(t for t, _ in pts) - min(t for t, _ in pts)))


def generator_bound(by_second: dict[int, dict[str, Any]], users: int) -> tuple[bool, float | None]:
    """Whether the load fell behind while its users were mostly not waiting on the broker: over the
    seconds in which it fell behind (the median lag grew by more than GROWTH_MS within the second; or,
    when the load slipped by more than LAG_MARGIN_MS across it, the median lag stood GROWTH_MS above its
    first third's), the median share of the users' time spent waiting for answers (the round trips
    started that second over users x 1 s). Every user sends one message at a time, so a load behind
    schedule whose users were busy waiting was held back by the broker; one whose users sat idle, by the
    generator. Returns (bound, that share; None when the lag never grew)."""
    ts = sorted(t for t, d in by_second.items() if d.get("p50") is not None)
    p50 = {t: by_second[t]["p50"] for t in ts}
    behind = {t for a, t in zip(ts, ts[1:]) if p50[t] > p50[a] + GROWTH_MS}
    if slip_ms(by_second) > LAG_MARGIN_MS:
        start = sorted(p50[t] for t in ts[:max(1, len(ts) // 3)])
        base = start[(len(start) - 1) // 2]
        behind |= {t for t in ts if p50[t] > base + GROWTH_MS}
    if not behind or users <= 0:
        return False, None
    shares = sorted(by_second[t].get("wait_ms", 0) / (1000 * users) for t in behind)
    med = round(shares[(len(shares) - 1) // 2], 3)
    return med < WAITING_BELOW, med


def words(p: dict[str, Any], slip_said: bool = False) -> str:
    """e.g. 'the load reached 60 % of its 1,000 msg/s; its sends left a median 5.1 s (p99 8.1 s) after
    their intended times; the generator, not the broker, set the pace (its 20 users waited on the broker
    12 % of the time while the load fell behind)', or '...; nothing reached a broker in seconds 67-90 of
    the load (23 of its 90 s): no writable queue'. `slip_said`: the slip alone made the load short, so
    the lag's clause says it."""
    got = p["reached"] * 100 if p["reached"] is not None else None
    rate = f"{p['asked_rate']:,.0f}" if p["asked_rate"] >= 10 else f"{p['asked_rate']:g}"
    head = f"the load reached {got:.0f} % of its {rate} msg/s" if got is not None else f"the load at {rate} msg/s"
    lag = p["lag_ms"]
    out = head + f"; its sends left a median {_s(lag['p50'])} (p99 {_s(lag['p99'])}) after their intended times"
    if slip_said:
        out += f", falling {_s(p['slip_ms'])} further behind across the load"
    dark = p.get("nothing_reached")
    if dark:
        out += (f"; nothing reached a broker in seconds {', '.join(f'{a}-{b}' for a, b in dark['seconds'])} of the "
                f"load ({dark['s']} of its {dark['of_s']} s): {', '.join(dark['why'])}")
    elif p.get("refused"):  # refusals scattered among sends that left: counted, no second to name
        out += (f"; the client refused {p['refused']:,} of its {p['first_attempts']:,} first attempts before they "
                "left the host")
    if p["generator_bound"]:
        out += (f"; the generator, not the broker, set the pace (its {p['users']} users waited on the broker "
                f"{p['waiting_share'] * 100:.0f} % of the time while the load fell behind)")
    return out


def _s(ms: int | None) -> str:
    if ms is None:
        return "?"
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"
