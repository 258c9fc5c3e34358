"""Faults on a role, not a name (issue 36): `master-of:<group>` and `controller-leader` in the spec
(one line each when they cannot resolve), their resolution when an occurrence fires, and a
`restart_after` that restarts the node its kill hit. Pure logic; the real cluster is in
tests/test_controller.py."""
from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from chaos import targets
from chaos.registry import registry
from chaos.protocol import FaultError
from chaos.scheduler import FaultScheduler, occurrences
from cluster.backend import ClusterBackend
from cluster.net.roundtrip import named_endpoints, role_candidates
from pipeline.runs import create_run
from rmqchaos.spec import SpecError, parse_scenario
from rmqclient.admin import RemotingError
from rmqclient.controllers import ReplicaGroup

pytestmark = pytest.mark.fast

# broker-a: a controller-mode group of 3; broker-b: a classic master
CTL = """name: roles
load: {duration: 60s}
cluster:
  subnet: 127.0.61.0/24
  namesrv: {port: 27076}
  controllers: {count: 3, port: 27078}
  brokers:
    - {name: broker-a, port: 27111, replicas: 3}
    - {name: broker-b, port: 27131}
faults:
"""
BARE = CTL.replace("faults:\n", "faults: []\n")
A = ["127.0.61.11:27111", "127.0.61.12:27115", "127.0.61.13:27119"]
CONTROLLERS = ["127.0.61.3:27078", "127.0.61.4:27079", "127.0.61.5:27080"]


def parse(text: str) -> Any:
    return parse_scenario(text, "t.yaml", fault_kinds=registry())


def err(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse(text)
    return e.value.lines


@pytest.mark.parametrize("fault", [
    "{kind: kill, target: 'master-of:broker-a', at: 1s, restart_after: 5s}",
    "{kind: kill, target: 'master-of:broker-b', at: 1s}",  # a classic group: its one master
    "{kind: pause, target: controller-leader, at: 1s, duration: 2s}",
    "{kind: oom_kill, target: 'master-of:broker-a', at: 1s}",
    "{kind: restart, target: controller-leader, at: 1s}",
    "{kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a'], [controller-leader, namesrv]]}",
])
def test_a_role_target_that_can_resolve_is_valid(fault: str) -> None:
    assert parse(CTL + f"  - {fault}\n").faults[0].kind


@pytest.mark.parametrize("text, line", [
    (CTL + "  - {kind: kill, target: 'master-of:broker-x', at: 1s}\n",
     "t.yaml:11: faults[0].target: no broker group 'broker-x' in this cluster; groups: broker-a, broker-b"),
    (CTL.replace("  controllers: {count: 3, port: 27078}\n", "").replace(", replicas: 3}", "}")
     + "  - {kind: kill, target: controller-leader, at: 1s}\n",
     "t.yaml:10: faults[0].target: controller-leader needs standalone controllers (cluster.controllers with mode: "
     "standalone); this cluster has none"),
    (CTL.replace("{count: 3, port: 27078}", "{mode: embedded, count: 1, port: 27078}")
     + "  - {kind: kill, target: controller-leader, at: 1s}\n",
     "t.yaml:11: faults[0].target: controller-leader needs standalone controllers (cluster.controllers with mode: "
     "standalone); an embedded controller lives in namesrv: target namesrv"),
    (CTL + "  - {kind: blkio_throttle, target: 'master-of:broker-a', at: 1s, write_mb_s: 5}\n",
     "t.yaml:11: faults[0].target: a blkio_throttle fault takes a node's name, not a role; roles (master-of:<group>, "
     "controller-leader) work with clock, disk_error, disk_full, disk_slow, jvm_oom, kill, oom_kill, pause, power_loss, restart and in a partition's groups"),
    (CTL + "  - {kind: jvm_oom, target: controller-leader, at: 1s}\n",
     "t.yaml:11: faults[0].target: a jvm_oom fault acts on a broker, and controller-leader is a controller: use "
     "master-of:<group>"),
    (CTL + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-c'], [namesrv]]}\n",
     "t.yaml:11: faults[0].groups[0][0]: no broker group 'broker-c' in this cluster; groups: broker-a, broker-b"),
])
def test_a_role_that_cannot_resolve_or_a_kind_that_takes_none_is_one_line_at_the_target(text: str, line: str) -> None:
    assert err(text) == [line]


def test_a_restart_after_a_role_kill_follows_that_kill_and_ids_stay_file_safe() -> None:
    s = parse(CTL + "  - {kind: kill, target: 'master-of:broker-a', at: 1s, restart_after: 5s, "
                    "repeat: {every: 20s, times: 2}}\n")
    plan = [(o.at, o.fault_id, o.fault.kind, o.follows) for o in occurrences(s.faults)]
    assert plan == [(1.0, "kill-master-of-broker-a#1", "kill", None),
                    (6.0, "kill-master-of-broker-a#1-restart", "restart", "kill-master-of-broker-a#1"),
                    (21.0, "kill-master-of-broker-a#2", "kill", None),
                    (26.0, "kill-master-of-broker-a#2-restart", "restart", "kill-master-of-broker-a#2")]


def test_the_monitor_probes_every_node_that_may_hold_a_role_of_a_partition() -> None:
    s = parse(BARE)
    assert role_candidates(s, "master-of:broker-a") == ["broker-a-0", "broker-a-1", "broker-a-2"]
    assert role_candidates(s, "controller-leader") == ["controller-0", "controller-1", "controller-2"]
    assert [a for _, a, _ in named_endpoints(s, "master-of:broker-b")] == ["127.0.61.21"]


# ---------------------------------------------------------------- resolution, against the answers it reads


class Answers(ClusterBackend):
    """The answers resolution reads (the controllers' SyncStateSet data and leader, namesrv's
    registrations), scripted; and nodes that record what is done to them."""
    up = down = status = spawn_client = run_tool = lambda *a, **k: None  # type: ignore[assignment]

    def __init__(self, scenario: Any) -> None:
        super().__init__(None, scenario)  # type: ignore[arg-type]
        self.state: Any = {}
        self.leader: Any = None
        self.reg: dict = {}
        self.done: list[tuple[str, str]] = []
        self.fakes: dict[str, FakeNode] = {}

    def sync_state(self, timeout: float = 2.0) -> dict[str, ReplicaGroup]:  # type: ignore[override]
        st = self.state() if callable(self.state) else self.state
        if isinstance(st, Exception):
            raise st
        return st

    def controller_leader(self, timeout: float = 2.0) -> str | None:  # type: ignore[override]
        return self.leader() if callable(self.leader) else self.leader

    def registered(self) -> dict:  # type: ignore[override]
        return self.reg

    def node(self, name: str) -> Any:  # type: ignore[override]
        return self.fakes.setdefault(name, FakeNode(self, name))


Answers.__abstractmethods__ = frozenset()


class FakeNode:
    def __init__(self, c: Answers, name: str) -> None:
        self.c, self.name, self.pid = c, name, 100  # type: int | None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.c.done.append(("kill", self.name))
        self.pid = None

    def wait_exit(self, pid: int, timeout: float) -> bool:
        return self.pid != pid

    def restart(self) -> None:
        self.c.done.append(("restart", self.name))
        self.pid = 101


def group(master: str | None, epoch: int = 1) -> ReplicaGroup:
    return ReplicaGroup(master, 1 if master else None, epoch, A, [])


def test_a_controller_mode_master_is_the_controllers_a_classic_one_namesrvs_id_0_the_leader_the_controllers() -> None:
    c = Answers(parse(BARE))
    c.state = {"broker-a": group(A[1])}
    c.reg = {"broker-a": {0: A[2]}, "broker-b": {0: "127.0.61.21:27131"}}  # namesrv behind the controllers
    c.leader = CONTROLLERS[2]
    assert targets.resolve(c, "master-of:broker-a") == "broker-a-1"
    assert targets.resolve(c, "master-of:broker-b") == "broker-b"
    assert targets.resolve(c, "controller-leader") == "controller-2"
    assert targets.resolve(c, "broker-a-0") == "broker-a-0"  # a name is itself, nothing asked


def test_with_every_controller_silent_a_controller_mode_master_is_namesrvs_id_0() -> None:
    """All controllers paused (all-ack-crash.yaml): the brokers keep their roles; namesrv lists them."""
    c = Answers(parse(BARE))
    c.state = RemotingError("timeout waiting for 127.0.61.5:27080 (request code 1006)")
    c.reg = {"broker-a": {0: A[2], 1: A[0]}}
    assert targets.resolve(c, "master-of:broker-a") == "broker-a-2"
    assert targets.resolve_all(c, "slave-of:broker-a#1") == ["broker-a-0"]


def test_mid_election_the_resolution_waits_for_a_master_then_takes_it() -> None:
    c = Answers(parse(BARE))
    t0 = time.monotonic()
    c.state = lambda: {"broker-a": group(A[2], 2) if time.monotonic() - t0 > 0.6 else group(None, 1)}
    assert targets.resolve(c, "master-of:broker-a", wait_s=5) == "broker-a-2"
    assert 0.5 < time.monotonic() - t0 < 2


@pytest.mark.parametrize("role, answers, line", [
    ("master-of:broker-a", {"state": {"broker-a": group(None, 3)}},
     "master-of:broker-a resolves to no node: no master of broker-a after waiting 0.5s (the controllers name no "
     "master of broker-a (epoch 3))"),
    ("master-of:broker-a", {"state": RemotingError("cannot connect to 127.0.61.5:27080")},
     "master-of:broker-a resolves to no node: no master of broker-a after waiting 0.5s (the controllers did not "
     "answer (cannot connect to 127.0.61.5:27080); namesrv lists no master (brokerId 0) of broker-a)"),
    ("master-of:broker-b", {"reg": {"broker-b": {1: "127.0.61.22:27136"}}},
     "master-of:broker-b resolves to no node: no master of broker-b after waiting 0.5s (namesrv lists no master "
     "(brokerId 0) of broker-b)"),
    ("controller-leader", {"leader": None},
     "controller-leader resolves to no node: no controller leader after waiting 0.5s (no controller answers as the "
     "Raft leader)"),
])
def test_no_holder_within_the_wait_is_one_line_naming_what_was_seen(role: str, answers: dict, line: str) -> None:
    c = Answers(parse(BARE))
    for k, v in answers.items():
        setattr(c, k, v)
    with pytest.raises(FaultError) as e:
        targets.resolve(c, role, wait_s=0.5)
    assert e.value.message == line


def schedule(tmp_path: Path, faults: str, configure: Callable[["Answers"], None]) -> tuple[Any, dict, FaultScheduler]:
    """The scenario's faults (CTL plus `faults`) run by a real FaultScheduler against scripted answers
    (`configure` sets them): the answers' record of what was done, the fault events by id, the scheduler."""
    f = tmp_path / "s.yaml"
    f.write_text(CTL + faults)
    run = create_run(f, tmp_path / "run")
    c = Answers(run.scenario())
    configure(c)
    sched = FaultScheduler(run, c, run.scenario().faults)
    run.load_dir.mkdir()
    run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
    sched.start()
    sched.join(10)
    return c, {e["params"]["fault_id"]: e for e in run.timeline() if e["kind"] == "fault"}, sched


def test_the_kill_hits_the_master_of_its_time_and_the_restart_after_it_that_same_node(tmp_path: Path) -> None:
    """The role is resolved when the kill fires; by the restart another replica is master, and the
    restart still brings back the node that was killed. The events name the node and the role."""
    def answers(c: Answers) -> None:
        c.state = lambda: {"broker-a": group(A[2] if ("kill", "broker-a-1") in c.done else A[1])}
    c, ev, sched = schedule(tmp_path, "  - {kind: kill, target: 'master-of:broker-a', at: 0s, restart_after: 0.5s}\n"
                                      "  - {kind: kill, target: 'master-of:broker-a', at: 1.5s}\n", answers)
    sched.check()
    assert c.done == [("kill", "broker-a-1"), ("restart", "broker-a-1"), ("kill", "broker-a-2")]
    kill, restart, second = (ev[k] for k in ("kill-master-of-broker-a", "kill-master-of-broker-a-restart",
                                             "kill-master-of-broker-a-2"))
    assert (kill["target"], kill["params"]["role"], kill["outcome"]) == ("broker-a-1", "master-of:broker-a", "ok")
    assert 0 <= kill["params"]["resolve_s"] < 1
    assert (restart["target"], restart["params"]["follows"], "role" not in restart["params"]) == (
        "broker-a-1", "kill-master-of-broker-a", True)
    ev = kill["params"]["evidence"]
    assert (ev["pid"], ev["signal"], ev["intent"]["short"]) == (100, "SIGKILL", False), ev
    assert ev["intent"]["brief"] == f"pid 100 gone {ev['gone_after_ms']} ms after SIGKILL", ev
    ev = restart["params"]["evidence"]
    assert (ev["old_pid"], ev["pid"]) == (None, 101)  # the killed node, started again
    # back under a new pid, but these scripted answers' namesrv lists no broker: measured, so short
    assert ev["intent"]["words"].startswith("restart of broker-a-1: not listed by namesrv; back as pid 101 after ")
    assert ev["intent"]["short"] is True
    assert (second["target"], second["params"]["role"]) == ("broker-a-2", "master-of:broker-a")


def test_occurrences_due_at_one_instant_are_all_resolved_before_any_acts(tmp_path: Path) -> None:
    """apache/rocketmq#7689's shape: the controller leader and the master killed at once. The master is
    resolved by asking the leader, which answers slowly here; were the leader killed first, no leader
    would name a master (and the controllers could elect before the master's kill)."""
    def answers(c: Answers) -> None:
        def slow_state() -> Any:
            time.sleep(0.3)
            if ("kill", "controller-1") in c.done:
                raise RemotingError("no controller answers as the Raft leader")
            return {"broker-a": group(A[0])}
        c.leader = lambda: None if ("kill", "controller-1") in c.done else CONTROLLERS[1]
        c.state = slow_state
    c, ev, sched = schedule(tmp_path, "  - {id: leader, kind: kill, target: controller-leader, at: 0s}\n"
                                      "  - {id: master, kind: kill, target: 'master-of:broker-a', at: 0s}\n", answers)
    sched.check()
    assert sorted(c.done) == [("kill", "broker-a-0"), ("kill", "controller-1")]
    assert abs(ev["leader"]["start_ms"] - ev["master"]["start_ms"]) < 100, ev  # together, once both were known


def test_a_restart_comes_restart_after_the_kill_acted_not_after_its_scheduled_time(tmp_path: Path) -> None:
    """A master that takes 0.6 s to resolve, restarted 0.3 s after: the restart must not race the kill."""
    def slow_state() -> Any:
        time.sleep(0.6)
        return {"broker-a": group(A[1])}
    c, ev, sched = schedule(tmp_path, "  - {id: k, kind: kill, target: 'master-of:broker-a', at: 0s, restart_after: 0.3s}\n",
                            lambda c: setattr(c, "state", slow_state))
    sched.check()
    assert c.done == [("kill", "broker-a-1"), ("restart", "broker-a-1")]
    assert ev["k"]["params"]["resolve_s"] >= 0.6
    assert ev["k-restart"]["start_ms"] - ev["k"]["start_ms"] >= 290, ev


def test_a_role_that_resolves_to_nobody_fails_its_occurrence_and_its_restart(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "RESOLVE_WAIT_S", 0.3)
    c, ev, sched = schedule(tmp_path, "  - {kind: kill, target: 'master-of:broker-a', at: 0s, restart_after: 0.2s}\n",
                            lambda c: setattr(c, "state", {"broker-a": group(None)}))
    assert c.done == []
    kill, restart = ev["kill-master-of-broker-a"], ev["kill-master-of-broker-a-restart"]
    assert (kill["target"], kill["outcome"]) == ("master-of:broker-a", "failed")
    assert kill["params"]["evidence"]["error"].startswith(
        "master-of:broker-a resolves to no node: no master of broker-a after waiting 0.3s")
    assert (restart["outcome"], restart["params"]["evidence"]["error"]) == (
        "failed", "kill-master-of-broker-a hit no node: nothing to restart")
    with pytest.raises(Exception, match="fault kill-master-of-broker-a .* failed: master-of:broker-a resolves"):
        sched.check()


def partition(s: Any, c: "Answers", name: str) -> Any:
    """The scenario's first fault, a partition, as an occurrence on the fake cluster `c`."""
    from chaos.kinds.partition import Partition
    from chaos.protocol import FaultContext
    params = Partition.Params.model_validate(s.faults[0].params)
    return Partition(FaultContext(None, c, threading.Event()), s.faults[0], params, name)  # type: ignore[arg-type]


def test_a_partition_side_named_by_role_is_cut_at_its_holder_when_it_starts() -> None:
    s = parse(CTL + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a'], "
                    "[controller-leader, 'broker-a-1']]}\n")
    c = Answers(s)
    c.state, c.leader = {"broker-a": group(A[0])}, CONTROLLERS[1]
    p = partition(s, c, "cut")
    assert p.resolved(s.faults[0].params["groups"]) == [["broker-a-0"], ["controller-1", "broker-a-1"]]
    c.state = {"broker-a": group(A[1])}  # now the master is named on the other side too
    with pytest.raises(FaultError, match="partition cut: master-of:broker-a is broker-a-1 now, which is also in "
                                         "group 1"):
        p.resolved(s.faults[0].params["groups"])


def test_the_verdict_names_the_node_hit_and_the_role_it_held_and_not_the_restart_after_it() -> None:
    from analysis.report.verdict import faults_phrase
    ev = [{"kind": "fault", "outcome": "ok", "target": "broker-a-1",
           "params": {"fault_kind": "kill", "role": "master-of:broker-a"}},
          {"kind": "fault", "outcome": "ok", "target": "broker-a-1",
           "params": {"fault_kind": "restart", "follows": "kill-master-of-broker-a"}},
          {"kind": "fault", "outcome": "ok", "target": "controller-2",
           "params": {"fault_kind": "kill", "role": "controller-leader"}}]
    assert faults_phrase({"events": ev}) == ("one SIGKILL of broker-a-1 (master-of:broker-a) and one SIGKILL of "
                                             "controller-2 (controller-leader)")


def resolved(groups: str, master: int) -> list[list[str]]:
    """A partition's `groups` (YAML) resolved on the fake cluster whose master of broker-a is A[master]."""
    s = parse(CTL + f"  - {{kind: partition, at: 1s, duration: 5s, groups: {groups}}}\n")
    c = Answers(s)
    c.state = {"broker-a": group(A[master])}
    return partition(s, c, "isolate").resolved(s.faults[0].params["groups"])


def test_slaves_of_is_a_partition_member_only_and_resolves_to_every_node_of_the_group_but_its_master() -> None:
    assert err(CTL + "  - {kind: kill, target: 'slaves-of:broker-a', at: 1s}\n") == [
        "t.yaml:11: faults[0].target: slaves-of:broker-a names several nodes: only a partition's groups take it; "
        "target one node or master-of:<group>"]
    # the #7017 shape: the master cut from the controllers and the group's other replicas
    assert resolved("[['master-of:broker-a'], [controller-0, controller-1, controller-2, 'slaves-of:broker-a']]", 1) == [
        ["broker-a-1"], ["controller-0", "controller-1", "controller-2", "broker-a-0", "broker-a-2"]]


def test_controller_followers_is_a_partition_member_only_and_resolves_to_every_controller_but_the_leader() -> None:
    assert err(CTL + "  - {kind: pause, target: controller-followers, at: 1s, duration: 2s}\n") == [
        "t.yaml:11: faults[0].target: controller-followers names several nodes: only a partition's groups take it; "
        "target one node or master-of:<group>"]
    assert err(CTL.replace("  controllers: {count: 3, port: 27078}\n", "").replace("replicas: 3", "slave: {}")
               + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a'], [controller-followers]]}\n"
               ) == ["t.yaml:10: faults[0].groups[1][0]: controller-followers needs standalone controllers "
                     "(cluster.controllers with mode: standalone); this cluster has none"]
    # apache/rocketmq#7017's shape: the master and the controller leader cut from the Raft majority and the replicas
    s = parse(CTL + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a', controller-leader], "
                    "[controller-followers, 'slaves-of:broker-a']]}\n")
    c = Answers(s)
    c.state, c.leader = {"broker-a": group(A[0])}, CONTROLLERS[1]
    p = partition(s, c, "isolate")
    assert p.resolved(s.faults[0].params["groups"]) == [
        ["broker-a-0", "controller-1"], ["controller-0", "controller-2", "broker-a-1", "broker-a-2"]]
    # every controller may hold it: the monitor probes them all
    assert [n for n, _, _ in named_endpoints(s, "controller-followers")] == ["controller-0", "controller-1",
                                                                           "controller-2"]


def test_slave_of_k_is_one_of_the_group_s_slaves_and_k_is_checked() -> None:
    assert parse(CTL + "  - {kind: kill, target: 'slave-of:broker-a#1', at: 1s}\n").faults[0].target == "slave-of:broker-a#1"
    assert err(CTL + "  - {kind: kill, target: 'slave-of:broker-a#3', at: 1s}\n") == [
        "t.yaml:11: faults[0].target: slave-of:broker-a#3: broker-a has 3 node(s), so 2 slave(s) beside its master; k is 1..2"]
    assert err(CTL + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a', "
                     "'slave-of:broker-a#3'], [controller-followers]]}\n") == [
        "t.yaml:11: faults[0].groups[0][1]: slave-of:broker-a#3: broker-a has 3 node(s), so 2 slave(s) beside its "
        "master; k is 1..2"]
    # only slave-of takes #k: master-of:broker-a#1 is no member
    assert err(CTL + "  - {kind: partition, at: 1s, duration: 5s, groups: [['master-of:broker-a#1'], "
                     "[controller-followers]]}\n")[0].startswith("t.yaml:11: faults[0].groups[0][0]: ")
    # apache/rocketmq#6662's shape: the master and one slave cut from the controllers and the other slave;
    # the k-th slave counts the group's nodes in order, leaving out whichever is master then
    six = "[['master-of:broker-a', 'slave-of:broker-a#1'], [controller-0, controller-1, controller-2, 'slave-of:broker-a#2']]"
    assert resolved(six, 1) == [["broker-a-1", "broker-a-0"], ["controller-0", "controller-1", "controller-2", "broker-a-2"]]
    assert resolved(six, 0) == [["broker-a-0", "broker-a-1"], ["controller-0", "controller-1", "controller-2", "broker-a-2"]]
