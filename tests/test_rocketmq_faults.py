"""RocketMQ-internal faults (incidents 002, 003, 004): the cluster monitor's pure logic, the fault
settings checked at load, then each scenario scaled for CI on a real cluster: the %RETRY% topic
flood drives a broker out of namesrv's route and the cleanup brings it back; the ack-index-0
consumer piles up redeliveries of exactly messages 1..n-1 of each batch; SYNC_FLUSH / SYNC_MASTER
under a slow disk and a frozen slave answer FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT, recorded and
classified as acknowledged-weak."""
from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.watch.monitor import TOO_LONG, LogTail, allocate, by_type
from conftest import REPO, cli, run_here, write_scenario
from pipeline.workflows.matrix import scenarios as matrix
from pipeline.runs import load_scenario

SCENARIOS = REPO / "scenarios"


# ---------------------------------------------------------------- pure logic

@pytest.mark.fast
def test_allocation_is_rocketmqs_averaging_rule() -> None:
    # AllocateMessageQueueAveragely: sorted queues in contiguous runs; the first (n % k) clients get one more
    qs = [("broker-a", q) for q in range(4)] + [("broker-b", q) for q in range(4)]
    got = {c: allocate(qs, ["c2", "c0", "c1"], c) for c in ("c0", "c1", "c2")}
    assert got == {"c0": qs[0:3], "c1": qs[3:6], "c2": qs[6:8]}
    assert [len(allocate(qs[:2], ["a", "b", "c"], c)) for c in "abc"] == [1, 1, 0]
    assert allocate(qs, ["a"], "z") == [] and allocate([], ["a"], "a") == []
    assert sorted(q for c in ("c0", "c1", "c2") for q in got[c]) == sorted(qs)  # each queue exactly once


@pytest.mark.fast
def test_topics_by_type_and_the_log_lines_the_monitor_reads(tmp_path: Path) -> None:
    assert by_type(["T", "%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_REVIVE_LOG_x", "broker-a"], {"broker-a"}) == \
        {"normal": 1, "retry": 1, "dlq": 1, "system": 3}
    # namesrv's remoting.log as 5.5.0 writes a refused registration (seen here)
    m = TOO_LONG.search("io.netty.handler.codec.TooLongFrameException: Adjusted frame length exceeds 262144: "
                        "369411 - discarded")
    assert m and (m.group(1), m.group(2)) == ("262144", "369411")
    f = tmp_path / "log"
    f.write_text("a\nb")
    t = LogTail(f)
    assert t.lines() == ["a"]  # the torn last line waits for its end
    with open(f, "a") as fh:
        fh.write("c\nd\n")
    assert t.lines() == ["bc", "d"] and t.lines() == []


@pytest.mark.fast
@pytest.mark.parametrize("fault, expect", [
    ({"kind": "topic_flood", "target": "broker-a", "at": "1s", "groups": -5}, "faults[0].groups: Input should be greater than or equal to 0"),
    ({"kind": "topic_flood", "target": "broker-z", "at": "1s", "groups": 10, "until": "count"},
     "faults[0].target: no broker 'broker-z'"),
    ({"kind": "topic_flood", "target": "broker-a", "at": "1s"}, "topic_flood creates nothing: set groups and/or topics > 0"),
    ({"kind": "topic_flood", "target": "broker-a", "at": "1s", "groups": 100000, "rate": 100, "until": "count"},
     "faults[0].rate: 100000 at 100/s takes 1000s, longer than the fault's timeout 60s"),
    ({"kind": "topic_flood", "target": "broker-a", "at": "1s", "groups": 100000, "until": "frames"},
     "faults[0].until: Input should be 'frame' or 'count'"),
    # until: frame (the default) against namesrv's frame limit, here RocketMQ's default 16 MiB
    ({"kind": "topic_flood", "target": "broker-a", "at": "1s", "groups": 1000},
     "faults[0].groups: topic_flood until: frame: 1,000 topics of ~194 B cannot outgrow namesrv's 16,777,216 B frame"),
    ({"kind": "cleanup_retry_topics", "target": "broker-a", "at": "1s"}, "faults[0].target"),
])
def test_bad_flood_settings_are_one_line_at_load(tmp_path: Path, fault: dict, expect: str) -> None:
    f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"}, "faults": [fault]})
    r = cli("run", str(f), "--out", str(tmp_path / "never"))
    assert r.returncode == 1 and expect in r.stderr and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


@pytest.mark.fast
def test_a_frame_flood_whose_bound_cannot_reach_the_frame_is_one_line_at_groups() -> None:
    from chaos.registry import registry
    from rmqchaos.spec import SpecError, parse_scenario
    text = ("name: f\nload: {duration: 30s}\ncluster:\n  namesrv: {jvm: {heap_mb: 128, system_properties: "
            "{com.rocketmq.remoting.frameMaxLength: 65536}}}\nfaults:\n"
            "  - {kind: topic_flood, target: broker-a, at: 1s, groups: 300}\n")
    with pytest.raises(SpecError) as e:
        parse_scenario(text, "f.yaml", fault_kinds=registry())
    assert e.value.lines == ["f.yaml:6: faults[0].groups: topic_flood until: frame: 300 topics of ~194 B cannot outgrow "
                             "namesrv's 65,536 B frame: raise groups to at least 335 or lower "
                             "com.rocketmq.remoting.frameMaxLength"]
    assert parse_scenario(text.replace("300", "400"), "f.yaml", fault_kinds=registry()).faults[0].params["until"] == "frame"
    with pytest.raises(SpecError) as e:  # a table the platform could not read whole (rmqclient MAX_FRAME, 64 MiB)
        parse_scenario(text.replace("65536", "67108864"), "f.yaml", fault_kinds=registry())
    assert "frame limit 67,108,864 B needs a topic table larger than this platform reads in one answer" in e.value.lines[0]


class FakeBroker:
    """A broker's topic table as the flood sees it through the admin client: a heartbeat's groups get
    their %RETRY% topics (every `skip`-th creation skipped, as a lock wait over 3 s does), reads counted."""

    def __init__(self, base: int = 16, skip: int = 0) -> None:
        self.table = {f"SYS_{i}": {"topicName": f"SYS_{i}", "perm": 6, "readQueueNums": 8} for i in range(base)}
        self.skip, self.tried, self.reads, self.counts = skip, 0, 0, 0

    def consumer_heartbeat(self, broker_addr: str, client_id: str, groups: list[str], topic: str) -> None:
        for g in groups:
            self.tried += 1
            if not (self.skip and self.tried % self.skip == 0):
                self.table[f"%RETRY%{g}"] = {"attributes": {}, "order": False, "perm": 6, "readQueueNums": 1,
                                             "topicFilterType": "SINGLE_TAG", "topicName": f"%RETRY%{g}",
                                             "topicSysFlag": 0, "writeQueueNums": 1}

    def create_topic(self, broker_addr: str, topic: str, queues: int = 4) -> None:
        self.table[topic] = {"topicName": topic, "perm": 6, "readQueueNums": queues, "writeQueueNums": queues}

    def topic_configs(self, broker_addr: str) -> dict:
        self.reads += 1
        return dict(self.table)

    def topic_count(self, broker_addr: str) -> tuple[int, None]:
        self.counts += 1
        return len(self.table), None


def _grow(broker: FakeBroker, target: float | None, timeout: float = 60, halt: bool = False, **params: Any) -> tuple[str, Any]:
    import threading
    from chaos.kinds.topic_flood import FloodParams, Grower
    stop = threading.Event()
    if halt:
        stop.set()
    g = Grower(broker, "a:1", FloodParams(**{"rate": 100_000, **params}), "stale_f", "T", target, timeout, stop)
    return g.run(), g


@pytest.mark.fast
@pytest.mark.parametrize("skip", [0, 3])
def test_the_flood_stops_just_past_the_frame_with_few_whole_table_reads(skip: int) -> None:
    from chaos.kinds.topic_flood import table_bytes
    b = FakeBroker(skip=skip)
    target = 65536 * 1.01
    reached, g = _grow(b, target, groups=5000)
    assert reached == "frame" and g.bytes == table_bytes(b.table) >= target
    assert g.bytes - target < 3 * 200  # it sized its last batches to what the frame still needed
    # the whole table is read at the start, once to size an entry, and to confirm (a skipped creation
    # makes the estimate fall short, and the flood goes on from the measured bytes); the rest are counts
    assert b.reads <= (3 if not skip else 8) and b.counts >= 3, (b.reads, b.counts)
    assert g.made_g - (b.tried // skip if skip else 0) == g.count - g.before


@pytest.mark.fast
def test_a_flood_stopped_by_a_bound_says_which_and_how_far_it_got() -> None:
    from chaos.kinds.topic_flood import FloodParams, flood_intent
    reached, g = _grow(FakeBroker(), 65536 * 1.01, groups=200)
    assert (reached, g.made_g) == ("its bound of 200 groups", 200)
    i = flood_intent("broker-a", FloodParams(groups=200), 65536, g.bytes, g.count - g.before, 1.25, reached)
    assert i["short"] is True and 0.5 < i["reached"] < 0.6
    assert i["words"] == (f"topic_flood of broker-a: reached {100 * g.bytes / 65536:.0f} % of namesrv's 65,536 B frame "
                          f"({g.bytes:,} B table, 200 topics created in 1.2 s; stopped by its bound of 200 groups)")
    assert _grow(FakeBroker(), 65536, timeout=0, groups=500)[0] == "the fault's timeout (0 s)"
    assert _grow(FakeBroker(), 65536, halt=True, groups=500)[0] == "the load's end"
    # until: count makes exactly what it was asked (groups, then topics)
    reached, g = _grow(FakeBroker(), None, groups=250, topics=3, until="count")
    assert (reached, g.made_g, g.made_t, g.count - g.before) == ("count", 250, 3, 253)
    over = flood_intent("broker-a", FloodParams(groups=400), 65536, 66200, 340, 3, "frame")
    assert over["short"] is False and over["words"].startswith("topic_flood of broker-a: reached 101 % of namesrv's")


@pytest.mark.fast
def test_the_scenarios_are_in_the_nightly_and_the_5x_variants_change_one_key() -> None:
    names = {Path(p).name for p in matrix(SCENARIOS / "nightly.yaml")}
    assert {"retry-flood.yaml", "retry-flood-split.yaml", "retry-pileup.yaml", "flush-timeout.yaml"} <= names
    base = load_scenario(SCENARIOS / "retry-flood.yaml")
    assert base.cluster.namesrv.jvm.system_properties == {"com.rocketmq.remoting.frameMaxLength": 65536}
    for variant, key in (("retry-flood-split", "enableSplitRegistration"), ("retry-flood-compressed", "compressedRegister")):
        v = load_scenario(SCENARIOS / f"{variant}.yaml")
        assert v.cluster.broker_defaults.config == {**base.cluster.broker_defaults.config, key: True}
        assert v.faults == base.faults and v.load == base.load


# ---------------------------------------------------------------- on a real cluster

def _run(tmp_path: Path, name: str, body: dict) -> tuple[Path, dict]:
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump({"name": name, **body}, sort_keys=False))
    return run_here(f, tmp_path / "run")


def test_retry_flood_drives_a_broker_out_of_the_route_and_the_cleanup_brings_it_back(tmp_path: Path) -> None:
    # The CI form, scaled down 2 more times than the scenario: namesrv refuses frames over 32 KiB, so
    # the cliff is ~150 %RETRY% topics. The flood grows broker-a's table until it exceeds the frame
    # (until: frame), bounded at 1,000 groups and 20 s, however fast the host: the broker rewrites its
    # whole table at each creation (the cost grows with the square of the count) and skips a creation
    # that waits over 3 s for the table's lock, so a busy host makes topics more slowly, not fewer in
    # all. Then it waits (at most 15 s) for namesrv to drop broker-a (registerNameServerPeriod 10 s),
    # and the cleanup follows it by 8 s. Worst case 2 + 20 + 15 + 8 s, and 10 s to come back: 55 s of
    # the load's 60 s. The test asserts the effect, never a count reached in a given time.
    run, s = _run(tmp_path, "retry-flood-ci", {
        "extends": str(SCENARIOS / "retry-flood.yaml"),
        "cluster": {"namesrv": {"port": 24876, "jvm": {"system_properties": {"com.rocketmq.remoting.frameMaxLength": 32768}}},
                    "brokers": [{"name": "broker-a", "port": 24911}, {"name": "broker-b", "port": 24921}],
                    "stop_timeout": "3s"},
        "load": {"duration": "60s", "rate": 100},
        "consumers": {"settle": "8s", "drain_timeout": "60s"},
        "faults": [{"id": "flood-a", "kind": "topic_flood", "target": "broker-a", "at": "2s", "groups": 1000,
                    "timeout": "20s", "wait_out": "15s"},
                   {"id": "cleanup", "kind": "cleanup_retry_topics", "after": "flood-a", "at": "8s"}]})
    mon = [m for m in s["monitor"] if "brokers" in m]
    a = [(m["ts_ms"], m["brokers"]["broker-a"]) for m in mon]
    flood = next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == "flood-a")
    cleanup = next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == "cleanup")
    fev = flood["params"]["evidence"]
    (tmp_path / "flood-evidence.json").write_text(json.dumps(fev))  # kept with the test's files, for the record
    # the flood got there and says so: the table past the frame, which it read from the scenario
    assert flood["outcome"] == "ok" and fev["reached"] == "frame" and fev["stopped_early"] is False, fev
    assert fev["frame_max_bytes"] == 32768 and fev["table_bytes"] >= fev["target_bytes"] > 32768, fev
    assert fev["intent"]["short"] is False and "% of namesrv's 32,768 B frame" in fev["intent"]["words"], fev
    assert fev["out_of_route_after_s"] is not None, fev  # and namesrv dropped broker-a within its wait
    assert max(b["topics"]["retry"] for _, b in a if b.get("up")) > 130  # the monitor saw the table grow
    # the cleanup came 8 s after the flood's end, not at a fixed second
    assert cleanup["params"]["after"] == "flood-a" and cleanup["start_ms"] - flood["end_ms"] >= 7900, cleanup
    # out: namesrv refused a frame, then stopped listing broker-a while broker-a itself answered
    out = [(t, b) for t, b in a if b["registered"] is False]
    assert out and all(b["up"] for _, b in out), f"broker-a never left namesrv's registrations ({fev})"
    assert flood["start_ms"] < out[0][0] < cleanup["start_ms"]
    assert mon[-1]["frame_errors"]["count"] >= 1 and mon[-1]["frame_errors"]["last_length"] > 32768
    assert all(b["registrations"]["failed"] >= 1 for _, b in out)
    # back: after the cleanup deleted the stale %RETRY% topics, broker-a registered again
    ev = cleanup["params"]["evidence"]["brokers"]["broker-a"]
    it = cleanup["params"]["evidence"]["intent"]  # every stale topic it found, no master lists any more
    assert it["short"] is False and it["reached"] == 1.0, it
    assert ev["deleted"] > 130 and ev["kept_online"] >= 1  # the live consumer's own %RETRY% topic stays
    assert any(b["registered"] and t > cleanup["end_ms"] for t, b in a), "broker-a did not come back"
    # sends went on: to broker-b while broker-a was out of the producer's route; nothing lost
    out_secs = {t // 1000 for t, _ in out}
    assert any(r["t"] in out_secs and (r["acked_by_broker"] or {}).get("broker-b") for r in s["series"])
    assert s["counts"]["lost"] == 0 and s["complete"] is True
    assert "Broker registration with namesrv" in (run / "report.html").read_text()
    # the verdict names what the run found: the route outage, its length, the sends acked on broker-a meanwhile
    from analysis.report.report import verdict
    assert s["extends"] == "retry-flood" and "; broker-a was missing from namesrv's route for " in verdict(s), verdict(s)


def test_retry_pileup_redelivers_exactly_messages_after_the_first_of_each_batch(tmp_path: Path) -> None:
    # The CI form shortens the broker's delay levels (messageDelayLevel): the first redelivery (level
    # 3) comes 3 s later instead of 10 s, the second (level 4) 5 s instead of 30 s, so the drain's
    # quiet period is 8 s instead of 35 s. The path is the same: CONSUMER_SEND_MSG_BACK, SCHEDULE_TOPIC_XXXX,
    # %RETRY%<group>.
    levels = "1s 2s 3s 5s " + " ".join(["10s"] * 14)
    run, s = _run(tmp_path, "retry-pileup-ci", {
        "extends": str(SCENARIOS / "retry-pileup.yaml"),
        "cluster": {"namesrv": {"port": 18876}, "broker_defaults": {"config": {"messageDelayLevel": levels}},
                    "brokers": [{"name": "broker-a", "port": 18911}, {"name": "broker-b", "port": 18921}],
                    "stop_timeout": "3s"},
        "load": {"duration": "15s"},
        "consumers": {"settle": "8s", "drain_timeout": "90s", "route_refresh": "5s"}})
    recv = [json.loads(x) for f in (run / "ledgers").glob("receive-*.jsonl") for x in f.read_text().splitlines()]
    retried = {d["key"] for d in recv if d["reconsume_times"] > 0}
    # a first-hand delivery at 1..n-1 of its batch (a rebalance may deliver a key first-hand twice)
    later = {d["key"] for d in recv if d["reconsume_times"] == 0 and d["batch_index"] > 0}
    assert later and retried, "no batch of more than one message, or no redelivery within the drain"
    # exactly the messages at 1..n-1 of a batch came back (none always first in its batch), from both
    # brokers' %RETRY% queues: the drain waits for the group's %RETRY% lag too (once, before it did,
    # 507 sent back to broker-a were never consumed: the consumers' first %RETRY% route listed only
    # broker-b, and the 30 s route refresh came after the drain), and every %RETRY% delivery is recorded as such
    assert retried == later, (len(retried), len(later))
    assert {d["broker"] for d in recv if d["reconsume_times"] > 0} == {"broker-a", "broker-b"}
    assert all(d["topic"] == "%RETRY%rmqchaos_pileup" for d in recv if d["reconsume_times"] > 0)
    rb = s["retried_keys_by_batch_position"]
    assert rb == {"first_in_batch": 0, "later_in_batch": len(retried), "never_first": 0}
    c = s["counts"]
    # duplicated: the keys sent back, and any a rebalance re-pull delivered first-hand twice (seen: 4 keys)
    firsts = collections.Counter(d["key"] for d in recv if d["reconsume_times"] == 0)
    repulled = {k for k, n in firsts.items() if n > 1}
    assert c["duplicated"] == len(retried | repulled) and c["lost"] == 0
    assert s["duplicates_by_cause"]["consumer_repull"] == sum(n - 1 for n in firsts.values())
    assert s["complete"] is True  # capped redeliveries: the drain ends, the verdict is complete
    assert s["duplicates_by_cause"]["consumer_retry"] == sum(1 for d in recv if d["reconsume_times"] > 0)
    assert max(d["reconsume_times"] for d in recv) <= 2  # max_reconsume_times
    # the monitor: the group's messages pile up in %RETRY% and the delay levels, not in the queues
    # each consumer owns: at some moment the group holds more than its busiest consumer shows
    mon = [m for m in s["monitor"] if "rmqchaos_pileup" in (m.get("backlog") or {})]
    g = [m["backlog"]["rmqchaos_pileup"] for m in mon]
    assert g and max(x["retry_stored"] for x in g) >= len(retried)
    assert any(x["instances"] and x["total"] > max(x["instances"].values()) for x in g)
    assert max(sum(b.get("delayed") or 0 for b in m["brokers"].values()) for m in mon) > 0
    assert "at index 1..n-1: " + str(len(retried)) in (run / "report.html").read_text()


@pytest.mark.long  # make test: the partition-sync-slave CI form records FLUSH_SLAVE_TIMEOUT answers, stored and classified acknowledged-weak
def test_flush_timeouts_are_recorded_and_classified_acknowledged_weak(tmp_path: Path) -> None:
    run, s = _run(tmp_path, "flush-timeout-ci", {
        "extends": str(SCENARIOS / "flush-timeout.yaml"),
        "cluster": {"namesrv": {"port": 20876},
                    "brokers": [{"name": "broker-a", "port": 20911, "slave": {},
                                 "config": {"brokerRole": "SYNC_MASTER", "inSyncReplicas": 2, "slaveTimeout": 500}},
                                {"name": "broker-b", "port": 20921}], "stop_timeout": "3s"},
        "load": {"duration": "24s", "rate": 200},
        "faults": [{"id": "slow-disk-a", "kind": "blkio_throttle", "target": "broker-a", "at": "3s", "duration": "6s",
                    "write_iops": 20},
                   {"id": "pause-slave-a", "kind": "pause", "target": "broker-a-s", "at": "12s", "duration": "4s"}]})
    outcomes = [json.loads(x) for f in (run / "ledgers").glob("send-*.jsonl") for x in f.read_text().splitlines()]
    outcomes = [r for r in outcomes if r["rec"] == "outcome"]
    weak = [r for r in outcomes if r["status"] in ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT")]
    assert weak, "no flush timeout answered"
    # stored, taken as success by the application, the broker's status kept; both kinds on broker-a
    # (broker-b, SYNC_FLUSH at 50 ms on an unthrottled disk, may answer a few FLUSH_DISK_TIMEOUT too)
    assert all(r["outcome"] == "ok" and r["app_ok"] and r["code"] in (10, 12) for r in weak)
    assert {r["status"] for r in weak if r["broker"] == "broker-a"} == {"FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT"}
    by_status = s["errors"]["by_status"]
    assert sum(by_status.get(k, 0) for k in ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT")) == len(weak)
    c = s["counts"]
    assert c["acked_weak"] == len({r["key"] for r in weak})  # one attempt per key (ignore_send_status)
    assert c["lost"] == 0 and c["acked_weak_lost"] == 0
    assert "Stored with a weak status" in (run / "report.html").read_text()


@pytest.mark.fast
def test_route_outages_come_from_the_monitor_and_count_the_sends_of_that_time() -> None:
    from analysis.report.report import route_outages

    def sample(t: int, reg_a: bool | None) -> dict:
        return {"ts_ms": t * 1000, "brokers": {"broker-a": {"up": True, "registered": reg_a},
                                               "broker-b": {"up": True, "registered": True}}}
    mon = [sample(10, True), sample(11, False), sample(12, False), sample(13, None), sample(14, True), sample(15, False)]
    series = [{"t": t, "errors": 0, "timeouts": 1 if t == 12 else 0,
               "acked_by_broker": {"broker-a": 2, "broker-b": 3}} for t in range(10, 17)]
    got = route_outages({"monitor": mon, "series": series})
    assert got == [{"broker": "broker-a", "start_ms": 11000, "end_ms": 14000, "acked_on_it": 6, "acked_elsewhere": 9,
                    "failed": 1},
                   {"broker": "broker-a", "start_ms": 15000, "end_ms": None, "acked_on_it": 4, "acked_elsewhere": 6,
                    "failed": 0}]  # still out at the end: the sends of t=15 and 16 count


@pytest.mark.fast
def test_several_namesrvs_each_on_its_address_and_out_of_the_route_means_out_of_every_one() -> None:
    from analysis.judge.figures import value
    from cluster.plan.nodes import addresses, plan
    from cluster.watch.monitor import _union
    s = load_scenario(REPO / "scenarios" / "retry-flood-460-scaled.yaml")
    ps = {p.name: p for p in plan(s)}
    at = addresses(s)
    assert [n for n in ps if ps[n].role == "namesrv"] == ["namesrv", "namesrv-1", "namesrv-2"]
    assert [at[n] for n in ("namesrv", "namesrv-1", "namesrv-2")] == ["127.0.10.1", "127.0.10.8", "127.0.10.9"]
    # every broker registers with each namesrv (namesrvAddr lists all three)
    assert ps["broker-b-s"].conf["namesrvAddr"] == "127.0.10.1:9876;127.0.10.8:9876;127.0.10.9:9876"
    assert s.cluster.broker_node_names() == ["broker-a", "broker-a-s", "broker-b", "broker-b-s"]
    assert s.cluster.member_nodes(["namesrvs"]) == ["namesrv", "namesrv-1", "namesrv-2"]
    # a broker is out of the route when no namesrv lists it; a namesrv that did not answer says nothing
    assert _union({"namesrv": {"broker-a": {0: "x"}}, "namesrv-1": None, "namesrv-2": {"broker-b": {1: "y"}}}) == \
        {"broker-a": {0: "x"}, "broker-b": {1: "y"}}
    assert _union({"namesrv": None}) is None
    # listed: by any namesrv at its own address and id; one namesrv's id for another address does not count
    from types import SimpleNamespace
    from cluster.backend import ClusterBackend
    fake = SimpleNamespace(plans=ps)
    each = {"namesrv": {"broker-b": {0: "elsewhere"}}, "namesrv-1": None,
            "namesrv-2": {"broker-b": {0: ps["broker-b"].addr}}}
    assert ClusterBackend.listed_anywhere(fake, "broker-b", each) is True  # type: ignore[arg-type]
    assert ClusterBackend.listed_anywhere(fake, "broker-b", {**each, "namesrv-2": {}}) is False  # type: ignore[arg-type]
    assert ClusterBackend.listed_anywhere(fake, "broker-b", {"namesrv": None}) is None  # type: ignore[arg-type]

    def sample(ts: int, b_listed: bool | None, refused: dict[str, int], length: int | None) -> dict[str, Any]:
        return {"ts_ms": ts, "brokers": {"broker-b": {"up": True, "registered": b_listed},
                                         "broker-a": {"up": True, "registered": True}},
                "frame_errors": {"count": sum(refused.values()), "last_length": length, "limit": 65536,
                                 "by_namesrv": refused}}
    mon = [sample(0, True, {"namesrv": 0, "namesrv-1": 0}, None), sample(1000, False, {"namesrv": 1, "namesrv-1": 0}, 70_001),
           sample(3500, False, {"namesrv": 2, "namesrv-1": 1}, 70_101), sample(4000, True, {"namesrv": 2, "namesrv-1": 1}, 70_101)]
    summary = {"monitor": mon}
    assert value(summary, "route_absent_samples.broker-b") == 2
    assert value(summary, "route_absent_seconds.broker-b") == 3  # 1.0-3.5 s and 3.5-4.0 s: 3.0 s
    assert value(summary, "route_back.broker-b") == 1 and value(summary, "route_back.broker-a") is None
    assert value(summary, "frames_refused_by.namesrv-1") == 1 and value(summary, "frame_refused_bytes") == 70_101
    assert value({"monitor": mon[:3]}, "route_back.broker-b") == 0  # still out at its last sample
