"""Power loss (issue 48): the spec puts the nodes a power_loss may hit on the powerfs layer and
refuses what cannot work, in one line; then a real run in which an ASYNC_FLUSH and a SYNC_FLUSH
broker lose power at once: the ASYNC_FLUSH one loses acknowledged messages that are in no store,
the SYNC_FLUSH one none (each of its forces reached the layer as a sync), and both come back."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.judge.figures import value
from chaos.kinds.power_loss import power_intent
from cluster.plan.nodes import plan
from conftest import REPO, RMQCHAOS, cli, run_here
from helpers import assert_nothing_left
from pipeline.runs import load_scenario
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcessLog

SCENARIOS = REPO / "scenarios"


def _write(tmp_path: Path, body: dict) -> Path:
    f = tmp_path / f"{body.get('name', 'pl')}.yaml"
    f.write_text(yaml.safe_dump({"name": "pl", **body}, sort_keys=False))
    return f


@pytest.mark.fast
def test_the_nodes_a_power_loss_may_hit_go_on_the_layer_and_no_other() -> None:
    s = load_scenario(SCENARIOS / "power-loss-async.yaml")
    assert s.cluster.powerfs == ["broker-a", "broker-b"]
    assert {p.name: p.powerfs for p in plan(s)} == {"namesrv": False, "broker-a": True, "broker-b": True}
    assert load_scenario(SCENARIOS / "control.yaml").cluster.powerfs == []  # pays nothing for the layer


@pytest.mark.fast
def test_a_role_puts_its_whole_group_on_the_layer(tmp_path: Path) -> None:
    s = load_scenario(_write(tmp_path, {
        "extends": str(SCENARIOS / "failover-kill-master.yaml"),
        "faults": [{"id": "kill-master", "kind": "power_loss", "target": "master-of:broker-a", "at": "5s"}]}))
    assert s.cluster.powerfs == ["broker-a-0", "broker-a-1", "broker-a-2"]



@pytest.mark.fast
def test_a_slow_disk_puts_its_node_on_the_layer_and_a_key_counts_under_its_strongest_status() -> None:
    from analysis.durability.store_check import strongest
    s = load_scenario(SCENARIOS / "power-loss-weak.yaml")
    assert s.cluster.powerfs == ["broker-a"]  # the slow disk and the power loss hit broker-a only
    assert strongest(["FLUSH_DISK_TIMEOUT", "SEND_OK"]) == "SEND_OK"  # acknowledged twice: SEND_OK wins
    assert strongest(["FLUSH_SLAVE_TIMEOUT", "FLUSH_DISK_TIMEOUT"]) == "FLUSH_DISK_TIMEOUT"
    assert strongest([]) == "unknown"

@pytest.mark.fast
@pytest.mark.parametrize("body, expect", [
    ({"faults": [{"kind": "power_loss", "target": "broker-a", "nodes": ["broker-q"], "at": "5s"}]},
     "faults[0].nodes[0]: no node 'broker-q' in this cluster"),
    ({"cluster": {"backend": "docker"}}, "need the local backend, not docker"),
    ({"cluster": {"powerfs": ["nowhere"]}, "faults": []}, "cluster.powerfs[0]: 'nowhere' is no node"),
    ({"faults": [{"kind": "power_loss", "target": "broker-a", "at": "5s", "restart_after": "3s"}]},
     "restart_after applies to"),
])
def test_bad_power_loss_settings_are_one_line_at_load(tmp_path: Path, body: dict, expect: str) -> None:
    with pytest.raises(UserError) as e:
        load_scenario(_write(tmp_path, {"extends": str(SCENARIOS / "power-loss-async.yaml"), **body}))
    assert expect in e.value.line()


@pytest.mark.fast
def test_the_intent_is_died_cut_off_and_remounted_per_node() -> None:
    ok = {"pid": 7, "was_running": True, "dead": True, "fenced_ms": 1000, "ops_after_fence": 3, "remounted": True}
    it = power_intent({"broker-a": ok}, {"broker-a": 9})
    assert it["short"] is False and "broker-a: disk cut at the power loss, 3 later write(s) or sync(s) refused" in str(it)
    uncut = power_intent({"broker-a": {**ok, "fenced_ms": None}})
    assert uncut["short"] is True and "broker-a: its disk was NOT cut" in uncut["words"]
    assert power_intent({"broker-a": ok}, {"broker-a": None})["short"] is True  # not back
    # powered back, but it exited on its own while starting: the system's answer, not the fault's failure
    refused = power_intent({"broker-a": ok}, {"broker-a": None}, {"broker-a": "java.lang.NumberFormatException"})
    assert refused["short"] is False and "broker-a powered back; it did not start again: java.lang.NumberFormatException" \
        in str(refused)


@pytest.mark.fast
def test_the_exception_that_ended_a_nodes_start_is_read_from_its_stdout(tmp_path: Path) -> None:
    from cluster.local.cluster import exit_cause
    assert exit_cause(tmp_path) is None  # no stdout at all
    (tmp_path / "stdout.log").write_text(
        "The broker[broker-a, 127.0.10.13:10919] boot success.\n"
        "java.lang.IllegalStateException: an earlier start's\n\tat org.apache.rocketmq.broker.BrokerStartup.main(BrokerStartup.java:60)\n"
        "java.lang.NumberFormatException: Cannot parse null string\n"
        "\tat java.base/java.lang.Integer.parseInt(Integer.java:630)\n"
        "\tat org.apache.rocketmq.common.utils.CheckpointFile.read(CheckpointFile.java:107)\n"
        "\tat org.apache.rocketmq.store.ha.autoswitch.EpochFileCache.initCacheFromFile(EpochFileCache.java:90)\n")
    assert exit_cause(tmp_path) == ("java.lang.NumberFormatException: Cannot parse null string "
                                    "at CheckpointFile.read(CheckpointFile.java:107)")


@pytest.mark.fast
def test_lost_on_counts_the_lost_keys_of_a_broker_group() -> None:
    s = {"store_check": {"lost_by_broker": {"broker-a": 12}}}
    assert (value(s, "lost_on.broker-a"), value(s, "lost_on.broker-b")) == (12, 0)
    assert value({"store_check": None}, "lost_on.broker-a") is None


def test_power_loss_erases_what_async_flush_never_synced_and_nothing_sync_flush_acknowledged(tmp_path: Path) -> None:
    # The scenario's CI form: 300 msg/s for 36 s, power off at 8 s, back 4 s later (two brokers
    # restarting at once on a busy 2-core host took up to 25 s); broker-a flushes every 5 s, so something
    # it acknowledged is unsynced when the power goes (every 2 s, a fresh clone's run once had the
    # starved load acknowledge nothing on broker-a between its last flush and the cut: nothing gone)
    run, s = run_here(_write(tmp_path, {
        "extends": str(SCENARIOS / "power-loss-async.yaml"), "name": "power-loss-ci",
        "cluster": {"namesrv": {"port": 24376}, "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 24311,
                                 "config": {"flushDiskType": "ASYNC_FLUSH", "flushIntervalCommitLog": 5000}},
                                {"name": "broker-b", "port": 24321, "config": {"flushDiskType": "SYNC_FLUSH"}}]},
        "load": {"duration": "36s", "rate": 300, "users": 20},
        "faults": [{"id": "power-ab", "kind": "power_loss", "target": "broker-a", "nodes": ["broker-b"], "at": "8s",
                    "back_after": "4s"}]}), tmp_path / "run")
    ev = next(e for e in s["events"] if e["kind"] == "fault")
    assert ev["outcome"] == "ok", ev
    evidence = ev["params"]["evidence"]
    assert evidence["intent"]["short"] is False, evidence["intent"]["words"]
    lost = evidence["nodes_lost"]
    # every force reached the layer as a sync (SYNC_FLUSH: one per group commit; ASYNC_FLUSH: every 5 s)
    assert lost["broker-a"]["syncs"] > 0 and lost["broker-b"]["syncs"] > lost["broker-a"]["syncs"], lost
    assert all(n["fenced_ms"] <= n["frozen_ms"] for n in lost.values()), lost  # the disks first, then the machines
    before, after = evidence["max_offset_before"], evidence["max_offset_after"]
    assert set(before) == set(after) == {"broker-a", "broker-b"}
    assert all(v is not None for v in [*before.values(), *after.values()]), (before, after)  # each answered
    # what each broker knew at the cut against what its store's config files hold: the topics and groups
    # are kept (written at once, committed at close by auto_da_alloc), so a restart knows the topic
    for node in ("broker-a", "broker-b"):
        k = lost[node]["knows"]
        assert k["before"] is not None and k["forgot"] is not None, k
        assert "RMQCHAOS_POWER" not in k["forgot"]["topics_lost"] and k["after"]["topics"] >= 1, k
        assert set(k["sources"]) == {"topics", "groups", "offsets"}, k
    assert s["offset_rollback"] is not None  # the analysis read what the brokers forgot
    sc = s["store_check"]
    # in no store now: acknowledged and never read, or read once and then erased (whether the consumer
    # had read them before the cut is the host's timing): broker-a's only
    gone = sc["gone_by_broker"]
    assert gone.get("broker-a", 0) > 0 and gone.get("broker-b", 0) == 0, sc
    assert sc["lost_from_store"] + sc["erased_after_delivery"] == gone["broker-a"], sc
    # when they were acknowledged: broker-a's, up to its cut (an answer is read at most a second after it)
    span, cut = sc["gone_acked_ms_by_broker"], lost["broker-a"]["cut_ms"]
    assert set(span) == {"broker-a"} and span["broker-a"][0] <= span["broker-a"][1] <= cut + 1000, (span, cut)
    assert sc["lost_by_broker"].get("broker-b", 0) == 0, sc
    assert all(x["broker"] == "broker-a" for x in s["reused_queue_offsets"]["examples"]), s["reused_queue_offsets"]
    assert s["signature"]["reached"] is True, s["signature"]["words"]
    # the layer is gone with the run; the stores stay readable where a plain node's are
    assert not [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if str(run) in ln]
    assert (run / "cluster" / "broker-a" / "store" / "commitlog").is_dir()
    assert "on the powerfs layer: broker-a, broker-b" in (run / "report.html").read_text()


def test_disk_errors_on_a_sync_flush_commit_log_and_what_its_broker_answered_meanwhile(tmp_path: Path) -> None:
    # fsyncs of broker-a's commit log fail with EIO from 6 s to 14 s; its power goes at 11 s, inside the
    # window, and comes back 4 s later: every attempt of broker-a that ended in the window is named by
    # its answer (acknowledged with which status, or not), and nothing broker-b acknowledged is lost
    run, s = run_here(_write(tmp_path, {
        "extends": str(SCENARIOS / "power-loss-async.yaml"), "name": "disk-error-ci",
        "cluster": {"namesrv": {"port": 24476}, "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 24411, "config": {"flushDiskType": "SYNC_FLUSH"}},
                                {"name": "broker-b", "port": 24421, "config": {"flushDiskType": "SYNC_FLUSH"}}]},
        "load": {"duration": "34s", "rate": 200, "users": 20},
        "faults": [{"id": "eio-a", "kind": "disk_error", "target": "broker-a", "at": "6s", "duration": "8s"},
                   {"id": "power-a", "kind": "power_loss", "target": "broker-a", "at": "11s", "back_after": "4s"}],
        "signature": {"shows": "fsync errors on broker-a's commit log", "conditions": ["gone_on.broker-b == 0"]}}),
        tmp_path / "run")
    ev = {e["params"]["fault_id"]: e for e in s["events"] if e["kind"] == "fault"}
    assert ev["eio-a"]["outcome"] == "ok" and ev["power-a"]["outcome"] == "ok", ev
    de = ev["eio-a"]["params"]["evidence"]
    assert de["intent"]["short"] is False and de["failures"], de  # the layer answered fsyncs with EIO
    assert all(f["op"] == "fsync" and f["errno"] == "EIO" and f["path"].startswith("commitlog/") for f in de["failures"])
    w = next(x for x in s["windows"] if x["id"] == "eio-a")
    # the window's answers are exactly the ledger's attempts of broker-a that ended in it
    outcomes = [json.loads(x) for f in (run / "ledgers").glob("send-*.jsonl") for x in f.read_text().splitlines()]
    mine = [r for r in outcomes if r["rec"] == "outcome" and r.get("broker") == "broker-a"
            and w["start_ms"] <= r["end_ms"] <= w["end_ms"]]
    assert sum(w["answers_by_broker"].get("broker-a", {}).values()) == len(mine) > 0, w["answers_by_broker"]
    from analysis.report.verdict import verdict
    assert "while broker-a's fsyncs failed (eio-a:" in verdict(s)
    assert s["store_check"]["gone_by_broker"].get("broker-b", 0) == 0


def test_the_platform_sigkilled_during_a_power_loss_leaves_no_mount_after_down(tmp_path: Path) -> None:
    # `rmqchaos run` dies while broker-a is without power (killed, its layer remounted, not back yet):
    # the layer's servers outlive it, and `cluster down --all` must end them and leave no mount
    f = _write(tmp_path, {
        "extends": str(SCENARIOS / "power-loss-async.yaml"), "name": "power-loss-killed",
        "cluster": {"namesrv": {"port": 23976}, "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 23931}, {"name": "broker-b", "port": 23941}]},
        "load": {"duration": "40s", "rate": 200, "users": 10},
        "faults": [{"id": "power-a", "kind": "power_loss", "target": "broker-a", "at": "4s", "back_after": "25s"}]})
    out = tmp_path / "run"

    def remounted() -> bool:  # broker-a killed by the cut, and its layer's server started again after it
        ev = ProcessLog(out / "processes.jsonl").entries()
        cut = next((i for i, e in enumerate(ev) if e.get("event") == "exit" and e.get("node") == "broker-a"), None)
        return cut is not None and any(e.get("node") == "powerfs-broker-a" and e.get("event") == "start"
                                       for e in ev[cut:])

    def our_mounts() -> list[str]:
        return [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if str(out) in ln]
    p = subprocess.Popen([*RMQCHAOS, "run", str(f), "--out", str(out)], cwd=REPO, env=os.environ.copy(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not remounted():
            assert p.poll() is None, f"run ended before the power loss: {p.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, "the power loss never came"
            time.sleep(0.1)
        # broker-a's layer, remounted on what it kept: its server's start is recorded when it is spawned,
        # the mount shows a moment later (a fresh-clone run checked at once and saw none)
        from rmqchaos.machine.wait import poll_until
        poll_until(lambda: len(our_mounts()) == 1, 10, "broker-a's layer to be mounted again")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert our_mounts(), "the layer's servers outlive the platform (nothing to reap otherwise)"
    r = cli("cluster", "down", "--all")
    assert r.returncode == 0, r.stderr
    assert our_mounts() == [], our_mounts()
    assert_nothing_left(out)  # the brokers, the load, the consumer and the layer's servers
    assert (out / "cluster" / "broker-a" / "store" / "commitlog").is_dir()  # the store stays, readable


def _forces(pid: int, tasks: subprocess.Popen) -> dict[str, int]:
    """The counts `perf stat` printed (-x,) for the syscalls that force data: msync (MappedByteBuffer.force),
    fsync and fdatasync (FileChannel.force)."""
    tasks.send_signal(signal.SIGINT)
    _, err = tasks.communicate(timeout=30)
    got = {}
    for ln in err.splitlines():
        parts = ln.split(",")
        if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_"):
            assert parts[0].isdigit(), f"perf could not count {parts[2]} of pid {pid}: {ln}"
            got[parts[2].removeprefix("syscalls:sys_enter_")] = int(parts[0])
    assert set(got) == {"msync", "fsync", "fdatasync"}, err[-2000:]
    return got


# the files 5.5.0 writes through a shared mapping and forces with MappedByteBuffer.force (msync): the
# commit log, consume queues, index, store checkpoint, timer wheel and log, and the timer checkpoint.
# Not the config files (ConfigManager: FileChannel.force(true), an fsync, and its directory's) nor RocksDB's.
MAPPED_DIRS, MAPPED_FILES = ("commitlog/", "consumequeue/", "index/", "timerlog/"), ("checkpoint", "timerwheel", "config/timercheck")


def _mapped_syncs(layer: Any) -> dict[str, int]:
    """The layer's syncs per mapped file of the store (MAPPED_DIRS, MAPPED_FILES)."""
    return {f["path"]: int(f["syncs"]) for f in layer.stats()["files"]
            if f["path"].startswith(MAPPED_DIRS) or f["path"] in MAPPED_FILES}


def test_every_force_of_a_real_broker_reaches_the_layer_as_one_sync_and_a_drop_leaves_its_synced_bytes(
        tmp_path: Path) -> None:
    # A SYNC_FLUSH broker on the layer stores 300 messages while the kernel counts its JVM's msync
    # calls (MappedByteBuffer.force: how 5.5.0 flushes the commit log, consume queues, index and
    # checkpoint without TSP; perf's syscall tracepoints, no ptrace) and the layer its FUSE syncs of
    # those files. The broker is frozen at both ends of the window (the freezer waits for a task
    # inside a FUSE call, so no force is half counted): the two counts must be equal.
    from conftest import _start, scenario_dict
    from pipeline.stages import down
    from rmqclient.admin import AdminClient
    from rmqclient.producer import Producer
    d = scenario_dict("forces", 23986, [23951], load={"topic": "T_FORCE", "duration": "30s"},
                      faults=[{"kind": "power_loss", "target": "broker-a", "at": "20s"}])  # puts broker-a on the layer
    d["cluster"]["broker_defaults"] = {"config": {"flushDiskType": "SYNC_FLUSH"}}
    run, c = _start(tmp_path, d)
    try:
        node = c.node("broker-a")
        layer = node.layer(mount=False)
        assert layer is not None and node.pid is not None
        AdminClient(c.namesrv_addr).create_topic_everywhere("T_FORCE", queues=4)
        prod = Producer(c.namesrv_addr, timeout=10)
        try:
            assert all(prod.send("T_FORCE", b"warm").status == "SEND_OK" for _ in range(50))  # its files made
            node.pause()
            before = _mapped_syncs(layer)
            perf = subprocess.Popen(["perf", "stat", "-x,", "-p", str(node.pid), "-e",
                                     "syscalls:sys_enter_msync,syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)  # attached to every thread
            assert perf.poll() is None, perf.communicate()[1]
            node.resume()
            acked = sum(prod.send("T_FORCE", b"x" * 512).status == "SEND_OK" for _ in range(300))
            time.sleep(1.5)  # the consume queues' flush (every second) comes in the window too
            node.pause()
            after = _mapped_syncs(layer)
            forces = _forces(node.pid, perf)
            node.resume()
        finally:
            prod.close()
        assert acked == 300
        delta = {p: n - before.get(p, 0) for p, n in after.items() if n != before.get(p, 0)}
        syncs = sum(delta.values())
        # SYNC_FLUSH: at least one force per group commit, so some hundreds; every msync a sync of the
        # layer. A mapped file can also be forced through its channel (DefaultMappedFile.flush takes
        # FileChannel.force, an fdatasync, once the channel's position is not 0): one run in four here
        # had the 4 consume queues synced once each in the window and perf counted 4 fdatasyncs, the
        # commit log, checkpoint, timercheck and timerwheel's syncs equal to the msyncs. perf does not
        # say which file a force named, so: no msync missing, and no sync without a force.
        assert forces["msync"] >= 100, (forces, delta)
        assert forces["msync"] <= syncs <= forces["msync"] + forces["fsync"] + forces["fdatasync"], (forces, delta)

        # After a drop a file reads exactly its synced bytes. Frozen, the broker changes nothing; a file
        # of which the layer holds nothing unsynced reads in the real directory as it was last synced
        # (dirty pages of its mapping still in the kernel never reach the layer: the abort), so after the
        # power loss it must read the same, byte for byte; a file with unsynced writes comes back at its
        # synced size.
        node.pause()
        real = node.dir / "store"
        read = {f["path"]: (real / f["path"]).read_bytes() for f in layer.stats()["files"]
                if (real / f["path"]).is_file() and (real / f["path"]).stat().st_size <= 64 << 20}  # not the 1 GiB log
        # the kernel may still write a mapping's dirty pages back meanwhile: a file counts only if the layer
        # holds nothing unsynced of it after it was read (frozen, nothing syncs, so unsynced bytes only grow),
        # nor its size (a consume queue file created at 6 MB and never synced comes back empty: checked below)
        clean = {f["path"]: read[f["path"]] for f in layer.stats()["files"] if f["path"] in read and f["unsynced_bytes"] == 0
                 and f["synced_size"] in (None, len(read[f["path"]]))}
        lost = c.power_loss(["broker-a"])["broker-a"]
        assert lost["remounted"], lost
        assert len(clean) >= 5 and [p for p, b in clean.items() if (real / p).read_bytes() != b] == [], sorted(clean)
        resized = [(f["path"], f["synced_size"], (real / f["path"]).stat().st_size) for f in lost["files"]
                   if f.get("synced_size") is not None and (real / f["path"]).is_file()]
        assert all(want == got for _, want, got in resized), resized
    finally:
        down.run(run)
