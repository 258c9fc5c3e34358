"""The load's pace (analysis/reconcile/pace.py) on planted per-second figures, as `lag()` hands them over: what
reached a broker (a send the client refused never left the host), and a generator that slips a little
every second. Pure logic; the Spark side (`lag`) runs in the real tier (test_analysis.py)."""
from __future__ import annotations

from typing import Any

import pytest

from analysis.reconcile.pace import generator_bound, nothing_reached, pace, slip_ms
from analysis.report.report import verdict
from analysis.judge.signature import evaluate
from rmqchaos.spec.expect import Signature
from test_verdict import shared_host

pytestmark = pytest.mark.fast

T0 = 1_700_000_000  # the load's first second (epoch s)


def seconds(n: int, rate: int = 100, users: int = 10, p50: Any = 3, wait_ms: Any = 500,
            refused: dict[int, dict[str, int]] | None = None) -> dict[str, Any]:
    """lag()'s result for an n-second load at `rate` msg/s: p50 and wait_ms per second offset k (a value
    or a function of k); `refused`: the attempts the client refused in second k, by why."""
    refused = refused or {}
    by = {T0 + k: {"n": rate, "p50": p50(k) if callable(p50) else p50, "p99": None,
                   "wait_ms": wait_ms(k) if callable(wait_ms) else wait_ms, "attempts": rate,
                   "refused": refused.get(k, {})} for k in range(n)}
    total_p50 = sorted(d["p50"] for d in by.values())[(n - 1) // 2]
    return {"total": {"n": rate * n, "p50": total_p50, "p99": max(d["p50"] for d in by.values()), "max": None},
            "refused_first": sum(sum(r.values()) for r in refused.values()), "by_second": by}


def load(n: int, rate: int = 100, users: int = 10, client: str = "remoting") -> dict[str, Any]:
    return {"rate": rate, "users": users, "duration": n, "client": client, "policy": {"kind": "no_retry"}}


def judged(p: dict[str, Any]) -> dict[str, Any]:
    s = shared_host("shared-host", load_pace=p)
    s["signature"] = evaluate(Signature(shows="busy answers", conditions=["busy > 0"]), s)
    return s


def test_a_load_whose_sends_did_not_reach_a_broker_for_20_of_its_150_seconds_is_short_naming_them() -> None:
    # the client refused every send for 20 s (a route with no writable queue): 87 % of the messages left
    # the host, above the 80 % margin, but 13 % of the load's seconds put nothing on a broker
    lags = seconds(150, refused={k: {"no writable queue": 100} for k in range(67, 87)})
    p = pace(load(150), lags)
    assert p is not None and p["reached"] == 0.867 and p["refused"] == 2_000 and p["first_attempts"] == 15_000
    assert p["nothing_reached"] == {"seconds": [[67, 87]], "s": 20, "of_s": 150, "why": ["no writable queue"]}
    assert p["short"] is True and p["generator_bound"] is False  # the cluster's doing, not the generator's
    assert p["words"] == ("the load reached 87 % of its 100 msg/s; its sends left a median 3 ms (p99 3 ms) after "
                          "their intended times; nothing reached a broker in seconds 67-87 of the load (20 of its "
                          "150 s): no writable queue")
    # a finding of the run, stated in the verdict; the signature is judged by its own conditions
    s = judged(p)
    assert s["signature"]["reached"] is True
    v = verdict(s)
    assert v.startswith("shared-host: reproduced; with") and v.count("nothing reached a broker in seconds 67-87") == 1, v


def test_the_three_real_runs_whose_last_23_of_90_seconds_reached_no_broker_read_short() -> None:
    lags = seconds(90, refused={k: {"no writable queue": 100} for k in range(67, 90)})
    p = pace(load(90), lags)
    assert p is not None and p["short"] is True and p["reached"] == 0.744 and not p["generator_bound"]
    assert "nothing reached a broker in seconds 67-90 of the load (23 of its 90 s): no writable queue" in p["words"]


def test_the_seconds_named_are_those_every_attempt_of_which_was_refused() -> None:
    refused = {3: {"no route": 100}, 4: {"no route": 60, "route lookup failed": 40}, 5: {"no route": 30},
               9: {"the key's queue is not in the route": 100}}
    d = nothing_reached(seconds(12, refused=refused)["by_second"])
    # second 5: 70 of its attempts left the host, something reached a broker
    assert d == {"seconds": [[3, 5], [9, 10]], "s": 3, "of_s": 12,
                 "why": ["no route", "the key's queue is not in the route", "route lookup failed"]}
    assert nothing_reached(seconds(12)["by_second"]) is None
    # under the share: named, not short (a topic's first route can take a second)
    p = pace(load(12), seconds(12, refused={0: {"no route": 100}}))
    assert p is not None and p["short"] is False and "in seconds 0-1 of the load (1 of its 12 s): no route" in p["words"]
    # refusals scattered among sends that left: counted in what the load reached, no second named
    p = pace(load(12), seconds(12, refused={k: {"no writable queue": 30} for k in range(12)}))
    assert p is not None and p["reached"] == 0.7 and p["short"] is True and p["nothing_reached"] is None
    assert p["words"].endswith("; the client refused 360 of its 1,200 first attempts before they left the host")


def test_the_grpc_ledger_marks_no_refusal_its_unsent_attempts_are_failed_connections() -> None:
    lags = seconds(150, refused={k: {"route lookup failed": 100} for k in range(67, 87)})
    p = pace(load(150, client="grpc"), lags)
    assert p is not None and p["reached"] == 1.0 and p["nothing_reached"] is None and p["short"] is False


def test_a_generator_that_slips_30_ms_a_second_while_its_users_sit_idle_is_generator_bound() -> None:
    # never 100 ms more within one second, yet 1.8 s behind after a minute; its 10 users waited on the
    # broker 10 % of the time (1 s of round trips a second): the generator set the pace
    slipping = seconds(60, p50=lambda k: 30 * k, wait_ms=1_000)
    assert slip_ms(slipping["by_second"]) == 1_770
    assert generator_bound(slipping["by_second"], 10) == (True, 0.1)
    p = pace(load(60), slipping)
    assert p is not None and p["short"] is True and p["generator_bound"] is True and p["slip_ms"] == 1_770
    assert p["words"] == ("the load reached 100 % of its 100 msg/s; its sends left a median 870 ms (p99 1.8 s) after "
                          "their intended times, falling 1.8 s further behind across the load; the generator, not the "
                          "broker, set the pace (its 10 users waited on the broker 10 % of the time while the load "
                          "fell behind)")
    s = judged(p)  # the broker never saw the load the scenario names: a miss
    assert s["signature"]["reached"] is False
    assert verdict(s).startswith("shared-host: NOT reproduced: the generator kept the load's schedule (the load "
                                 "reached 100 %")


def test_the_same_slip_while_its_users_waited_on_the_broker_is_the_brokers() -> None:
    # 9 s of round trips a second for 10 users: busy 90 % of the time, the broker held the load back
    slipping = seconds(60, p50=lambda k: 30 * k, wait_ms=9_000)
    assert generator_bound(slipping["by_second"], 10) == (False, 0.9)
    p = pace(load(60), slipping)
    assert p is not None and p["short"] is True and p["generator_bound"] is False
    s = judged(p)  # a finding, stated, not a miss
    assert s["signature"]["reached"] is True and "falling 1.8 s further behind across the load" in verdict(s)


def test_a_slip_that_starts_late_blames_only_the_seconds_it_fell_behind_in() -> None:
    # on time for 40 s (users busy on a slow broker: they are not what fell behind), then slipping
    # 60 ms a second with idle users
    by = seconds(80, p50=lambda k: 5 if k < 40 else 5 + 60 * (k - 40),
                 wait_ms=lambda k: 9_000 if k < 40 else 1_000)["by_second"]
    assert generator_bound(by, 10) == (True, 0.1)


def test_a_healthy_load_is_not_short() -> None:
    # a lag that wobbles by a few ms, users waiting 5 % of their time, nothing refused
    p = pace(load(90), seconds(90, p50=lambda k: 3 + k % 7, wait_ms=500))
    assert p is not None and p["short"] is False and p["generator_bound"] is False
    assert p["nothing_reached"] is None and abs(p["slip_ms"]) < 100 and p["reached"] == 1.0
    assert "the load reached" not in verdict(judged(p))
