"""The report's verdict sentences from summaries (pure logic; the Chromium-rendered ones are checked
against real runs in test_analysis.py and test_chaos.py)."""
from __future__ import annotations

from typing import Any

import pytest

from analysis.report.report import comparisons, fmt, render, verdict

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
    # bytes past a DLedger replica's truncated log are in no log: said so, not "stored but never delivered"
    cut_tail = summary("s", "true", 20, {**STORE, "lost_from_store": 20, "lost_in_delivery": 0, "lost_truncated": 20})
    assert "lost 20 acknowledged messages (in no broker's log, all truncated from a replica's log when it followed " \
           "a leader that never had them)" in verdict(cut_tail)
    some = summary("s", "true", 5, {**STORE, "lost_from_store": 3, "lost_in_delivery": 2, "lost_truncated": 1})
    assert "(3 in no broker's log, 1 of them truncated from a replica's log when it followed a leader that never " \
           "had them, 2 stored but never delivered)" in verdict(some)
    cut = summary("s", "true", 0, None, counts={"undelivered_at_stop": 12})
    cut.update(complete=False, incomplete_reasons=["the drain timed out"])
    assert verdict(cut).endswith("the run did not finish (the drain timed out), so loss is not verified: 12 "
                                 "acknowledged messages were not delivered before the consumers stopped.")
    assert comparisons([cut, summary("t", "false", 0, None)]) == []  # an unfinished run is compared with nothing
    assert fmt(None) == "\u2014" and fmt(0) == 0


# ---------------------------------------------------------------- what each run found, beyond loss

def shared_host(name: str = "shared-host", busy: dict[str, int] | None = None, attempts: int = 40_000,
                **more: Any) -> dict[str, Any]:
    """A shared-host-like summary: one broker, its page cache squeezed, Redis and fio noise, busy answers."""
    busy = {"[REJECTREQUEST]": 3_947, "[PCBUSY_CLEAN_QUEUE]": 433, "[TIMEOUT_CLEAN_QUEUE]": 22} if busy is None else busy
    s = summary(name, "false", 0, None, counts={"attempts": attempts, "failed": sum(busy.values())},
                answers=[{"answer": "SEND_OK", "attempts": attempts - sum(busy.values()), "stored": attempts - sum(busy.values()),
                          "dup_keys_first_answer": 0, "dup_keys_first_stored": 0},
                         *[{"answer": k, "attempts": n, "stored": 0, "dup_keys_first_answer": 0, "dup_keys_first_stored": 0}
                           for k, n in busy.items()]],
                errors={"by_outcome": {}, "by_status": {}, "by_code": {"2": sum(busy.values())},
                        "by_remark_prefix": busy, "by_broker": {}}, **more)
    s["cluster"] = {"brokers": {"broker-a": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                             "waitTimeMillsInSendQueue": "50", "listenPort": "10911"}}}
    s["events"] = [{"kind": "fault", "outcome": "ok", "target": t, "params": {"fault_kind": k, "evidence": {}}}
                   for k, t in (("page_cache_limit", "broker-a"), ("redis_noise", "cluster"), ("es_like_noise", "cluster"))]
    return s


def noise_intent(s: dict[str, Any], kind: str, short: bool, words: str, reached: float) -> dict[str, Any]:
    (e,) = [e for e in s["events"] if e["params"]["fault_kind"] == kind]
    e["params"]["evidence"]["intent"] = {"measures": [{"what": "SET/s", "where": "redis-0", "asked": 200,
                                                       "achieved": 200 * reached}],
                                         "reached": reached, "short": short, "words": words}
    return s


T0 = 1_800_000_000  # the synthetic runs' first second


def flood(name: str = "retry-flood", out: tuple[int, int] | None = (10, 30), **more: Any) -> dict[str, Any]:
    """A retry-flood-like summary: 60 s of sends over two brokers; the monitor sees broker-a up but not
    listed by namesrv from second `out[0]` to `out[1]`; 92 sends a second acked on broker-a (91 once)."""
    s = summary(name, "false", 0, None, counts={"attempts": 12_000}, **more)
    s["events"] = [{"kind": "fault", "outcome": "ok", "target": "broker-a", "params": {"fault_kind": "topic_flood"}},
                   {"kind": "fault", "outcome": "ok", "target": "cluster", "params": {"fault_kind": "cleanup_retry_topics"}}]
    s["series"] = [{"t": T0 + i, "errors": 0, "timeouts": 0,
                    "acked_by_broker": {"broker-a": 91 if i == 12 else 92, "broker-b": 100}} for i in range(60)]
    s["monitor"] = [{"ts_ms": (T0 + i) * 1000, "frame_errors": {"count": 2 if out and i >= out[0] else 0, "last_length": 319_756, "limit": 262_144,
                                                      "last_ms": (T0 + 9) * 1000},
                     "brokers": {"broker-a": {"up": True, "registered": not (out and out[0] <= i < out[1])},
                                 "broker-b": {"up": True, "registered": True}}} for i in range(60)]
    return s


def test_a_shared_host_verdict_names_its_busy_refusals_by_kind_with_the_rate() -> None:
    v = verdict(shared_host())
    assert v == ("shared-host: with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=false and the no_retry send "
                 "policy, one page-cache limit of broker-a, Redis disk noise and fio disk noise lost 0 acknowledged "
                 "messages; none delivered twice; 4,402 of 40,000 sends (11 %) refused busy: REJECTREQUEST 3,947, "
                 "PCBUSY_CLEAN_QUEUE 433, TIMEOUT_CLEAN_QUEUE 22.")
    # a summary without `answers` (older runs): the same, from the error counts; a busy answer without text too
    old = shared_host(busy={"[REJECTREQUEST]": 30})
    del old["answers"]
    old["errors"]["by_code"]["2"] = 34
    assert verdict(old).endswith("; 34 of 40,000 sends (<0.1 %) refused busy: REJECTREQUEST 30, code 2 4.")
    assert "refused busy" not in verdict(shared_host(busy={}))  # nothing refused: nothing said


def test_a_flood_verdict_names_the_route_outage_its_length_and_the_sends_acked_on_the_broker() -> None:
    assert verdict(flood()).endswith(
        "lost 0 acknowledged messages; none delivered twice; broker-a was missing from namesrv's route for 20 s "
        "while 1,839 sends were acknowledged on it (namesrv refused two frames as too long).")
    assert verdict(flood(out=(50, 99))).endswith(  # still out at the last sample
        "broker-a was missing from namesrv's route for 9 s, until the end of the run while 920 sends were "
        "acknowledged on it (namesrv refused two frames as too long).")
    assert "namesrv" not in verdict(flood(out=None))  # listed all along
    assert "namesrv" not in verdict(flood(out=(20, 22)))  # a restarted broker's first registration: not a finding


def test_a_partition_is_named_by_its_sides() -> None:
    cut = {"kind": "fault", "outcome": "ok", "target": "cluster",
           "params": {"fault_kind": "partition", "evidence": {"groups": [["broker-a"], ["namesrv", "producers"]]}}}
    s = summary("partition-namesrv", "false", 0, None, events=[cut])
    assert verdict(s) == ("partition-namesrv: with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=false and the "
                          "no_retry send policy, one network partition (broker-a | namesrv, producers) lost 0 "
                          "acknowledged messages; none delivered twice.")


def test_a_link_fault_is_named_by_its_ends_and_each_brokers_round_trip_inside_it_is_stated() -> None:
    slow = {"kind": "fault", "outcome": "ok", "target": None,
            "params": {"fault_id": "slow-a", "fault_kind": "link", "evidence": {"from": "producers", "to": "broker-a"}}}
    pct = {"n": 10, "p95": 1, "max": 1}
    by = {"broker-a": {"during": {**pct, "p50": 250, "p99": 1011}, "outside": {**pct, "p50": 13, "p99": 338}},
          "broker-b": {"during": {**pct, "p50": 7, "p99": 443}, "outside": {**pct, "p50": 12, "p99": 534}}}
    s = summary("link-slow-broker", "false", 0, None, events=[slow], windows=[{"id": "slow-a", "send_ms_by_broker": by}])
    assert verdict(s) == ("link-slow-broker: with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=false and the "
                          "no_retry send policy, one link fault (producers -> broker-a) lost 0 acknowledged messages; "
                          "none delivered twice; during link fault slow-a, acked sends took p50 250 / p99 1011 ms on "
                          "broker-a (outside it 13 / 338 ms), p50 7 / p99 443 ms on broker-b (outside it 12 / 534 ms).")

def test_a_slave_cut_from_its_master_names_the_weak_statuses_and_the_catch_up() -> None:
    cut = {"kind": "fault", "outcome": "ok", "target": "cluster", "start_ms": 10_000, "end_ms": 70_000,
           "params": {"fault_kind": "partition", "fault_id": "cut-a-slave",
                      "evidence": {"groups": [["broker-a"], ["broker-a-s"]]}}}

    def sample(ts: int, master: int, slave: int | None) -> dict[str, Any]:
        return {"ts_ms": ts, "brokers": {"broker-a": {"commit_max": master}, "broker-a-s": {"commit_max": slave},
                                         "broker-b": {"commit_max": 5}}}
    # before, during (the slave stands still at 100), the heal, a sample that failed (null), caught up
    mon = [sample(9_000, 100, 100), sample(40_000, 300, 100), sample(69_500, 2_500_100, 100),
           sample(71_000, 2_600_000, None), sample(74_000, 2_700_000, 2_500_100)]
    s = summary("partition-sync-slave", "false", 0, None, events=[cut], monitor=mon,
                counts={"acked_weak": 387}, errors={"by_status": {"SEND_OK": 10, "FLUSH_SLAVE_TIMEOUT": 387}})
    assert verdict(s).endswith(
        "lost 0 acknowledged messages; none delivered twice; 387 acknowledged only with a weak flush/slave status: "
        "FLUSH_SLAVE_TIMEOUT 387 (0 of them lost); broker-a-s fell 2.5 MB behind its master during cut-a-slave and "
        "held all of it 4.0 s after the heal.")
    assert verdict({**s, "monitor": mon[:4]}).endswith("and had not caught up at the last sample.")
    assert "fell" not in verdict({**s, "monitor": [sample(40_000, 300, 300)]})  # never behind: nothing to say



def test_weak_acknowledgements_a_power_loss_erased_are_counted_and_testable_as_a_figure() -> None:
    """Seed 003 with power loss: of the FLUSH_DISK_TIMEOUT answers the application took as sent, how many
    are in no store now (never delivered, or delivered and then erased); SEND_OK ones apart."""
    from analysis.judge.figures import value
    store = {"lost_from_store": 40, "lost_in_delivery": 0, "indeterminate_stored": 0, "erased_after_delivery": 25,
             "gone_by_broker": {"broker-a": 65}, "gone_by_status": {"FLUSH_DISK_TIMEOUT": 61, "SEND_OK": 4},
             "lost_by_broker": {"broker-a": 40}}
    s = summary("power-loss-weak", "false", 40, store, counts={"acked_weak": 700, "acked_weak_lost": 37},
                errors={"by_status": {"SEND_OK": 9000, "FLUSH_DISK_TIMEOUT": 700}})
    assert "700 acknowledged only with a weak flush/slave status: FLUSH_DISK_TIMEOUT 700 (37 of them lost; 61 in " \
           "no broker's store now)" in verdict(s)
    assert value(s, "gone_status.FLUSH_DISK_TIMEOUT") == 61 and value(s, "gone_status.SEND_OK") == 4
    assert value(s, "gone_status.FLUSH_SLAVE_TIMEOUT") == 0 and value({**s, "store_check": None}, "gone_status.SEND_OK") is None
    store["gone_by_status"] = {"SEND_OK": 65}  # only strong acknowledgements gone: the weak clause says nothing more
    assert "(37 of them lost)" in verdict(s)

def test_the_acknowledgements_a_power_loss_took_are_set_against_the_flush_interval() -> None:
    """Issue 48: how far before the cut the acknowledgements now in no store reach, beside the broker's
    flush interval (what ASYNC_FLUSH risks is its unflushed tail)."""
    cut = 1_800_000_015_000
    store = {"lost_from_store": 3, "lost_in_delivery": 0, "indeterminate_stored": 0, "erased_after_delivery": 9,
             "gone_by_broker": {"broker-a": 12}, "gone_acked_ms_by_broker": {"broker-a": [cut - 1_950, cut - 3]}}
    power = {"kind": "fault", "outcome": "ok", "target": "broker-a",
             "params": {"fault_id": "power-ab", "fault_kind": "power_loss",
                        "evidence": {"nodes_lost": {"broker-a": {"cut_ms": cut}, "broker-b": {"cut_ms": cut}}}}}
    s = summary("power-loss-async", "false", 3, store, events=[power])
    s["cluster"]["brokers"]["broker-a"].update(brokerName="broker-a", flushIntervalCommitLog="2000")
    s["cluster"]["brokers"]["broker-b"].update(brokerName="broker-b", flushDiskType="SYNC_FLUSH")
    assert "broker-a's acknowledgements in no store came 1,950 ms to 3 ms before its cut (ASYNC_FLUSH every " \
           "2,000 ms)" in verdict(s)
    assert "broker-b's acknowledgements" not in verdict(s)  # none of its is gone
    store["gone_acked_ms_by_broker"] = {"broker-a": [cut - 700, cut + 40]}  # an answer read just after the cut
    del s["cluster"]["brokers"]["broker-a"]["flushIntervalCommitLog"]
    assert "came from 700 ms before its cut to 40 ms after it (ASYNC_FLUSH every 500 ms)" in verdict(s)


def test_a_noise_short_of_its_intent_is_stated_and_not_named_as_if_it_ran() -> None:
    words = "Redis noise reached 6 % of its 200 SET/s (worst of 8 instances)"
    short = noise_intent(shared_host(busy={}), "redis_noise", True, words, 0.06)
    v = verdict(short)
    assert "one page-cache limit of broker-a, Redis disk noise (short of intent: 6 %) and fio disk noise lost 0" in v
    assert v.endswith(f"none delivered twice; {words}.")
    assert v.count("Redis disk noise") == 1  # never named bare
    # words with a note of their own stay one clause
    short["events"][1]["params"]["evidence"]["intent"]["words"] = words + "; 3 of 8 drivers left no record"
    assert verdict(short).endswith(f"none delivered twice; {words}, 3 of 8 drivers left no record.")
    # without `words`, from `reached`
    del short["events"][1]["params"]["evidence"]["intent"]["words"]
    assert verdict(short).endswith("none delivered twice; Redis disk noise reached 6 % of its intent.")
    # a noise that reached its intent, or one of an older run that does not report it: nothing about achievement
    full = noise_intent(shared_host(busy={}), "redis_noise", False, "Redis noise reached 100 % of its 200 SET/s", 1.0)
    assert verdict(full) == verdict(shared_host(busy={})) and "reached" not in verdict(full)


def test_a_kill_pause_or_partition_short_of_its_intent_is_named_so() -> None:
    """Every kind, not only noise (issue 47): the verdict names the fault with its worst measure's words."""
    from chaos.kinds.kill import kill_intent
    from chaos.kinds.partition import partition_intent
    from chaos.kinds.pause import pause_intent
    from chaos.kinds.restart import restart_intent

    def fault(kind: str, target: str, it: dict[str, Any], **ev: Any) -> dict[str, Any]:
        return {"kind": "fault", "outcome": "ok", "target": target,
                "params": {"fault_kind": kind, "fault_id": f"{kind}-{target}", "evidence": {"intent": it, **ev}}}
    s = summary("chaos", "false", 0, None)
    s["events"] = [fault("kill", "broker-a", kill_intent("broker-a", 42, "SIGTERM", None, 60)),
                   fault("restart", "broker-a", restart_intent("broker-a", 42, 43, 6.0, True)),
                   fault("pause", "broker-b", pause_intent("broker-b", 5, 5.0, 1.2, False)),
                   fault("partition", "cluster", partition_intent("network partition (broker-a | namesrv)", 8, 8,
                                                                  ["broker-a -> namesrv"], [], 0, 0),
                         groups=[["broker-a"], ["namesrv"]])]
    v = verdict(s)
    assert ("with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=false and the no_retry send policy, one SIGKILL "
            "of broker-a (short of intent: pid 42 still alive 60 s after SIGTERM), one pause of broker-b (short of "
            "intent: froze 1.2 of 5 s) and one network partition (broker-a | namesrv; short of intent: 0 of 1 links "
            "went silent) lost 0") in v, v
    assert v.endswith("none delivered twice.")  # said where each is named, not again at the end
    # two pauses, one short: how many of them, and the worst
    s["events"][2:3] = [fault("pause", "broker-b", pause_intent("broker-b", 5, 5.0, 5.0, False)),
                        fault("pause", "broker-b", pause_intent("broker-b", 5, 5.0, 0.5, False))]
    assert "two pauses of broker-b (1 of 2 short of intent: froze 0.5 of 5 s)" in verdict(s)
    # a restart that fell short is named though it follows a kill
    s["events"][1] = fault("restart", "broker-a", restart_intent("broker-a", 42, None, 30.0, True))
    assert "one restart of broker-a (short of intent: not running 30.0 s after the restart began)" in verdict(s)
    # the same faults, all as asked: named bare, as before intents
    s["events"] = [fault("kill", "broker-a", kill_intent("broker-a", 42, "SIGKILL", 12, 10)),
                   fault("pause", "broker-b", pause_intent("broker-b", 5, 5.0, 5.0, False))]
    assert "one SIGKILL of broker-a and one pause of broker-b lost 0" in verdict(s) and "intent" not in verdict(s)
    # compared with another run, it says the run did not have the fault it names
    other = summary("chaos-b", "false", 0, None)
    other["events"] = [fault("pause", "broker-b", pause_intent("broker-b", 5, 5.0, 1.2, False))]
    other["extends"] = "chaos"
    said = comparisons([s, other])
    assert any("but in chaos-b pause of broker-b: froze 1.2 of 5 s, short of its intent" in x for x in said), said
    # the HTML report lists each fault's achieved against asked, the short ones marked
    page = render([whole(other)])
    assert "What each fault achieved" in page and "<td>24 %</td><td>SHORT</td><td>pause of broker-b: froze 1.2 of 5 s" in page


def test_each_remedy_is_compared_with_its_base_even_when_not_its_neighbour() -> None:
    base = shared_host(latency_ms={"send_from_intended": {"p99": 850.0}})
    quiet = shared_host("shared-host-quiet", busy={}, extends="shared-host", latency_ms={"send_from_intended": {"p99": 9.0}})
    quiet["events"] = []
    wait = shared_host("shared-host-wait-queue", busy={"[REJECTREQUEST]": 120}, extends="shared-host",
                       latency_ms={"send_from_intended": {"p99": 120.0}})
    wait["cluster"]["brokers"]["broker-a"]["waitTimeMillsInSendQueue"] = "750"
    wait["load"] = {"policy": {"kind": "no_retry"}, "timeout": "3s"}
    said = comparisons([base, quiet, wait])
    assert said == [
        "shared-host-quiet against its base shared-host (faults: one page-cache limit of broker-a, Redis disk noise "
        "and fio disk noise \u2192 none): busy refusals 4,402 of 40,000 (11 %) \u2192 0 of 40,000 (0 %); lost 0 "
        "\u2192 0; duplicated 0 \u2192 0; p99 send latency from the intended time 850 \u2192 9 ms.",
        "shared-host-wait-queue against its base shared-host (waitTimeMillsInSendQueue 50 \u2192 750, timeout unset "
        "\u2192 3s): busy refusals 4,402 of 40,000 (11 %) \u2192 120 of 40,000 (0.3 %); lost 0 \u2192 0; "
        "duplicated 0 \u2192 0; p99 send latency from the intended time 850 \u2192 120 ms."]
    # the flood and 5.x's split registration: the outage, from 20 s to none
    split = flood("retry-flood-split", out=None, extends="retry-flood")
    for b in split["cluster"]["brokers"].values():
        b["enableSplitRegistration"] = "true"
    assert comparisons([flood(), summary("control", "false", 0, None), split])[-1] == (
        "retry-flood-split against its base retry-flood (enableSplitRegistration unset \u2192 true): lost 0 \u2192 0; "
        "duplicated 0 \u2192 0; out of namesrv's route broker-a 20 s \u2192 none.")
    # a base not in the report, or an unfinished run: no sentence
    assert comparisons([quiet, wait]) == []
    cut = dict(wait, complete=False)
    assert comparisons([base, cut]) == []


def test_a_remedy_whose_noise_fell_short_is_not_compared_as_if_it_had_it() -> None:
    words = "Redis noise reached 6 % of its 200 SET/s (worst of 8 instances)"
    wait = noise_intent(shared_host("shared-host-wait-queue", busy={"[REJECTREQUEST]": 120}, extends="shared-host"),
                        "redis_noise", True, words, 0.06)
    (said,) = comparisons([shared_host(), wait])
    assert said.endswith(f"; but in shared-host-wait-queue {words}, short of its intent, so that run did not have "
                         "the fault it names.")
    assert "faults:" not in said  # the same faults were asked of both


def test_a_neighbour_already_compared_on_loss_is_not_compared_again_as_a_remedy() -> None:
    on = summary("oom-tsp-on", "true", 99, STORE)
    off = summary("oom-tsp-off", "false", 0, {**STORE, "lost_from_store": 0}, extends="oom-tsp-on")
    assert comparisons([on, off]) == [
        "Under one kernel OOM kill of broker-a: with transientStorePoolEnable=true (oom-tsp-on) the cluster lost 99 "
        "acknowledged messages (verified absent from every broker's store); with transientStorePoolEnable=false "
        "(oom-tsp-off), 0."]


def whole(s: dict[str, Any]) -> dict[str, Any]:
    """A synthetic summary with the rest of what the HTML report reads, in the shape of older runs:
    no `extends`, no `answers`, no noise intent, no batch positions."""
    lat = {"n": 10, "p50": 2.0, "p95": 5.0, "p99": 9.0, "max": 30.0}
    counts = {"keys": 100, "attempts": 100, "acked": 100, "acked_weak": 0, "ok": 100, "duplicate_deliveries": 0,
              "recovered": 0, "failed": 0, "indeterminate": 0, **s["counts"]}
    series = s.get("series") or [{"t": T0 + i} for i in range(5)]
    return {"run_id": f"20261127T000000-{s['scenario']}-abcdef", "run_dir": f"/runs/{s['scenario']}",
            "versions": {"rocketmq": "5.5.0"}, "latency_ms": {k: lat for k in ("send", "send_from_intended", "end_to_end")},
            "windows": [], "warnings": [], "corrupted": [], "corrupted_by_kind": {},
            "errors": {"by_outcome": {}, "by_status": {"SEND_OK": 100}, "by_code": {}, "by_remark_prefix": {}, "by_broker": {}},
            **{k: v for k, v in s.items() if k not in ("answers", "extends")}, "counts": counts,
            "series": [{"attempts": 10, "acked": 10, "errors": 0, "timeouts": 0, "busy": 0, "deliveries": 10, "lost": 0,
                        "duplicated": 0, "indeterminate": 0, "send_p50_ms": 2, "send_p99_ms": 9, "intended_p50_ms": 2,
                        "intended_p99_ms": 9, **r} for r in series]}


def test_old_summaries_without_the_new_keys_still_render_and_new_ones_show_the_comparison() -> None:
    old = [whole(shared_host()), whole(flood())]
    assert all("extends" not in s and "answers" not in s for s in old)
    page = render(old)
    assert "4,402 of 40,000 sends (11 %) refused busy: REJECTREQUEST 3,947" in page  # from the error counts
    assert "broker-a was missing from namesrv&#x27;s route for 20 s while 1,839 sends" in page
    assert "against its base" not in page and "None" not in page
    new = [whole(shared_host()), whole(shared_host("shared-host-quiet", busy={})), whole(shared_host("shared-host-tsp"))]
    new[2]["extends"] = "shared-host"
    new[2]["cluster"]["brokers"]["broker-a"]["transientStorePoolEnable"] = "true"
    page = render(new)
    assert "<p class=verdict>shared-host-tsp against its base shared-host (transientStorePoolEnable unset \u2192 true)" in page


def test_a_policy_against_its_base_names_the_timeouts_and_the_keys_delivered_though_their_sends_failed() -> None:
    """partition-producers' shape: broker-a's answers dropped; `retry` resends every timeout (each a
    duplicate), `no_retry` resends none (each timed-out key delivered all the same)."""
    retry = summary("partition-producers", "false", 0, None, counts={"duplicated": 399, "recovered": 0},
                    causes={"producer_resend": 399}, load={"policy": {"kind": "retry"}},
                    errors={"by_outcome": {"ok": 16999, "timeout": 400}})
    once = summary("partition-producers-no-retry", "false", 0, None, counts={"recovered": 391},
                   load={"policy": {"kind": "no_retry"}}, errors={"by_outcome": {"ok": 16447, "timeout": 391}},
                   extends="partition-producers")
    (said,) = comparisons([retry, once])
    assert said == ("partition-producers-no-retry against its base partition-producers (send policy retry \u2192 "
                    "no_retry): attempts timed out 400 \u2192 391; delivered though the application was told they "
                    "failed 0 \u2192 391; lost 0 \u2192 0; duplicated 399 \u2192 0.")
    # two remedies of one base, neither losing: each against the base, not a loss sentence between them
    java = summary("partition-producers-java-default", "false", 0, None, counts={"recovered": 170},
                   load={"policy": {"kind": "java_default"}}, errors={"by_outcome": {"timeout": 170}},
                   extends="partition-producers")
    said = comparisons([retry, once, java])
    assert len(said) == 2 and all(" against its base partition-producers " in x for x in said)
    # runs without timeouts or such keys say nothing of them (the sentences above are unchanged)
    assert "timed out" not in comparisons([shared_host(), shared_host("shared-host-quiet", extends="shared-host")])[0]


def failover_section(**f: Any) -> dict[str, Any]:
    """A `failover` section as analysis/replication/failover.py writes it: broker-a-0 SIGKILLed, broker-a-1 elected."""
    fo = {"fault_id": "kill-a", "fault_kind": "kill", "outcome": "ok", "group": "broker-a", "old_master": "broker-a-0",
          "role": "master-of:broker-a", "start_ms": 1_700_000_010_000, "end_ms": 1_700_000_010_200, "mode": "controller",
          "was_master": True, "samples_after": 15, "detected_ms": 1_700_000_012_000, "detection_s": 2.0,
          "elected_ms": 1_700_000_015_000, "election_s": 5.0, "new_master": "broker-a-1", "epoch": 2, "reasons": {},
          "first_ack_new_master_ms": 1_700_000_017_300, "first_ack_new_master_s": 7.3,
          "first_ack_any_ms": 1_700_000_017_300, "first_ack_any_s": 7.3, "first_ack_any_node": "broker-a-1",
          "two_master_seconds": [], "lost_in_switch": 0, **f}
    return {"groups": {"broker-a": {"mode": "controller", "nodes": ["broker-a-0", "broker-a-1", "broker-a-2"],
                                    "acked_by_node": {"broker-a-0": 900, "broker-a-1": 1100}}},
            "failovers": [fo], "two_master_windows": [{"group": "broker-a", "t": 1_700_000_020, "nodes": {"broker-a-0": 3, "broker-a-1": 12}}]
            if fo["two_master_seconds"] else [],
            "lost": {"checked": 0, "lost_in_switch": 0, "stored_on_other_replica": 0, "stored_on_acking_node": 0,
                     "stored_ack_node_unknown": 0, "never_stored": 0, "examples": []},
            "duplicates_after_switch": {"served_by_another_node": 0, "served_by_the_same_node": 0, "server_unknown": 0}}


def test_the_verdict_names_each_failover_its_times_its_loss_and_its_two_master_seconds() -> None:
    s = summary("ctl-kill", "false", 0, None, failover=failover_section())
    assert verdict(s).endswith("none delivered twice; broker-a after the SIGKILL of broker-a-0 (its master): detected "
                               "after 2.0 s, broker-a-1 elected after 5.0 s, first ack on it after 7.3 s, 0 acknowledged "
                               "messages lost in the switch, no second with two acknowledging nodes.")
    two = summary("ctl-split", "false", 0, None, failover=failover_section(two_master_seconds=[1_700_000_020]))
    assert "two masters acknowledged in 1 s: 22:13:40 (broker-a-0 3, broker-a-1 12)" in verdict(two)
    again = summary("ctl-again", "false", 0, None, failover=failover_section(duplicates_after_switch=12))
    assert ("0 acknowledged messages lost in the switch, 12 deliveries read again from another node than the first "
            "time (a duplicate of the switch), no second") in verdict(again)
    # not seen is said so, with why, never claimed
    gone = failover_section(detection_s=None, election_s=None, new_master=None, first_ack_new_master_s=None,
                            first_ack_any_s=None, first_ack_any_node=None, lost_in_switch=None,
                            reasons={"detection": "no monitor sample of the group after the fault",
                                     "election": "no monitor sample of the group after the fault"})
    assert verdict(summary("cut", "false", 0, None, failover=gone)).endswith(
        "broker-a after the SIGKILL of broker-a-0 (its master): not detected (no monitor sample of the group after the "
        "fault), no election (no monitor sample of the group after the fault), loss in the switch not checked against "
        "the stores, no second with two acknowledging nodes.")
    assert "broker-a after" not in verdict(summary("plain", "false", 0, None, failover=None))
    page = render([whole(two)])
    assert "Failovers of the replicated groups" in page and "broker-a-0 3, broker-a-1 12" in page
    assert "Failovers" not in render([whole(summary("plain", "false", 0, None))])


def test_an_ordered_and_a_transactional_run_get_their_contracts_as_tables_in_the_report() -> None:
    """Issue 50: the verdict's clauses on order and transactions, as sections of the HTML report (each
    anomaly and cause counted, the windows on the plots' time axis, examples; every transaction class)."""
    order = {"keys": 80, "messages": 4000, "keys_in_order": 68, "keys_moved": 9,
             "keys_by_anomaly": {"reordered": 5, "repeat_out_of_order": 7, "gap": 1},
             "messages_by_anomaly": {"reordered": 9, "repeat_out_of_order": 40, "gap": 1, "repeat_in_order": 3},
             "causes": {"moved": 9, "stayed": 3, "by_home_broker": {"broker-a": 12},
                        "messages": {"moved": 40, "stayed": 10, "by_home_broker": {"broker-a": 50}}},
             "keys_by_home_broker": {"broker-a": 40, "broker-b": 40},
             "windows": [{"start_ms": (T0 + 20) * 1000, "end_ms": (T0 + 23) * 1000}],
             "examples": [{"shard_key": "abc-w0-u1k2", "seqs": list(range(1, 30))}]}
    page = render([whole(summary("order-kill", "false", 0, None, order=order))])
    assert "<h3>Per-key order</h3>" in page and "12 of 80 sharding keys broke order over 4,000 deliveries" in page
    assert "<td>gap: never delivered, though a later one of its key was</td><td>1</td><td>1</td>" in page
    assert "<td>first sent to broker-a</td><td>12</td><td>50</td><td>of 40 keys there</td>" in page
    assert "<td>moved to another queue</td><td>9</td><td>40</td>" in page
    assert "<td>1</td><td>20</td><td>23</td><td>3</td>" in page  # the window, on the time axis of the plots
    assert "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, ..." in page
    txn = {"keys": 100, "extra_deliveries": 4, "checked_after_end": 2, "abandoned": 0, "checks": 9,
           "classes": {"committed_delivered": 60, "committed_lost": 0, "committed_undelivered_at_stop": 0,
                       "rolled_back": 30, "rolled_back_delivered": 1, "unknown_in_time": 5, "unknown_late": 2,
                       "unknown_never": 0, "undecided": 0, "discarded": 2}}
    page = render([whole(summary("txn-kill", "false", 0, None, transactions=txn))])
    assert "<h3>Transactions</h3>" in page and "<td>rolled back and DELIVERED all the same</td><td>1</td>" in page
    assert "<td>asked about by the broker after their end</td><td>2</td>" in page and "producer crash" not in page
    assert "Per-key order" not in page and "Transactions" not in render([whole(summary("plain", "false", 0, None))])
