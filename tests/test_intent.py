"""What each fault kind achieved against what it was asked (chaos/intent.py, issue 47): each kind's
intent from measured values, as its evidence carries it. Pure logic; the real faults' intents are
checked where those faults run (test_chaos, test_failover_run, test_partition, test_link,
test_rocketmq_faults, test_shared_host, test_issue_9717)."""
from __future__ import annotations

import pytest

from chaos.intent import happened, intent, measure
from chaos.kinds.blkio_throttle import blkio_intent
from chaos.kinds.cleanup_retry_topics import cleanup_intent
from chaos.kinds.jvm_oom import jvm_oom_intent
from chaos.kinds.kill import kill_intent
from chaos.kinds.link import LinkParams, link_intent
from chaos.kinds.oom_kill import oom_intent
from chaos.kinds.page_cache_limit import page_cache_intent
from chaos.kinds.partition import partition_intent
from chaos.kinds.pause import pause_intent
from chaos.kinds.restart import restart_intent
from rmqchaos.shortfall import SHORT_BELOW

pytestmark = pytest.mark.fast


def test_measures_with_words_read_worst_first_and_the_worst_is_the_brief() -> None:
    ms = [happened("died", "pid 7", True, "pid 7 gone 20 ms after SIGKILL"),
          measure("s frozen", "broker-a", 5, 1.2, "froze 1.2 of 5 s")]
    it = intent(ms, "x")
    assert it == {"measures": ms, "reached": 0.24, "short": True, "words": "x: froze 1.2 of 5 s; pid 7 gone 20 ms after SIGKILL",
                  "brief": "froze 1.2 of 5 s"}
    assert happened("died", "pid 7", False, "w") == {"what": "died", "where": "pid 7", "asked": 1.0, "achieved": 0.0, "words": "w"}
    assert intent([measure("s frozen", "b", 5, 5 * SHORT_BELOW, "w")], "x")["short"] is False  # the margin itself: not short
    # a cliff (a table past a frame) is short up to and at the whole ask, even where 3 decimals read 1.0
    assert intent([measure("B", "b", 262_144, 262_144, "w")], "x", cliff=True)["short"] is True
    assert intent([measure("B", "b", 262_144, 262_145, "w")], "x", cliff=True)["short"] is False
    assert intent([measure("B", "b", 262_144, 262_100, "w")], "x", cliff=True)["reached"] == 1.0
    assert intent([measure("B", "b", 262_144, 262_100, "w")], "x", cliff=True)["short"] is True
    assert intent([], "x", none="nothing to measure") == {"measures": [], "reached": None, "short": False,
                                                          "words": "x: nothing to measure"}


def test_kill_is_the_pid_gone_and_when() -> None:
    it = kill_intent("broker-a", 4242, "SIGKILL", 35, 10)
    assert (it["reached"], it["short"], it["words"]) == (1.0, False, "SIGKILL of broker-a: pid 4242 gone 35 ms after SIGKILL")
    it = kill_intent("broker-a", 4242, "SIGTERM", None, 60)
    assert (it["reached"], it["short"], it["brief"]) == (0.0, True, "pid 4242 still alive 60 s after SIGTERM")
    it = kill_intent("broker-a", 4242, "SIGQUIT", None, 0)  # a thread dump: no death to measure, never short
    assert (it["reached"], it["short"]) == (None, False) and "SIGQUIT does not end the node" in it["words"]


@pytest.mark.parametrize("asked, held, frozen, ended, reached, brief", [
    (5, 5.01, 5.01, False, 1.002, "froze 5.01 of 5 s"),
    (5, 5.0, 1.2, False, 0.24, "froze 1.2 of 5 s"),  # thawed early (a SIGKILL of the node thaws it)
    (60, 20.3, 20.3, True, 1.0, "froze 20.3 of 20.3 s (the load ended first)"),  # asked only until the load ended
    (60, 20.3, 2.0, True, 0.099, "froze 2 of 20.3 s (the load ended first)"),
])
def test_pause_is_the_seconds_seen_frozen(asked: float, held: float, frozen: float, ended: bool, reached: float,
                                          brief: str) -> None:
    it = pause_intent("broker-a", asked, held, frozen, ended)
    assert (it["reached"], it["short"], it["brief"]) == (reached, reached < SHORT_BELOW, brief)
    assert it["words"] == f"pause of broker-a: {brief}"


def test_restart_is_a_new_pid_and_a_broker_listed() -> None:
    it = restart_intent("broker-a", None, 4343, 6.23, True)
    assert (it["short"], it["words"]) == (False, "restart of broker-a: back as pid 4343 after 6.2 s; listed by namesrv")
    assert restart_intent("broker-a", 4242, 4343, 6.2, False)["brief"] == "not listed by namesrv"
    assert restart_intent("broker-a", 4242, 4242, 0.1, True)["brief"] == "still pid 4242"
    it = restart_intent("namesrv", 1, None, 30, None)  # not a broker: no registration to measure
    assert (it["short"], len(it["measures"]), it["brief"]) == (True, 1, "not running 30.0 s after the restart began")


def test_oom_kill_and_jvm_oom_say_who_killed_it() -> None:
    it = oom_intent("broker-a", 42, True, 0.83, (0, 1), None)
    assert (it["short"], it["words"]) == (False, "kernel OOM kill of broker-a: pid 42 gone, killed 0.83 s after the "
                                                 "squeeze began; the kernel's OOM-kill count went 0 -> 1")
    assert oom_intent("broker-a", 42, True, 0.8, (3, 3), None)["brief"] == "the kernel's OOM-kill count went 3 -> 3"
    assert oom_intent("broker-a", 42, True, 0.8, (0, 1), False)["brief"] == "the engine records no OOM kill"
    assert len(oom_intent("broker-a", 42, True, 0.8, (0, 1), True)["measures"]) == 3
    assert jvm_oom_intent("broker-a", 42, True, 1.5, "Terminating due to java.lang.OutOfMemoryError")["short"] is False
    assert jvm_oom_intent("broker-a", 42, True, 1.5, None)["brief"] == "its output names no OutOfMemoryError"


def test_partition_is_its_rules_held_and_its_links_silent() -> None:
    label = "network partition (broker-a | namesrv)"
    it = partition_intent(label, 8, 8, ["broker-a -> namesrv", "namesrv -> broker-a"],
                          ["broker-a -> namesrv", "namesrv -> broker-a"], 3, 1)
    assert (it["short"], it["words"]) == (False, f"{label}: 8 of 8 rules held; 2 of 2 links went silent; 1 of 3 open "
                                                 "connections closed by its end")  # a DROP closes none itself: told only
    it = partition_intent(label, 8, 8, ["broker-a -> namesrv", "namesrv -> broker-a"], ["broker-a -> namesrv"], 0, 0)
    assert (it["reached"], it["short"], it["brief"]) == (0.5, True, "1 of 2 links went silent")
    it = partition_intent(label, 8, 5, [], [], 0, 0)  # no link answered before: only the rules to measure
    assert (it["reached"], it["brief"], len(it["measures"])) == (0.625, "5 of 8 rules held", 1)


def _link(**p: object) -> LinkParams:
    return LinkParams.model_validate({"from": "producers", "to": "broker-a", **p})


def test_link_is_the_toxic_measured_through_the_proxy() -> None:
    ev = {"rtt_before_ms": 0.1, "rtt_during_ms": 201.3, "probe": "127.0.10.201 -> 127.0.10.11:10911",
          "reconnect_at_start": {"reconnected": ["127.0.10.201:5->127.0.10.11:10911 via proxy"]}}
    it = link_intent(_link(latency="200ms"), ev)
    assert (it["short"], it["words"]) == (False, "link fault (producers -> broker-a): 1 of 1 reconnected connections "
                                                 "went through the proxy; added 201 of 200 ms to a round trip")
    assert link_intent(_link(latency="200ms", stream="both"), ev)["brief"] == "added 201 of 400 ms to a round trip"
    slow = {**ev, "rtt_during_ms": 40.1, "reconnect_at_start": {"reconnected": ["a via proxy", "b direct"]}}
    it = link_intent(_link(latency="200ms"), slow)
    assert (it["short"], it["brief"]) == (True, "added 40 of 200 ms to a round trip") and it["reached"] == 0.2
    lost = {"rtt_before_ms": 0.1, "rtt_during_ms": None, "probe_during": {"error": "TimeoutError: timed out"}}
    assert link_intent(_link(blackhole=True), lost)["short"] is False
    assert link_intent(_link(latency="200ms"), lost)["brief"] == "its probe got no answer (TimeoutError: timed out)"
    it = link_intent(_link(reset=True), {"rtt_before_ms": 0.1, "rtt_during_ms": 0.2})
    assert (it["short"], it["brief"]) == (True, "its probe was answered in 0.2 ms")
    it = link_intent(_link(bandwidth_kb_s=100, reconnect=False), {"rtt_before_ms": 0.1, "rtt_during_ms": 0.2})
    assert (it["reached"], it["short"]) == (None, False)


def test_disk_throttle_page_cache_limit_and_cleanup() -> None:
    caps = {"write_bps": 5_000_000}
    assert blkio_intent("broker-a", caps, caps, caps)["short"] is False
    assert blkio_intent("broker-a", caps, caps, {})["brief"] == "caps read back none at the end, not write_bps 5,000,000"
    it = page_cache_intent("broker-a", 32, [30, 31, 33, 31])
    assert (it["short"], it["brief"]) == (False, "page cache 31 MB (median of 4 samples) within its 32 MB cap")
    it = page_cache_intent("broker-a", 32, [60, 64, 70])
    assert (it["reached"], it["short"], it["brief"]) == (0.5, True, "page cache 64 MB (median of 3 samples) over its 32 MB cap")
    assert page_cache_intent("broker-a", 32, [])["reached"] is None
    assert cleanup_intent(825, 3)["brief"] == "deleted 822 of 825 stale topics"
    assert cleanup_intent(825, 500)["short"] is True
    assert cleanup_intent(0, 0)["reached"] is None  # nothing stale: nothing to measure
