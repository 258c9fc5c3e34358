"""The report's verdict sentences from summaries (pure logic; the Chromium-rendered ones are checked
against real runs in test_analysis.py and test_chaos.py)."""
from __future__ import annotations

from typing import Any

import pytest

from analysis.report import comparisons, fmt, verdict

pytestmark = pytest.mark.fast

CAUSES = {"consumer_retry": 0, "backup_topic": 0, "producer_resend": 0, "consumer_repull": 0, "unexplained": 0}


def summary(name: str, tsp: str, lost: int, store: dict[str, Any] | None, **more: Any) -> dict[str, Any]:
    counts = {"lost": lost, "duplicated": 0, "acked_weak": 0, "acked_weak_lost": 0, "corrupted_deliveries": 0,
              "unexpected": 0, "undelivered_at_stop": 0, **more.pop("counts", {})}
    return {"scenario": name, "complete": True, "incomplete_reasons": [], "counts": counts,
            "duplicates_by_cause": dict(CAUSES, **more.pop("causes", {})), "store_check": store,
            "cluster": {"brokers": {b: {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                        "transientStorePoolEnable": tsp} for b in ("broker-a", "broker-b")}},
            "load": {"policy": {"kind": "no_retry"}},
            # the restart after the kill is its recovery: not named as a fault of its own
            "events": [{"kind": "fault", "outcome": "ok", "target": "broker-a", "params": {"fault_kind": k}}
                       for k in ("oom_kill", "restart")],
            **more}


STORE = {"lost_from_store": 99, "lost_in_delivery": 0, "indeterminate_stored": 0}


def test_a_verdict_per_run_and_one_per_comparison() -> None:
    on = summary("oom-tsp-on", "true", 99, STORE)
    off = summary("oom-tsp-off", "false", 0, {**STORE, "lost_from_store": 0},
                  counts={"duplicated": 970}, causes={"consumer_repull": 970})
    assert verdict(on) == ("oom-tsp-on: with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=true and the "
                           "no_retry send policy, one kernel OOM kill of broker-a lost 99 acknowledged messages "
                           "(verified absent from every broker's store); none delivered twice.")
    assert verdict(off).endswith("lost 0 acknowledged messages; 970 delivered more than once (extra deliveries: "
                                 "consumer repull 970).")
    assert comparisons([on, off]) == [
        "Under one kernel OOM kill of broker-a: with transientStorePoolEnable=true (oom-tsp-on) the cluster lost 99 "
        "acknowledged messages (verified absent from every broker's store); with transientStorePoolEnable=false "
        "(oom-tsp-off), 0."]


def test_verdicts_never_claim_more_than_was_checked() -> None:
    split = summary("s", "true", 5, {**STORE, "lost_from_store": 3, "lost_in_delivery": 2})
    assert "lost 5 acknowledged messages (3 verified absent from every broker's store, 2 stored but never " \
           "delivered)" in verdict(split)
    assert "lost one acknowledged message (not checked against the brokers' stores)" in verdict(summary("s", "true", 1, None))
    cut = summary("s", "true", 0, None, counts={"undelivered_at_stop": 12})
    cut.update(complete=False, incomplete_reasons=["the drain timed out"])
    assert verdict(cut).endswith("the run did not finish (the drain timed out), so loss is not verified: 12 "
                                 "acknowledged messages were not delivered before the consumers stopped.")
    assert comparisons([cut, summary("t", "false", 0, None)]) == []  # an unfinished run is compared with nothing
    assert fmt(None) == "\u2014" and fmt(0) == 0
