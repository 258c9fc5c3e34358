"""The analysis of a failover (analysis/replication/failover.py, analysis/replication/acks.py) on a planted run: a three-node
group whose master is killed, monitor samples as cluster/watch/monitor.py writes them, a send ledger whose
offsetMsgIds name the storing node, and commit logs planted in the nodes' store directories in the
format the brokers write (cluster/stored/messages.py reads them as it reads a real one)."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from analysis.replication.acks import two_master_windows
from analysis.evidence.topology import Topology, decode_store_host, store_host_prefix
from analysis.replication.failover import classify_lost, cut_back, failover, log_floor, occurrences, switched_ms, timing
from analysis.report.verdict import failover_phrases, hms
from cluster.stored.messages import Store
from rmqclient.record import MAGIC_V1
from rmqchaos.ledger.schema import RECEIVE_KEYS, intent_record, outcome_record
from tests.conftest import REPO

T = 1_700_000_000_000  # second 0 of the planted run
FAULT = T + 10_000
NODES = {"broker-a-0": ("127.0.64.11", 30911), "broker-a-1": ("127.0.64.12", 30921),
         "broker-a-2": ("127.0.64.13", 30931)}
SCHEMA = json.loads((REPO / "analysis" / "summary.schema.json").read_text())


def brokers(root: Path, replicated: bool = True) -> dict[str, dict[str, str]]:
    nodes = NODES if replicated else {"broker-a-0": NODES["broker-a-0"]}
    out = {n: {"brokerName": "broker-a", "brokerIP1": ip, "listenPort": str(port),
               "storePathRootDir": str(root / n / "store")} for n, (ip, port) in nodes.items()}
    out["broker-b"] = {"brokerName": "broker-b", "brokerIP1": "127.0.64.21", "listenPort": "30941",
                       "storePathRootDir": str(root / "broker-b" / "store")}
    return out


def served_by(node: str) -> str:
    ip, port = NODES.get(node, ("127.0.64.21", 30941))
    return f"{ip}:{port}"


def msg_id(node: str, offset: int) -> str:
    ip, port = NODES.get(node, ("127.0.64.21", 30941))
    return store_host_prefix(ip, port) + f"{offset:016X}"


@pytest.mark.fast
def test_offset_msg_id_names_the_store_host_as_decode_message_id_reads_it() -> None:
    # MessageDecoder.createMessageId (5.5.0): IPv4 4 bytes, port as an int, commit-log offset as a long
    assert decode_store_host("7F00000100002A9F0000000000001F40") == ("127.0.0.1", 10911, 8000)
    assert store_host_prefix("127.0.64.12", 30921) == "7F00400C000078C9"
    assert decode_store_host(msg_id("broker-a-1", 77)) == ("127.0.64.12", 30921, 77)
    assert decode_store_host("ABC") is None and decode_store_host("Z" * 32) is None
    topo = Topology.of(brokers(Path("/x")))
    assert topo.replicated == {"broker-a": ["broker-a-0", "broker-a-1", "broker-a-2"]}
    assert topo.group_of("broker-b") == "broker-b" and topo.prefix["7F00400C000078C9"] == "broker-a-1"


@pytest.mark.fast
def test_two_nodes_acknowledging_in_one_second_is_a_two_master_window() -> None:
    rows = [{"group": "broker-a", "t": 5, "node": "broker-a-0", "n": 40},
            {"group": "broker-a", "t": 6, "node": "broker-a-0", "n": 3},
            {"group": "broker-a", "t": 6, "node": "broker-a-1", "n": 12},
            {"group": "broker-a", "t": 6, "node": None, "n": 9},  # unattributed: no node of its own
            {"group": "broker-c", "t": 6, "node": "broker-c-0", "n": 1}]
    assert two_master_windows(rows) == [{"group": "broker-a", "t": 6, "nodes": {"broker-a-0": 3, "broker-a-1": 12}}]


def sample(ts: int, master: str | None, sss: list[str] | None, up: tuple[bool, ...] = (True, True, True),
           mode: str = "controller", routed: str | None = None, epoch: int = 1) -> dict[str, Any]:
    return {"ts_ms": ts, "brokers": {}, "groups": {"broker-a": {
        "mode": mode, "master": master, "master_addr": None, "epoch": epoch, "sync_state_set": sss,
        "routed_master": routed if routed is not None else master,
        "replicas": {n: {"up": u, "role": "master" if n == master else "slave", "max_offset": 0, "confirm_offset": 0}
                     for n, u in zip(NODES, up)}}}}


ALL = ["broker-a-0", "broker-a-1", "broker-a-2"]
# the master broker-a-0 killed at FAULT: out of the SyncStateSet 2.0 s later, broker-a-1 elected 5.0 s later
MONITOR = ([sample(T + 1000 * i, "broker-a-0", ALL) for i in range(11)]
           + [sample(FAULT + 1000, "broker-a-0", ALL, (False, True, True))]
           + [sample(FAULT + 2000 + 1000 * i, "broker-a-0", ALL[1:], (False, True, True)) for i in range(3)]
           + [sample(FAULT + 5000 + 1000 * i, "broker-a-1", ALL[1:], (False, True, True), epoch=2) for i in range(12)])


@pytest.mark.fast
def test_detection_and_election_times_from_the_monitor_samples() -> None:
    t = timing("broker-a", "broker-a-0", FAULT, 1 << 62, MONITOR)
    assert (t["was_master"], t["detection_s"], t["election_s"], t["new_master"], t["epoch"]) == \
        (True, 2.0, 5.0, "broker-a-1", 2)
    # a classic group (no controllers): detection is the route moving off the node; no election ever
    classic = [sample(T, "broker-a-0", None, mode="classic")] + \
        [sample(FAULT + 1000 * i, "broker-a-0", None, mode="classic", routed="broker-a-0" if i < 3 else "")
         for i in range(6)]
    c = timing("broker-a", "broker-a-0", FAULT, 1 << 62, classic)
    assert (c["detection_s"], c["election_s"], c["new_master"]) == (3.0, None, None)
    assert c["reasons"]["election"] == "no node other than broker-a-0 was master by the last sample (5.0 s after the fault)"
    # an unfinished run: nothing after the fault, nothing claimed
    u = timing("broker-a", "broker-a-0", FAULT, 1 << 62, MONITOR[:10])
    assert (u["detection_s"], u["election_s"]) == (None, None) and u["reasons"]["detection"].startswith("no monitor sample")


@pytest.mark.fast
def test_which_faults_start_a_failover() -> None:
    def fault(target: str, kind: str, at: int, outcome: str = "ok") -> dict[str, Any]:
        return {"kind": "fault", "target": target, "start_ms": at, "end_ms": at + 100, "outcome": outcome,
                "params": {"fault_id": f"{kind}-{at}", "fault_kind": kind}}
    events = [fault("master-of:broker-a", "kill", FAULT),      # a role the event left unresolved: the master then
              fault("broker-a-0", "restart", FAULT + 20_000),   # the kill's recovery, not a failover
              fault("broker-b", "kill", FAULT),                 # a group of one node: nothing to fail over to
              fault("broker-a-1", "pause", FAULT + 30_000, "failed"),  # not applied
              fault("broker-a-1", "pause", FAULT + 40_000)]
    got = occurrences(events, Topology.of(brokers(Path("/x"))), MONITOR)
    assert [(f["old_master"], f["fault_kind"], f["bound_ms"]) for f in got] == \
        [("broker-a-0", "kill", FAULT + 40_000), ("broker-a-1", "pause", 1 << 62)]
    assert (got[0]["detection_s"], got[1]["was_master"]) == (2.0, True)


@pytest.mark.fast
def test_a_partition_that_cuts_the_master_from_its_group_or_the_controllers_starts_a_failover() -> None:
    def cut(groups: list[list[str]], at: int) -> dict[str, Any]:
        return {"kind": "fault", "target": "cluster", "start_ms": at, "end_ms": at + 40_000, "outcome": "ok",
                "params": {"fault_id": f"cut-{at}", "fault_kind": "partition", "evidence": {"groups": groups}}}
    topo = Topology.of(brokers(Path("/x")))
    events = [cut([["broker-a-0", "controller-2"], ["controller-0", "controller-1", "broker-a-1", "broker-a-2"]],
                  FAULT),
              cut([["broker-a-1"], ["producers"]], FAULT + 1),  # clients cut from a node: no failover
              cut([["broker-b"], ["controller-0"]], FAULT + 2)]  # a group of one node
    [f] = occurrences(events, topo, MONITOR)
    assert (f["fault_id"], f["old_master"], f["fault_kind"], f["detection_s"], f["new_master"]) == \
        (f"cut-{FAULT}", "broker-a-0", "partition", 2.0, "broker-a-1")
    # what the cut-off master acknowledged up to the heal (its end) belongs to the switch, after its detection too
    assert switched_ms({**f, "detected_ms": FAULT + 2000}) == FAULT + 40_000
    assert switched_ms({"start_ms": FAULT, "detected_ms": FAULT + 2000, "end_ms": FAULT + 100}) == FAULT + 2000
    assert switched_ms({"start_ms": FAULT, "detected_ms": None, "end_ms": None}) == FAULT
    # and until it no longer called itself master: it never answered as a slave here, so its first
    # sample down; a paused master that wakes as master and then answers as a slave: that sample
    assert f["demoted_ms"] == FAULT + 1000
    thaw = [sample(FAULT + 1000, "broker-a-0", ALL, (False, True, True))] + \
        [sample(FAULT + 30_000, "broker-a-1", ALL, epoch=2)]  # woke up as master (`sample` names it so)
    thaw += [sample(FAULT + 31_000, "broker-a-1", ALL, epoch=2)]
    thaw[-1]["groups"]["broker-a"]["replicas"]["broker-a-0"]["role"] = "slave"
    thaw[1]["groups"]["broker-a"]["replicas"]["broker-a-0"]["role"] = "master"
    assert timing("broker-a", "broker-a-0", FAULT, 1 << 62, MONITOR[:11] + thaw)["demoted_ms"] == FAULT + 31_000
    assert switched_ms({"start_ms": FAULT, "detected_ms": FAULT + 2000, "end_ms": FAULT + 40_000,
                        "demoted_ms": FAULT + 47_000}) == FAULT + 47_000


@pytest.mark.fast
def test_a_lost_message_only_on_the_old_masters_store_is_lost_in_the_switch() -> None:
    old = {"broker-a-0"}
    assert classify_lost(old, {"broker-a-0"}, switched=True) == "lost_in_switch"
    assert classify_lost(old, {"broker-a-0"}, switched=False) == "stored_on_acking_node"
    assert classify_lost(old, {"broker-a-0", "broker-a-1"}, switched=True) == "stored_on_other_replica"
    assert classify_lost(old, set(), switched=True) == "never_stored"
    assert classify_lost(set(), {"broker-a-1"}, switched=True) == "stored_ack_node_unknown"
    # in no store, but the old master's log was cut back below it after the switch: stored, then written over
    assert classify_lost(old, set(), switched=True, cut_back=True) == "lost_in_switch"
    assert classify_lost(old, set(), switched=False, cut_back=True) == "never_stored"
    # in no log, its bytes past a DLedger replica's log end: that replica held it, and truncated it
    assert classify_lost(old, set(), switched=True, truncated=True) == "truncated_on_replica"


@pytest.mark.fast
def test_an_ack_whose_offset_the_old_masters_log_later_fell_to_or_below_was_cut_back() -> None:
    topo = Topology.of(brokers(Path("/x")))
    switch = FAULT + 2000

    def at(ts: int, node_offset: int | None, up: bool = True) -> dict[str, Any]:
        m = sample(ts, "broker-a-1", ALL[1:])
        m["groups"]["broker-a"]["replicas"]["broker-a-0"].update(up=up, max_offset=node_offset)
        return m
    mid = msg_id("broker-a-0", 5000)  # stored by broker-a-0 at commit-log offset 5000

    def cut(ids: list[str], samples: list[dict[str, Any]]) -> bool:
        return cut_back(ids, topo, "broker-a-0", log_floor("broker-a", "broker-a-0", switch, samples))
    assert cut([mid], [at(switch + 1000, 9000), at(switch + 9000, 4000)])  # rejoined at 4000
    assert cut([mid], [at(switch + 9000, 5000)])  # cut back to the message's own start
    assert not cut([mid], [at(switch + 1000, 9000), at(switch + 2000, None, up=False)])
    assert not cut([mid], [at(switch - 500, 4000)])  # before the switch: not its rejoining
    assert not cut([mid], [at(switch + 1000, 4000, up=False)])  # a down node's figure
    assert not cut(["not-an-id"], [at(switch + 1000, 0)])


def commit_log(path: Path, records: list[tuple[str, str, int]]) -> None:
    """A commit-log file as a broker writes it (MessageDecoder's layout, docs/broker-evidence.md):
    one record per (topic, key, queue offset), then zeros."""
    out = b""
    for topic, key, qoff in records:
        props = f"KEYS\x01{key}\x02UNIQ_KEY\x01U{qoff:030X}\x02".encode()
        bd, tb = b"payload " + key.encode(), topic.encode()
        rec = (struct.pack(">iiiiiqqiq", 0, MAGIC_V1, 0, 0, 0, qoff, len(out), 0, T) + b"\x7f\0\0\x01"
               + struct.pack(">i", 5) + struct.pack(">q", T) + b"\x7f\0\0\x01" + struct.pack(">i", 30911)
               + struct.pack(">iq", 0, 0) + struct.pack(">i", len(bd)) + bd + bytes([len(tb)]) + tb
               + struct.pack(">h", len(props)) + props)
        out += struct.pack(">i", len(rec)) + rec[4:]
    path.mkdir(parents=True, exist_ok=True)
    (path / "00000000000000000000").write_bytes(out + b"\0" * 4096)


class Ledger:
    def __init__(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        self.send, self.recv, self.n = open(d / "send-p1.jsonl", "w"), open(d / "receive-c0.jsonl", "w"), 0
        self.delivered: dict[str, dict[str, Any]] = {}
        self.d = d

    def ack(self, key: str, node: str, end_ms: int, delivered: bool = True, group: str = "broker-a") -> None:
        """An acknowledged send stored by `node`, and (delivered) its delivery, served by that node."""
        self.n += 1
        rec = ("intent", "r", "p1", self.n, key, 1, "T_FO", "no_retry", end_ms - 5, end_ms - 3)
        self.send.write(json.dumps(intent_record(*rec)) + "\n")
        self.send.write(json.dumps(outcome_record("outcome", *rec[1:], end_ms, "ok", "SEND_OK", 0, None, None, True,
                                                  f"{self.n:032X}", msg_id(node, self.n * 100), group, 0, self.n,
                                                  True)) + "\n")
        if delivered:
            r = dict.fromkeys(RECEIVE_KEYS)
            r.update(run_id="r", key=key, msg_id=f"{self.n:032X}", topic="T_FO", origin_topic="T_FO", broker=group,
                     queue_id=0, queue_offset=self.n, reconsume_times=0, consumer_id="c0", batch_size=1, batch_index=0,
                     receive_ms=end_ms + 50, offset_msg_id=msg_id(node, self.n * 100), store_ms=end_ms - 2,
                     served_by=served_by(node))
            self.recv.write(json.dumps(r) + "\n")
            self.delivered[key] = r

    def again(self, key: str, by: str | None, receive_ms: int) -> None:
        """The same stored copy delivered again, served by node `by` (None: not recorded)."""
        r = dict(self.delivered[key], receive_ms=receive_ms, served_by=served_by(by) if by else None)
        self.recv.write(json.dumps(r) + "\n")

    def files(self) -> tuple[list[Path], list[Path]]:
        self.send.close()
        self.recv.close()
        return [self.d / "send-p1.jsonl"], [self.d / "receive-c0.jsonl"]


@pytest.fixture
def spark(kept_spark):
    return kept_spark


def planted(tmp: Path) -> tuple[list[Path], list[Path], list[dict[str, Any]]]:
    led = Ledger(tmp / "ledgers")
    for i in range(9):
        led.ack(f"before-{i}", "broker-a-0", T + 1000 * (i + 1))
        led.ack(f"b-{i}", "broker-b", T + 1000 * (i + 1) + 10, group="broker-b")
    led.ack("lost-switch", "broker-a-0", T + 9500, delivered=False)    # only on the old master's store
    led.ack("lost-replica", "broker-a-0", T + 9600, delivered=False)   # on broker-a-1 too
    led.ack("lost-never", "broker-a-0", T + 9700, delivered=False)     # on no store
    led.ack("in-flight", "broker-a-0", FAULT + 50)                     # answered as the kill came
    for i in range(10):
        led.ack(f"after-{i}", "broker-a-1", FAULT + 7300 + 1000 * i)
    led.ack("two-master", "broker-a-0", FAULT + 10_400)                # the same second as after-3 on broker-a-1
    # copies read again: from the new master after the switch (a duplicate of the switch), from the same
    # node before it (a re-pull), with no server recorded; and on the unreplicated broker-b
    led.again("before-8", "broker-a-1", FAULT + 8000)
    led.again("before-7", "broker-a-0", T + 9900)
    led.again("before-6", None, FAULT + 8100)
    led.again("b-3", "broker-b", FAULT + 8200)
    commit_log(tmp / "cluster" / "broker-a-0" / "store" / "commitlog",
               [("T_FO", "lost-switch", 1), ("T_FO", "lost-replica", 2)])
    commit_log(tmp / "cluster" / "broker-a-1" / "store" / "commitlog", [("T_FO", "lost-replica", 2)])
    events = [{"kind": "fault", "target": "broker-a-0", "start_ms": FAULT, "end_ms": FAULT + 200, "outcome": "ok",
               "role": "master-of:broker-a", "params": {"fault_id": "kill-a", "fault_kind": "kill"}}]
    return *led.files(), events


def test_planted_failover_times_two_master_seconds_and_loss_in_the_switch(spark, tmp_path: Path) -> None:
    from analysis.reconcile.reconcile import analyze_ledgers
    send, recv, events = planted(tmp_path)
    conf = brokers(tmp_path / "cluster")
    store = Store(conf)
    try:
        res = analyze_ledgers(spark, send, recv, events, store=store, brokers=conf, monitor=MONITOR)
    finally:
        store.close()
    fo, sc = res["failover"], res["store_check"]
    jsonschema.validate(fo, SCHEMA["properties"]["failover"])
    [f] = fo["failovers"]
    assert (f["group"], f["old_master"], f["was_master"], f["role"], f["mode"]) == \
        ("broker-a", "broker-a-0", True, "master-of:broker-a", "controller")
    assert (f["detection_s"], f["election_s"], f["new_master"]) == (2.0, 5.0, "broker-a-1")
    assert (f["first_ack_new_master_s"], f["first_ack_any_s"], f["first_ack_any_node"]) == (7.3, 0.05, "broker-a-0")
    second = (FAULT + 10_400) // 1000
    assert fo["two_master_windows"] == [{"group": "broker-a", "t": second,
                                         "nodes": {"broker-a-0": 1, "broker-a-1": 1}}]
    assert f["two_master_seconds"] == [second]
    assert fo["groups"]["broker-a"]["acked_by_node"] == {"broker-a-0": 14, "broker-a-1": 10}
    assert "broker-b" not in fo["groups"]
    # every replica's store: the split of the replicated group's lost keys, the existing totals exact
    assert res["counts"]["lost"] == 3 and (sc["lost_from_store"], sc["lost_in_delivery"]) == (1, 2)
    lost = fo["lost"]
    assert (lost["lost_in_switch"], lost["stored_on_other_replica"], lost["never_stored"], lost["checked"]) == (1, 1, 1, 3)
    assert f["lost_in_switch"] == 1
    # the old master's late ack (two-master) came after its switch had ended (a kill's: detection): no stale read
    assert f["stale_reads"] == fo["stale_reads"] == 0
    # the repeats of the replicated group by who served them; the one served by another node is the switch's
    assert fo["duplicates_after_switch"] == {"served_by_another_node": 1, "served_by_the_same_node": 1,
                                             "server_unknown": 1}
    assert f["duplicates_after_switch"] == 1 and res["counts"]["duplicated"] == 4
    ex = {e["key"]: e for e in lost["examples"]}
    assert ex["lost-switch"]["stored_on"] == ["broker-a-0"] and ex["lost-switch"]["stored_on_up"] == {"broker-a-0": False}
    assert ex["lost-replica"]["stored_on_up"] == {"broker-a-0": False, "broker-a-1": True}
    words = failover_phrases({"failover": fo})
    assert words == [f"broker-a after the SIGKILL of broker-a-0 (its master): detected after 2.0 s, broker-a-1 elected "
                     f"after 5.0 s, first ack on it after 7.3 s, first ack on any node after 0.05 s (broker-a-0), one "
                     f"acknowledged message lost in the switch, one delivery read again from another node than the "
                     f"first time (a duplicate of the switch), two masters acknowledged in 1 s: {hms(second)} "
                     f"(broker-a-0 1, broker-a-1 1)"]


@pytest.mark.fast
def test_a_run_without_replicated_groups_has_no_failover_section(tmp_path: Path) -> None:
    # decided from the brokers' confs before any Spark job: no section, no clause in the verdict
    assert failover(None, None, [], [], brokers(tmp_path, replicated=False)) is None  # type: ignore[arg-type]
    assert failover_phrases({"failover": None}) == [] and failover_phrases({}) == []


def test_deliveries_a_deposed_master_stored_after_the_election_are_stale_reads(spark) -> None:
    """apache/rocketmq#6662's signature: consumers read what the old master stored after the new one
    was elected and before its own switch ended (a partition: its heal)."""
    from analysis.replication.failover import stale_reads
    topo = Topology.of(brokers(Path("/x")))
    elected, heal = FAULT + 12_000, FAULT + 40_000
    fo = {"old_master": "broker-a-0", "new_master": "broker-a-2", "start_ms": FAULT, "detected_ms": elected,
          "elected_ms": elected, "end_ms": heal, "demoted_ms": heal + 1000}
    rows = [("k1", msg_id("broker-a-0", 1), FAULT + 5_000),    # stored before the election: not stale
            ("k2", msg_id("broker-a-0", 2), elected + 10),     # after it, by the deposed master: stale
            ("k2", msg_id("broker-a-0", 2), elected + 10),     # delivered twice: one key
            ("k3", msg_id("broker-a-0", 3), heal + 500),       # before its demotion was seen: still stale
            ("k4", msg_id("broker-a-2", 4), elected + 20),     # by the new master: not stale
            ("k5", msg_id("broker-a-0", 5), heal + 2000),      # after the switch ended
            ("k6", "not-an-offset-msg-id", elected + 30),
            # a due timer put into its topic by the new master keeps the old master's store host: not stale
            ("k7@1795000000000", msg_id("broker-a-0", 7), elected + 40)]
    recv = spark.createDataFrame(rows, "key string, offset_msg_id string, store_ms long")
    no_election = {**fo, "new_master": None, "elected_ms": None}
    assert stale_reads(recv, topo, [fo, no_election]) == [2, None]
