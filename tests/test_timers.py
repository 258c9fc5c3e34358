"""Timers (issue 51) on planted key tables: early, late and lost timer messages classified exactly,
counted under the fault they waited through; the spec's timer settings and their one-line errors."""
from __future__ import annotations

from typing import Any

import pytest

from analysis.contracts.timers import fault_windows, timer_check, timer_phrase
from rmqchaos.ledger.schema import due_of

KEYS = "key string, class string, acked int, first_start_ms long, first_receive_ms long"


@pytest.mark.fast
def test_a_keys_due_time_is_read_from_it() -> None:
    assert due_of("ab12-w0-1-7@1764460000123") == 1764460000123
    assert due_of("ab12-w0-1-7") is None and due_of("x@") is None and due_of(None) is None


def _kill(fid: str, start: int, end: int) -> dict[str, Any]:
    return {"kind": "fault", "target": "broker-a", "params": {"fault_id": fid, "fault_kind": "kill"}, "start_ms": start,
            "end_ms": end}


def test_early_late_and_lost_timers_are_classified_exactly(kept_spark: Any) -> None:
    # due at 10_000 unless said; slack 1_000 (the wheel's precision)
    rows = [("on-time@10000", "ok", 1, 1_000, 10_200),         # 0.2 s late
            ("within-slack@10000", "ok", 1, 1_000, 9_100),      # 0.9 s before due: inside the slot, not early
            ("early@10000", "ok", 1, 1_000, 8_999),             # 1.001 s before due: early
            ("very-early@60000", "duplicated", 1, 1_000, 20_000),  # 40 s early (its first delivery)
            ("late@10000", "ok", 1, 1_000, 17_000),             # 7 s late: over 5 s
            ("lost@10000", "lost", 1, 1_000, None),
            ("stop@90000", "undelivered_at_stop", 1, 80_000, None),
            ("failed@10000", "failed", 0, 1_000, None),        # never acknowledged: not judged
            ("plain-1", "ok", 1, 1_000, 1_500)]                # another load's key
    events = [_kill("kill-a", 5_000, 5_200), _kill("kill-a-restart", 15_000, 16_000),
              {"kind": "load", "target": "T", "start_ms": 0, "end_ms": 100_000}]
    on_b = {"late@10000", "lost@10000"}
    sends = [("outcome", k, "ok" if a else "error", 2_000, "broker-b" if k in on_b else "broker-a", 0)
             for k, _, a, _, _ in rows]
    t = timer_check(kept_spark.createDataFrame(rows, KEYS), events, slack_ms=1_000,
                    send=kept_spark.createDataFrame(sends, "rec string, key string, outcome string, end_ms long, "
                                                           "broker string, queue_id int"))
    assert t is not None
    assert (t["keys"], t["delivered"], t["lost"], t["undelivered_at_stop"]) == (7, 5, 1, 1)
    assert t["early"]["keys"] == 2 and t["early"]["most_ms"] == 40_000
    assert [e["key"] for e in t["early"]["examples"]] == ["very-early@60000", "early@10000"]
    # lateness of the three not early: 0.2 s, 0 (inside the slot), 7 s
    assert t["late_ms"] == {"n": 3, "p50": 200, "p95": 7_000, "p99": 7_000, "max": 7_000}
    assert t["late_ms_by_broker"] == {"broker-a": {"n": 2, "p50": 0, "p95": 200, "p99": 200, "max": 200},
                                      "broker-b": {"n": 1, "p50": 7_000, "p95": 7_000, "p99": 7_000, "max": 7_000}}
    assert t["late_buckets"] == {"<= 1 s": 2, "1-5 s": 0, "5-30 s": 1, "30 s-2 min": 0, "> 2 min": 0}
    assert t["late_over"] == {"ms": 5_000, "keys": 1}
    # every key but stop@ waited through kill-a (sent at 1 s, due at 10 s or later); stop@ through none
    assert [(f["id"], f["exposed"], f["early"], f["late"], f["lost"]) for f in t["by_fault"]] == [
        ("kill-a", 6, 2, 1, 1), ("kill-a-restart", 0, 0, 0, 0)]
    assert t["no_fault"] == {"exposed": 1, "early": 0, "late": 0, "lost": 1}  # undelivered at stop counts as lost here
    words = timer_phrase({"timers": t})
    assert words == ("timers: of 7 acknowledged, 2 delivered early (up to 40.0 s before due), 1 lost, 1 not delivered "
                     "when the drain stopped (not verified); late after due p50 0.2 s, p99 7.0 s, max 7.0 s "
                     "(p99 by broker: broker-a 0.2 s, broker-b 7.0 s) "
                     "(by fault: kill-a: 2 early, 1 lost, 1 late by over 5 s)")
    assert timer_check(kept_spark.createDataFrame(rows[-1:], KEYS), events) is None  # not a timer load


def test_a_delay_level_has_no_slack(kept_spark: Any) -> None:
    rows = [("a@10000", "ok", 1, 1_000, 9_999), ("b@10000", "ok", 1, 1_000, 10_000)]
    t = timer_check(kept_spark.createDataFrame(rows, KEYS), [], slack_ms=0)
    assert t is not None and t["early"]["keys"] == 1 and t["late_ms"]["max"] == 0
    assert timer_phrase({"timers": {**t, "early": {"keys": 0, "most_ms": None, "examples": []}}}) == (
        "timers: none of 2 acknowledged early or lost; late after due p50 0.0 s, p99 0.0 s, max 0.0 s")


@pytest.mark.fast
def test_fault_windows_are_the_timelines_faults_by_start() -> None:
    ev = [_kill("b", 20, 30), {"kind": "restart", "target": "broker-a", "start_ms": 1, "end_ms": 2}, _kill("a", 10, 11)]
    assert fault_windows(ev) == [("a", "kill", "broker-a", 10, 11), ("b", "kill", "broker-a", 20, 30)]
    jump = {**_kill("j", 40, 45), "params": {"fault_id": "j", "fault_kind": "clock", "evidence": {"persists": True}}}
    assert fault_windows([jump]) == [("j", "clock", "broker-a", 40, 2 ** 62)]  # a jump that stays


@pytest.mark.fast
def test_timer_figures() -> None:
    from analysis.judge.figures import value
    t = {"early": {"keys": 3}, "lost": 2, "late_over": {"ms": 5000, "keys": 7}, "late_ms": {"max": 61_000},
         "no_fault": {"lost": 1}}
    assert [value({"timers": t}, f) for f in ("timers_early", "timers_lost", "timers_late_over_5s",
                                              "timers_late_max_ms", "timers_lost_no_fault")] == [3, 2, 7, 61_000, 1]
    assert value({"timers": None}, "timers_early") is None


@pytest.mark.fast
def test_delay_levels_are_parsed_as_the_broker_does() -> None:
    from rmqchaos.spec.timing import DEFAULT_DELAY_LEVELS, parse_levels
    lv = parse_levels(DEFAULT_DELAY_LEVELS)
    assert len(lv) == 18 and lv[:4] == [1_000, 5_000, 10_000, 30_000] and lv[-1] == 7_200_000
    assert parse_levels("2d 500s") == [172_800_000, 500_000]
    with pytest.raises(ValueError, match="'5x' is not a delay level"):
        parse_levels("1s 5x")


def _scenario(tmp_path: Any, body: str) -> Any:
    from rmqchaos.spec import load_scenario
    p = tmp_path / "t.yaml"
    p.write_text(body)
    return load_scenario(p)


@pytest.mark.fast
def test_timer_spec_errors_are_one_line_each(tmp_path: Any) -> None:
    from rmqchaos.spec import SpecError, semantic_errors
    from rmqchaos.spec.timing import max_due_after_s
    with pytest.raises(SpecError, match=r"load.timer: .*give one of delay_level .* or delay"):
        _scenario(tmp_path, "load: {timer: {delay_level: 2, delay: 5s}}\n")
    with pytest.raises(SpecError, match=r"load.timer: .*spread goes with delay"):
        _scenario(tmp_path, "load: {timer: {delay_level: 2, spread: 5s}}\n")
    with pytest.raises(SpecError) as e:
        _scenario(tmp_path, "load: {timer: {delay_level: 19}}\n")
    assert e.value.lines == [
        f"{tmp_path}/t.yaml:1: load.timer.delay_level: delay level 19 is outside the brokers' messageDelayLevel "
        "(18 levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h): use 1 to 18"]
    s = _scenario(tmp_path, "cluster: {broker_defaults: {config: {messageDelayLevel: '1s 3s'}}}\n"
                            "load: {timer: {delay_level: 2}}\n")
    assert semantic_errors(s) == [] and max_due_after_s(s) == 3.0
    with pytest.raises(SpecError) as e:
        _scenario(tmp_path, "load: {timer: {delay: 20s}, order: {}}\n")
    assert "a timer load is not an ordered one here: drop load.order" in e.value.detail + e.value.lines[0]
    assert max_due_after_s(_scenario(tmp_path, "load: {timer: {delay: 20s, spread: 10s}}\n")) == 30.0


CLOCK = """name: c
cluster:
  faketime: [broker-a]
load: {}
faults:
"""


def _refused(head: str, fault: str) -> list[str]:
    """The error lines of scenario `head` with one more fault."""
    from chaos.registry import registry
    from rmqchaos.spec import SpecError, parse_scenario
    with pytest.raises(SpecError) as e:
        parse_scenario(head + f"  - {fault}\n", "t.yaml", fault_kinds=registry())
    return e.value.lines


@pytest.mark.fast
def test_a_clock_fault_on_a_node_not_under_faketime_is_one_line() -> None:
    from chaos.registry import registry
    from rmqchaos.spec import parse_scenario

    def lines(fault: str) -> list[str]:
        return _refused(CLOCK, fault)
    assert lines("{kind: clock, target: broker-b, at: 1s, offset: +30s}") == [
        "t.yaml:6: faults[0].target: broker-b is not started under libfaketime, so a clock fault cannot move its "
        "clock: add it to cluster.faketime"]
    assert lines("{kind: clock, target: broker-a, at: 1s, rate: 1.5, duration: 10s}") == [
        "t.yaml:6: faults[0].rate: a drift rate needs the monotonic clock faked too (libfaketime scales both): set "
        "cluster.faketime_monotonic: true"]
    assert "give an offset" in lines("{kind: clock, target: broker-a, at: 1s}")[0]
    assert "give duration" in lines("{kind: clock, target: broker-a, at: 1s, offset: -5s, strobe: 1s}")[0]
    ok = parse_scenario(CLOCK + "  - {kind: clock, target: broker-a, at: 1s, offset: -2m, duration: 10s}\n", "t.yaml",
                        fault_kinds=registry())
    assert ok.cluster.faketime_nodes() == ["broker-a"]


@pytest.mark.fast
def test_the_clock_control_line_is_one_libfaketime_reads() -> None:
    from cluster.substrate.clock import line
    assert (line(120), line(-40), line(0.25), line(-3.5, 1.5)) == ("+120.000", "-40.000", "+0.250", "-3.500 x1.500000")
    with pytest.raises(ValueError):
        line(0, 0)


@pytest.mark.fast
def test_explore_draws_valid_clock_faults_only_on_nodes_with_their_own_clock() -> None:
    import random
    from chaos.draw import Topology
    from chaos.kinds.clock import Clock, ClockParams
    topo = Topology(namesrv="namesrv", controllers=(), groups={"broker-a": ("broker-a",)}, replicated=(), local=True)
    assert Clock.explore(random.Random(1), topo) is None
    topo = Topology(**{**topo.__dict__, "faketime": ("broker-a",)})
    draws = [Clock.explore(random.Random(i), topo) for i in range(30)]
    assert all(d is not None and d.fault["target"] == "broker-a" for d in draws)
    shapes = {("strobe" in d.fault, "duration" in d.fault) for d in draws if d}
    assert shapes == {(False, False), (False, True), (True, True)}  # a jump, an offset held, a strobe
    for d in draws:
        assert d is not None
        ClockParams(**{k: v for k, v in d.fault.items() if k != "target"})


@pytest.mark.fast
def test_a_consumer_clock_fault_needs_a_consumer_under_faketime_and_takes_no_rate() -> None:
    from chaos.registry import registry
    from rmqchaos.spec import parse_scenario
    base = "name: c\nload: {}\nconsumers:\n  instances: [{id: c0, faketime: true}, {id: c1}]\nfaults:\n"

    def lines(fault: str) -> list[str]:
        return _refused(base, fault)
    assert lines("{kind: consumer_clock, consumer: c1, at: 1s, offset: +30s}") == [
        "t.yaml:6: faults[0].consumer: consumer c1 is not started under libfaketime, so a clock fault cannot move "
        "its clock: set faketime: true on it"]
    assert lines("{kind: consumer_clock, consumer: c9, at: 1s, offset: +30s}") == [
        "t.yaml:6: faults[0].consumer: no consumer instance 'c9' in this scenario; instances: c0, c1"]
    assert "not a rate" in lines("{kind: consumer_clock, consumer: c0, at: 1s, rate: 2, duration: 5s}")[0]
    assert lines("{kind: consumer_clock, target: broker-a, consumer: c0, at: 1s, offset: 5s}") == [
        "t.yaml:6: faults[0].target: a consumer_clock fault acts on the cluster, not on a node: drop target"]
    ok = parse_scenario(base + "  - {kind: consumer_clock, consumer: c0, at: 1s, offset: -2m, duration: 10s}\n"
                               "  - {kind: consumer_clock, consumer: c0, at: 20s, offset: 5s}\n",
                        "t.yaml", fault_kinds=registry())
    assert ok.consumers is not None and [i.faketime for i in ok.consumers.instances] == [True, False]
    assert [f.params["offset"] for f in ok.faults] == [-120.0, 5.0]  # no sign: ahead


@pytest.mark.fast
def test_a_control_file_gives_its_offset_and_the_client_log_its_timed_out_requests(tmp_path: Path) -> None:
    from chaos.kinds.clock import timed_out_requests
    from cluster.substrate.clock import offset_of, write
    rc = tmp_path / "consumer-c0.clock.rc"
    assert offset_of(rc) == 0.0  # none yet: the host's time
    write(rc, -90.5)
    assert offset_of(rc) == -90.5 and not (tmp_path / "consumer-c0.clock.rc.tmp").exists()
    log = tmp_path / "remoting.log"
    assert timed_out_requests(log, 0) is None
    log.write_text("x WARN ClientHouseKeepingService - remove timeout request, ResponseFuture [...]\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("y - remove timeout request, a\ny - remove timeout request, b\nz other\n")
    assert (timed_out_requests(log, 0), timed_out_requests(log, start)) == (3, 2)


@pytest.mark.fast
def test_disk_full_reads_the_brokers_own_marks_and_falls_short_without_one(tmp_path: Path) -> None:
    from chaos.kinds.disk_full import disk_full_intent, marks
    log = tmp_path / "store.log"
    assert marks(log, 0) == ([], [])
    log.write_text("2026-11-30 10:00:00 INFO x - old line, so mark disk full\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("2026-11-30 10:00:10 ERROR StoreScheduledThread1 - physic disk maybe full soon 0.95, so mark disk "
                "full, storePathPhysic=/s/commitlog\n2026-11-30 10:00:40 INFO StoreScheduledThread1 - physic disk "
                "space OK 0.13, so mark disk ok, storePathPhysic=/s/commitlog\n")
    full, ok = marks(log, start)
    assert len(full) == 1 and "0.95" in full[0] and len(ok) == 1 and "0.13" in ok[0]
    good = disk_full_intent("broker-a", 95, 95.0, full)
    assert good["short"] is False and good["reached"] == 1.0
    short = disk_full_intent("broker-a", 95, 95.0, [])
    assert short["short"] is True and "never marked its disk full" in short["words"]


@pytest.mark.fast
def test_named_log_lines_are_counted_per_node_and_an_unknown_name_is_refused(tmp_path: Path) -> None:
    from analysis.judge.figures import value
    from analysis.evidence.log_marks import log_marks
    from rmqchaos.spec.expect import parse_condition
    d = tmp_path / "cluster"
    (d / "controller-1" / "logs" / "rocketmqlogs").mkdir(parents=True)
    (d / "broker-a" / "logs" / "rocketmqlogs").mkdir(parents=True)
    (d / "namesrv").mkdir()  # no logs: left out
    (d / "controller-1" / "logs" / "rocketmqlogs" / "controller.log").write_text(
        "x - The broker with brokerId: 2 in broker-set: broker-a has been inactive\n"
        "x - The broker with brokerId: 3 in broker-set: broker-a has been inactive\nother\n")
    (d / "broker-a" / "logs" / "rocketmqlogs" / "store.log").write_text(
        "x - physic disk maybe full soon 0.96, so mark disk full, storePathPhysic=/s\n"
        "x - Message processing failed after 3 retries. Msg: m1\n")
    m = log_marks(d)
    assert m["inactive_declared"] == {"controller-1": 2} and m["disk_marked_full"] == {"broker-a": 1}
    assert m["timer_put_discarded"] == {"broker-a": 1} and m["timer_offset_clamped"] == {}
    assert value({"log_marks": m}, "log.inactive_declared") == 2
    assert value({"log_marks": m}, "log.timer_offset_clamped") == 0
    assert value({}, "log.inactive_declared") is None  # an analysis from before the marks: not judged
    with pytest.raises(ValueError, match="unknown log line 'nope'; named lines: inactive_declared"):
        parse_condition("log.nope > 0")
