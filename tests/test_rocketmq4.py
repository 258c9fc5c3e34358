"""RocketMQ 4.x as a version (issue 67): a 4.9.7 cluster of master/slave groups stands up from the
release's own jars (its logging setup from the distribution's files: cluster/plan/logconf.py), the
witness sends with the version's own mqadmin, the platform's remoting producer and the Java consumer
built against the 4.9.7 client run the load, and the OOM kill scenario runs complete: the broker is
killed by the kernel and restarts over its store (4.x unmaps files through reflection that Java 17
refuses without JDK_OPENS_4X), and the analysis reconciles every key."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.plan import logconf, tools
from conftest import run_here, write_scenario
from rmqchaos.spec import load_scenario

REPO = Path(__file__).resolve().parent.parent


def test_a_4_9_7_master_slave_cluster_takes_the_load_and_an_oom_kill_runs_complete(tmp_path: Path, kept_spark: Any) -> None:
    f = write_scenario(tmp_path / "oom497.yaml", {
        "extends": str(REPO / "scenarios" / "oom-tsp-on.yaml"), "name": "oom-tsp-on-497",
        "cluster": {"rocketmq_version": "4.9.7", "subnet": "127.0.104.0/24", "namesrv": {"port": 21176},
                    "brokers": [{"name": "broker-a", "port": 21111, "slave": {}},
                                {"name": "broker-b", "port": 21121, "slave": {}}]},
        "checks": {"witness": {"messages": 200, "threads": 2, "topic": "T_WITNESS_497"}},
        "load": {"duration": "30s"}})
    run, s = run_here(f, tmp_path / "run")
    versions = json.loads((run / "versions.json").read_text())
    # mixed is said: rocketmq-example 4.9.7 is not on Maven Central, an older 4.x release's stands in (the
    # witness uses the version's own mqadmin, not it)
    sub = versions["rocketmq_substituted"]
    assert versions["rocketmq"] == "4.9.7" and list(sub) == ["rocketmq-example"] and sub["rocketmq-example"] < "4.9.7"
    assert sub["rocketmq-example"].startswith("4."), sub
    witness = json.loads((run / "checks" / "witness-T_WITNESS_497.json").read_text())
    assert witness["ok"] and witness["sender"] == "mqadmin checkMsgSendRT" and witness["sent"] == 200, witness
    assert s["complete"] and not s["incomplete_reasons"], s["incomplete_reasons"]
    assert s["serving"]["gate"]["outcome"] == "passed", s["serving"]["gate"]  # the 4.x client's pulls seen
    faults = {e["params"]["fault_kind"]: e for e in s["events"] if e["kind"] == "fault"}
    assert faults["oom_kill"]["outcome"] == "ok" and not faults["oom_kill"]["params"]["evidence"]["intent"]["short"]
    # before JDK_OPENS_4X: InaccessibleObjectException in IndexService.load, and broker-a never came back
    assert faults["restart"]["outcome"] == "ok", faults["restart"]
    c = s["counts"]
    assert c["acked"] > 10_000, c
    # every acknowledged key delivered, or lost and looked up in the stores: none left unknown
    assert c["ok"] + c["lost"] + c["duplicated"] + c["recovered"] == c["acked"] and c["undelivered_at_stop"] == 0, c
    assert s["store_check"]["lost_from_store"] + s["store_check"]["lost_in_delivery"] == c["lost"], s["store_check"]



@pytest.mark.long  # the suite's budget: its 5.5.0 twin is test_power_loss.py's disk-error test
def test_a_4_9_7_sync_flush_broker_acknowledges_while_its_fsyncs_fail_and_a_power_loss_takes_them(
        tmp_path: Path, kept_spark: Any) -> None:
    # disk_error and power_loss on 4.x (nothing else runs them there): broker-a SYNC_FLUSH, its
    # commit log's fsyncs fail (EIO) from 6 s for 10 s, its power goes at 11 s, inside the window.
    # 4.9.7 answers SEND_OK all the same (the 4.x reports #2706, #3129, #5235; 5.5.0 holds its answer
    # or says FLUSH_DISK_TIMEOUT: docs/findings.md), so acknowledged messages are in no store after the
    # loss; and it does not start again (the next commit-log file, preallocated and never synced, is
    # empty: 4.x refuses it, 5.2+ deletes it), so the run is incomplete and never claims loss
    f = write_scenario(tmp_path / "eio497.yaml", {
        "extends": str(REPO / "scenarios" / "power-loss-async.yaml"), "name": "disk-error-497",
        "cluster": {"rocketmq_version": "4.9.7", "subnet": "127.0.107.0/24", "namesrv": {"port": 22176},
                    "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 22111, "config": {"flushDiskType": "SYNC_FLUSH"}},
                                {"name": "broker-b", "port": 22121, "config": {"flushDiskType": "SYNC_FLUSH"}}]},
        "load": {"duration": "24s", "rate": 200, "users": 20},
        "faults": [{"id": "eio-a", "kind": "disk_error", "target": "broker-a", "at": "6s", "duration": "10s"},
                   {"id": "power-a", "kind": "power_loss", "target": "broker-a", "at": "11s", "back_after": "3s"}],
        "signature": {"shows": "4.9.7 acknowledges SEND_OK while its fsyncs fail", "conditions": ["gone_on.broker-b == 0"]}})
    run, s = run_here(f, tmp_path / "run")
    ev = {e["params"]["fault_id"]: e for e in s["events"] if e["kind"] == "fault"}
    de = ev["eio-a"]["params"]["evidence"]
    assert ev["eio-a"]["outcome"] == "ok" and de["intent"]["short"] is False and de["failures"], de
    assert all(x["op"] == "fsync" and x["errno"] == "EIO" and x["path"].startswith("commitlog/") for x in de["failures"])
    # SEND_OK from a SYNC_FLUSH broker whose fsyncs failed
    w = next(x for x in s["windows"] if x["id"] == "eio-a")
    assert w["answers_by_broker"]["broker-a"].get("SEND_OK", 0) > 0, w["answers_by_broker"]
    pw = ev["power-a"]["params"]["evidence"]
    assert ev["power-a"]["outcome"] == "ok" and pw["intent"]["short"] is False, pw["intent"]
    # why it stayed down, read from its store.log (stdout says nothing)
    assert pw["not_started"]["broker-a"].startswith("commitlog/") and "is 0 bytes" in pw["not_started"]["broker-a"], pw
    assert not s["complete"] and any("broker-a did not start again" in r for r in s["incomplete_reasons"])
    # the store is read offline all the same: broker-a's SEND_OK acknowledgements in the window are gone,
    # broker-b's none
    sc = s["store_check"]
    assert sc["gone_ok_by_broker"].get("broker-a", 0) > 0 and sc["gone_by_broker"].get("broker-b", 0) == 0, sc


@pytest.mark.fast
def test_the_4x_witness_counts_each_send_of_checkmsgsendrt_and_4x_nodes_get_their_logging_files(tmp_path: Path) -> None:
    out = ("#Broker Name                      #QID  #Send Result            #RT\n"
           "broker-a                          0     true                    3\n"
           "broker-b                          1     false                   3001\n"
           "Avg RT: 3002.00\n")
    asked: list[list[str]] = []

    def runner(main: str, args: list[str], timeout: float) -> tools.ToolResult:
        asked.append(args)
        return tools.ToolResult(args, 0, out)
    name, _, done = tools.witness_send(runner, "4.9.7", "ns:1", "T", 2, 128, 4, 10)
    assert (name, done) == ("mqadmin checkMsgSendRT", (2, 1, 0))
    assert asked == [["checkMsgSendRT", "-n", "ns:1", "-t", "T", "-a", "2", "-s", "128"]]
    # printMsg's lines: 4.9+ name the broker; 4.6.0 names only the store host, and glues each queue's
    # first message to its offsets line
    lines = ("MSGID: A1 MessageExt [brokerName=broker-a, queueId=1, storeSize=9, queueOffset=7, sysFlag=0, "
             "storeHost=/127.0.0.11:10911, msgId=A1]\n"
             "minOffset=0, maxOffset=9, MessageQueue [topic=T, brokerName=broker-b, queueId=2]"
             "MSGID: B2 MessageExt [queueId=2, storeSize=9, queueOffset=8, sysFlag=0, bornHost=/127.0.0.1:5, "
             "storeTimestamp=1, storeHost=/127.0.0.21:10921, msgId=B2]\n")
    read = tools.read_back(lambda main, args, timeout: tools.ToolResult(args, 0, lines), "ns:1", "T",
                           names={"127.0.0.21:10921": "broker-b"})
    assert read == [("A1", "broker-a", 1, 7), ("B2", "broker-b", 2, 8)]
    logconf.write(tmp_path / "a", "4.6.0", "broker")
    assert "rocketmqlogs/store.log" in (tmp_path / "a" / "conf" / "logback_broker.xml").read_text()
    logconf.write(tmp_path / "b", "5.5.0", "broker")  # 5.x configures its logging from its jars
    assert not (tmp_path / "b").exists()


def _flood_460(tmp_path: Path, scenario: str, net: int, port: int) -> tuple[Path, dict[str, Any]]:
    """Incident 002 on 4.6.0 (scenarios/retry-flood-460*.yaml) on ports of its own."""
    seed = load_scenario(REPO / "scenarios" / f"{scenario}.yaml").cluster.broker("broker-b").seed_topics.model_dump()
    f = write_scenario(tmp_path / f"{scenario}.yaml", {
        "extends": str(REPO / "scenarios" / f"{scenario}.yaml"),
        "cluster": {"subnet": f"127.0.{net}.0/24", "namesrv": {"port": port + 76},
                    "brokers": [{"name": "broker-a", "port": port + 11, "slave": {}},
                                {"name": "broker-b", "port": port + 21, "slave": {}, "seed_topics": seed}]}})
    return run_here(f, tmp_path / "run", timeout=1500)


def _assert_incident_002(run: Path, s: dict[str, Any], frame: int) -> None:
    sig = s["signature"]
    assert sig["reached"] is True, sig["words"]
    mon = [json.loads(line) for line in (run / "monitor" / "cluster.jsonl").read_text().splitlines()]
    fe = mon[-1]["frame_errors"]
    # every namesrv refused a frame over the limit, and said which length (NettyDecoder's words)
    assert fe["limit"] == frame < fe["last_length"] and all(n >= 1 for n in fe["by_namesrv"].values()), fe
    assert sorted(fe["by_namesrv"]) == ["namesrv", "namesrv-1", "namesrv-2"]
    # out of every namesrv's route: in some sample no namesrv listed broker-b while both its nodes answered
    out = [m for m in mon if m.get("namesrvs") and all(v is not None and "broker-b" not in v for v in m["namesrvs"].values())
           and all(m["brokers"][n]["up"] for n in ("broker-b", "broker-b-s"))]
    # broker-a stays: in every namesrv's route until the remedy restarts them (one at a time), in some after
    restarts = [e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_kind"] == "restart"]
    first = min(e["start_ms"] for e in restarts)
    assert out and all(v is None or "broker-a" in v for m in out if m["ts_ms"] < first for v in m["namesrvs"].values())
    assert all(any("broker-a" in v for v in m["namesrvs"].values() if v) for m in mon if m.get("namesrvs"))
    # 4.6.0's broker says why (BrokerOuterAPI: `registerBroker Exception`): counted per node
    assert all(mon[-1]["brokers"][n]["registrations"]["failed"] >= 1 for n in ("broker-b", "broker-b-s"))
    assert len(restarts) == 3 and all(e["outcome"] == "ok" for e in restarts), restarts
    assert all(e["params"]["evidence"]["system_properties"] for e in restarts)
    c = s["counts"]
    assert s["complete"] and c["ok"] + c["lost"] + c["duplicated"] + c["recovered"] == c["acked"], c


def test_incident_002_on_4_6_0_scaled_three_namesrvs_drop_both_broker_b_nodes_until_the_frame_is_raised(
        tmp_path: Path, kept_spark: Any) -> None:
    run, s = _flood_460(tmp_path, "retry-flood-460-scaled", 105, 21200)
    _assert_incident_002(run, s, 65536)


@pytest.mark.long
def test_incident_002_on_4_6_0_at_its_scale_71000_topics_over_the_16_mib_frame(tmp_path: Path, kept_spark: Any) -> None:
    run, s = _flood_460(tmp_path, "retry-flood-460", 106, 21300)
    _assert_incident_002(run, s, 16 * 1024 * 1024)
    flood = next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_kind"] == "topic_flood")
    ev = flood["params"]["evidence"]
    assert ev["topics_before"] > 71_000 and ev["reached"] == "frame", ev


def test_every_broker_key_4_9_7_has_and_5_5_0_lacks_is_either_renamed_or_removed_in_the_table() -> None:
    """rmqchaos/spec/majors.py's tables against the two versions' own jars (config-keys.json): each 4.9.7
    key 5.5.0 lacks is mapped or refused with its reason, each new name is 5.5.0's and not 4.9.7's."""
    from rmqchaos.spec import REMOVED_IN_5, RENAMED_IN_5, config_keys
    k4, k5 = config_keys("4.9.7"), config_keys("5.5.0")
    assert set(k4["broker"]) - set(k5["broker"]) == set(RENAMED_IN_5) | set(REMOVED_IN_5)
    assert not set(k4["namesrv"]) - set(k5["namesrv"])
    assert all(new in k5["broker"] and new not in k4["broker"] and k5["broker"][new] == k4["broker"][old]
               for old, new in RENAMED_IN_5.items())


@pytest.mark.fast
def test_a_4x_broker_that_refuses_its_store_after_a_power_loss_is_told_by_its_store_log(tmp_path: Path) -> None:
    # 4.9.7 (and 5.1) refuse an empty last commit-log file (the next one, preallocated and never synced,
    # is 0 bytes after the power loss) with a WARN in store.log and nothing on stdout; 5.2+ deletes it
    from cluster.local.cluster import exit_cause
    node = tmp_path / "cluster" / "broker-a"
    (node / "logs" / "rocketmqlogs").mkdir(parents=True)
    (node / "stdout.log").write_text("The broker[broker-a, 127.0.109.11:23111] boot success.\n")
    assert exit_cause(node) is None
    (node / "logs" / "rocketmqlogs" / "store.log").write_text(
        "2026-12-08 01:47:16 WARN main - /r/cluster/broker-a/store.fs/commitlog/00000000000067108864\t0 length not "
        "matched message store config value, please check it manually\n"
        "2026-12-08 01:47:16 INFO main - load commit log Failed\n")
    assert exit_cause(node) == ("commitlog/00000000000067108864 is 0 bytes, not the configured size: "
                                "the store refused to load it")
