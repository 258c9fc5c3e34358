"""Pure logic of the pipeline's parts, no JVM: scenario overlays, the fault protocol and registry,
the scheduler's concurrency, the one ledger schema, the poll helper."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from chaos.registry import registry
from chaos.protocol import KINDS, FaultKind, register
from chaos.scheduler import FaultScheduler
from cluster import get_backend
from pipeline.runs import create_run, load_scenario
from rmqchaos.ledger import schema as ledgers
from rmqchaos.errors import UserError
from rmqchaos.spec import Duration, SpecError, Strict
from rmqchaos.machine.wait import poll_until

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parent.parent


def err(path: Path) -> SpecError:
    with pytest.raises(SpecError) as e:
        load_scenario(path)
    return e.value


# ---------------------------------------------------------------- overlays

def test_tsp_on_and_off_differ_by_one_key() -> None:
    on = load_scenario(REPO / "scenarios" / "oom-tsp-on.yaml").resolved()
    off = load_scenario(REPO / "scenarios" / "oom-tsp-off.yaml").resolved()
    assert (on.pop("name"), off.pop("name")) == ("oom-tsp-on", "oom-tsp-off")
    # and what each exists to show: loss in no store with TSP, none without
    assert (on.pop("signature")["conditions"], off.pop("signature")["conditions"]) == (
        ["store_check.lost_from_store > 0"], ["failed > 0", "lost == 0"])
    conf_on, conf_off = on["cluster"]["broker_defaults"].pop("config"), off["cluster"]["broker_defaults"].pop("config")
    assert on == off
    assert {k for k in conf_on if conf_on[k] != conf_off.get(k)} == {"transientStorePoolEnable"}
    assert conf_on["transientStorePoolEnable"] is True and conf_off["transientStorePoolEnable"] is False


def test_control_is_the_headline_load_without_faults() -> None:
    c = load_scenario(REPO / "scenarios" / "control.yaml")
    on = load_scenario(REPO / "scenarios" / "oom-tsp-on.yaml")
    assert c.name == "control" and c.faults == [] and c.load == on.load and c.cluster == on.cluster


def test_overlay_merges_mappings_replaces_lists_and_names_itself(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("name: base\nload: {rate: 100, duration: 20s}\n"
                                        "cluster:\n  brokers: [{name: broker-a}, {name: broker-b}]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fast.yaml").write_text("extends: ../base.yaml\nload: {rate: 300}\n"
                                                "cluster:\n  brokers: [{name: broker-x}]\n")
    s = load_scenario(tmp_path / "sub" / "fast.yaml")
    assert s.name == "fast"  # never inherited
    assert (s.load.rate, s.load.duration) == (300, 20.0)  # type: ignore[union-attr]
    assert [b.name for b in s.cluster.brokers] == ["broker-x"]


def test_error_in_a_base_names_the_base_file_and_line(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("name: base\nload:\n  rate: -1\n")
    (tmp_path / "o.yaml").write_text("extends: base.yaml\nload: {duration: 10s}\n")
    assert err(tmp_path / "o.yaml").lines[0] == f"{base}:3: load.rate: Input should be greater than 0 (got -1)"


def test_extends_cycle_and_missing_base_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    assert "extends: a.yaml extends this file again (a cycle)" in err(tmp_path / "a.yaml").lines[0]
    (tmp_path / "c.yaml").write_text("name: c\nextends: nope.yaml\n")
    assert err(tmp_path / "c.yaml").lines[0].startswith(f"{tmp_path / 'c.yaml'}:2: extends: no such file")


@pytest.mark.parametrize("text, expect", [
    ("a: &a [*a]\n", ":1: a YAML alias refers to itself"),
    ("a: &a [1,2,3,4,5,6,7,8,9,10]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 10)}]\n" for p, n in zip("abcd", "bcde")), "alias bomb"),
])
def test_recursive_alias_and_alias_bomb_are_refused_at_once(tmp_path: Path, text: str, expect: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    t0 = time.monotonic()
    assert expect in err(f).lines[0]
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------- the fault protocol

def scenario_with(tmp_path: Path, *faults: dict) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "load": {"duration": "30s"}, "faults": list(faults)}))
    return f


def test_registry_has_every_kind_and_their_parameters() -> None:
    reg = registry()
    assert {"oom_kill", "jvm_oom", "kill", "pause", "restart"} <= set(reg)
    assert reg["pause"].Params.model_validate({}).duration == 5.0  # type: ignore[attr-defined]
    assert {k for k, v in reg.items() if v.ends_node} >= {"oom_kill", "jvm_oom", "kill"}


@pytest.mark.parametrize("fault, expect", [
    ({"kind": "pause", "target": "broker-a", "at": "1s", "duraton": "2s"},
     "faults[0].duraton: unknown key for a pause fault; allowed: id, kind, target, at, after, restart_after, repeat, "
     "timeout, duration"),
    ({"kind": "kill", "target": "broker-a", "at": "1s", "signal": "SIGKIL"}, "faults[0].signal: unknown signal 'SIGKIL'"),
    ({"kind": "pause", "target": "broker-a", "at": "1s", "restart_after": "2s"},
     "faults[0].restart_after: restart_after applies to jvm_oom, kill, oom_kill"),
    ({"kind": "jvm_oom", "target": "namesrv", "at": "1s"}, "faults[0].target: no broker 'namesrv' in this cluster"),
    ({"kind": "pause", "at": "1s"}, "faults[0]: a pause fault needs `target:`"),
])
def test_kind_parameters_are_checked_on_load_with_their_line(tmp_path: Path, fault: dict, expect: str) -> None:
    e = err(scenario_with(tmp_path, fault))
    assert e.lines[0].startswith(f"{tmp_path / 's.yaml'}:") and expect in e.lines[0], e.lines


def test_resolved_fault_shows_the_kinds_defaults(tmp_path: Path) -> None:
    s = load_scenario(scenario_with(tmp_path, {"kind": "pause", "target": "broker-a", "at": "1s"},
                                    {"kind": "kill", "target": "broker-b", "at": "2s", "signal": "term"}))
    assert s.faults[0].params == {"duration": 5.0} and s.faults[1].params == {"signal": "SIGTERM"}


class HoldParams(Strict):
    hold: Duration = 1.0


class Hold(FaultKind):
    """A test kind, admin-level (no target): registered here, nothing else edited."""
    name = "test_hold"
    Params = HoldParams
    target = "none"
    log: ClassVar[list[tuple[str, str, float]]] = []

    @classmethod
    def span(cls, params: Any) -> float:
        return float(params.hold)

    def start(self) -> None:
        Hold.log.append((self.fault.id or "", "start", time.monotonic()))

    def stop(self) -> dict[str, Any]:
        Hold.log.append((self.fault.id or "", "stop", time.monotonic()))
        return {"held": self.params.hold}  # type: ignore[attr-defined]


@pytest.fixture
def hold_kind():
    register(Hold)
    Hold.log.clear()
    yield Hold
    KINDS.pop("test_hold", None)


def test_a_new_kind_is_one_class_and_its_registration(tmp_path: Path, hold_kind) -> None:
    s = load_scenario(scenario_with(tmp_path, {"kind": "test_hold", "at": "1s", "hold": "3s"}))
    assert s.faults[0].params == {"hold": 3.0}
    e = err(scenario_with(tmp_path, {"kind": "test_hold", "at": "1s", "target": "broker-a"}))
    assert "a test_hold fault acts on the cluster, not on a node" in e.lines[0]
    e = err(scenario_with(tmp_path, {"kind": "test_hold", "at": "25s", "hold": "10s"}))
    assert "the fault (at 25s, lasting 10s) ends after the load's duration 30s" in e.lines[0]


def test_scheduler_runs_occurrences_concurrently_on_the_load_clock(tmp_path: Path, hold_kind) -> None:
    f = scenario_with(tmp_path, {"id": "long", "kind": "test_hold", "at": "0s", "hold": "1.5s"},
                      {"id": "short", "kind": "test_hold", "at": "0.3s", "hold": "0.2s",
                       "repeat": {"every": "0.5s", "times": 2}})
    run = create_run(f, tmp_path / "run")
    sched = FaultScheduler(run, get_backend(run), run.scenario().faults)
    run.load_dir.mkdir()
    t0 = time.time()
    run.load_started_file.write_text(json.dumps({"start_s": t0}))
    sched.start()
    sched.join(10)
    sched.check()
    ev = {e["params"]["fault_id"]: e for e in run.timeline() if e["kind"] == "fault"}
    assert set(ev) == {"long", "short#1", "short#2"} and all(e["outcome"] == "ok" for e in ev.values())
    assert ev["long"]["params"]["evidence"] == {"held": 1.5}
    # both short occurrences started and ended while the long one was held: no occurrence waits for another
    assert ev["long"]["start_ms"] < ev["short#1"]["start_ms"] < ev["short#2"]["end_ms"] < ev["long"]["end_ms"]
    assert abs(ev["short#2"]["start_ms"] / 1000 - (t0 + 0.8)) < 0.3  # on the load's clock


def test_scheduler_stops_long_faults_and_skips_later_ones_when_the_load_ends(tmp_path: Path, hold_kind) -> None:
    f = scenario_with(tmp_path, {"id": "long", "kind": "test_hold", "at": "0s", "hold": "20s"},
                      {"id": "late", "kind": "test_hold", "at": "25s"})
    run = create_run(f, tmp_path / "run")
    sched = FaultScheduler(run, get_backend(run), run.scenario().faults)
    run.load_dir.mkdir()
    run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
    sched.start()
    time.sleep(0.5)
    sched.stop()  # the load ended
    sched.join(10)
    assert not sched.is_alive()
    assert [e[:2] for e in Hold.log] == [("long", "start"), ("long", "stop")]
    with pytest.raises(UserError, match="fault late not applied: the load ended first"):
        sched.check()


class Follow(Hold):
    """A lasting test kind that follows something: ticked every tick_s while it holds."""
    name = "test_follow"
    tick_s = 0.2

    def tick(self) -> None:
        Hold.log.append((self.fault.id or "", "tick", time.monotonic()))


def _one_fault_run(tmp_path: Path, kind: type[FaultKind], fault: dict) -> tuple[Any, FaultScheduler]:
    """Register `kind`, run the scheduler over one fault on a load clock that starts now, to its end."""
    register(kind)
    try:
        run = create_run(scenario_with(tmp_path, {"kind": kind.name, **fault}), tmp_path / "run")
        sched = FaultScheduler(run, get_backend(run), run.scenario().faults)
        run.load_dir.mkdir()
        run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
        sched.start()
        sched.join(10)
    finally:
        KINDS.pop(kind.name, None)
    return run, sched


def test_scheduler_ticks_a_following_kind_between_its_start_and_stop_only(tmp_path: Path, hold_kind) -> None:
    _, sched = _one_fault_run(tmp_path, Follow, {"id": "f", "at": "0s", "hold": "1s"})
    sched.check()
    f_log = [(what, t) for fid, what, t in Hold.log if fid == "f"]
    assert [w for w, _ in f_log][0] == "start" and [w for w, _ in f_log][-1] == "stop"
    ticks = [t for w, t in f_log if w == "tick"]
    assert 2 <= len(ticks) <= 5, f_log  # 1 s at 0.2 s: not after the stop, not in a busy loop
    assert all(0.1 < b - a < 0.6 for a, b in zip(ticks, ticks[1:]))
    assert f_log[-1][1] - f_log[0][1] == pytest.approx(1.0, abs=0.3)  # the tick does not change the span


class FailingFollow(Follow):
    name = "test_failing_follow"

    def tick(self) -> None:
        super().tick()
        raise OSError("the node's cgroup is gone")


def test_a_tick_that_fails_fails_the_fault_and_its_stop_still_undoes_it(tmp_path: Path, hold_kind) -> None:
    run, sched = _one_fault_run(tmp_path, FailingFollow, {"id": "f", "at": "0s", "hold": "1s"})
    assert [w for _, w, _ in Hold.log] == ["start", "tick", "stop"]  # no tick after the failure; stopped
    (ev,) = [e for e in run.timeline() if e["kind"] == "fault"]
    assert ev["outcome"] == "failed" and "the node's cgroup is gone" in ev["params"]["evidence"]["error"]
    with pytest.raises(UserError, match="fault f .* failed: OSError: the node's cgroup is gone"):
        sched.check()


# ---------------------------------------------------------------- the one ledger schema

def test_writers_and_readers_share_the_ledger_schema(tmp_path: Path) -> None:
    from analysis.ledgers import duckdb_ref, schemas, synthetic
    extra = [n for n, _ in ledgers.SEALED_EXTRA]  # the seal's msgId halves, after the journal's fields
    assert [f.name for f in schemas.SEND.fields][:-1] == list(ledgers.OUTCOME_KEYS) + extra
    assert [f.name for f in schemas.RECEIVE.fields][:-1] == list(ledgers.RECEIVE_KEYS) + extra
    assert ledgers.OUTCOME_KEYS[:len(ledgers.INTENT_KEYS)] == ledgers.INTENT_KEYS
    synthetic.write(tmp_path, 200, files=1)
    send = [json.loads(x) for x in (tmp_path / "send-w0-1.jsonl").read_text().splitlines()]
    recv = [json.loads(x) for x in (tmp_path / "receive-c0.jsonl").read_text().splitlines()]
    # the shape the load writes (SendLines): an intent its own fields only, an outcome all of them
    assert {tuple(r) for r in send if r["rec"] == "intent"} == {ledgers.INTENT_KEYS}
    assert {tuple(r) for r in send if r["rec"] == "outcome"} == {ledgers.OUTCOME_KEYS}
    assert {tuple(r) for r in recv} == {ledgers.RECEIVE_KEYS}
    assert "'attempt_id':'BIGINT'" in duckdb_ref._SEND_COLS and "'queue_id':'INTEGER'" in duckdb_ref._RECV_COLS
    rec = ledgers.intent_record("intent", "r", "w0-1", 1, "k", 1, "T", "no_retry", 5, 6)
    assert list(rec) == list(ledgers.INTENT_KEYS)
    with pytest.raises(TypeError):
        ledgers.outcome_record("outcome", "r")


# ---------------------------------------------------------------- the poll helper

def test_poll_until_returns_the_value_checks_and_times_out() -> None:
    n = iter(range(100))
    assert poll_until(lambda: next(n) >= 3 and "done", 5, "x", interval=0.01) == "done"
    with pytest.raises(UserError, match="timed out after 0s waiting for nothing"):
        poll_until(lambda: False, 0.05, "nothing", interval=0.01)
    assert poll_until(lambda: False, 0.05, "nothing", interval=0.01, raise_on_timeout=False) is None

    def dead() -> None:
        raise UserError("the node exited")
    with pytest.raises(UserError, match="the node exited"):
        poll_until(lambda: False, 5, "x", check=dead)
    with pytest.raises(KeyError):
        poll_until(lambda: False, 0.02, "x", interval=0.01, error=lambda: KeyError("custom"))


# ---------------------------------------------------------------- completeness of a run's verdict

def _load_run(tmp_path: Path):
    from rmqchaos.machine.procs import now_ms
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "load": {"duration": "10s"}}))
    run = create_run(f, tmp_path / "run")

    def finish(drained: bool | None = True, consumer: str | None = "terminated", load_ok: bool = True,
               out_of_reach: list[str] | None = None) -> None:
        run.set_stage("load", {"status": "ok" if load_ok else "failed", "start_ms": 1, "end_ms": 2})
        run.load_dir.mkdir(exist_ok=True)
        if load_ok:
            (run.load_dir / "summary.json").write_text("{}")
        if drained is not None:
            run.event("drain", "consumers", now_ms(), now_ms(), "done" if drained else "timeout", drained=drained,
                      **({"out_of_reach": out_of_reach} if out_of_reach else {}))
        if consumer is not None:
            run.event("consumer_stop", "consumer-c0", now_ms(), now_ms(), consumer)
    return run, finish


def test_a_run_is_complete_only_when_the_load_finished_the_drain_reached_zero_and_consumers_stopped(tmp_path):
    from analysis.judge.completeness import completeness
    run, finish = _load_run(tmp_path)
    c = completeness(run)
    assert c["complete"] is False and c["receive_complete"] is False
    assert "the load stage never ran" in c["reasons"] and "the consumers were never drained" in c["reasons"]
    finish()
    assert completeness(run) == {"complete": True, "receive_complete": True, "reasons": []}


@pytest.mark.parametrize("kw, reason, receive_ok", [
    ({"drained": False}, "the drain did not reach lag 0 for every consumer group", False),
    ({"drained": False, "out_of_reach": ["broker-a"]},
     "the drain stopped early: broker group(s) broker-a had no running node", False),
    ({"consumer": "died (exit 137)"}, "consumer c0 did not stop cleanly (died (exit 137))", False),
    ({"consumer": None}, "consumer c0 did not stop cleanly (no stop recorded: killed with the platform)", False),
])
def test_an_unfinished_receive_side_means_no_loss_can_be_claimed(tmp_path: Path, kw: dict, reason: str,
                                                                  receive_ok: bool) -> None:
    from analysis.judge.completeness import completeness
    run, finish = _load_run(tmp_path)
    finish(**kw)
    c = completeness(run)
    assert c["complete"] is False and c["receive_complete"] is receive_ok
    assert any(r.startswith(reason) for r in c["reasons"]), c["reasons"]


def test_a_group_that_did_not_start_after_its_power_loss_is_named_in_the_drain_reason(tmp_path: Path) -> None:
    from analysis.judge.completeness import completeness
    run, finish = _load_run(tmp_path)
    run.event("fault", "broker-a", 1, 2, "ok", fault_id="power", fault_kind="power_loss",
              evidence={"nodes_lost": {"broker-a": {}}, "not_started": {"broker-a": "java.lang.NumberFormatException"}})
    finish(drained=False, out_of_reach=["broker-a"])
    assert ("the drain stopped early: broker group(s) broker-a had no running node, so their stored messages were "
            "out of reach (broker-a did not start again after its power loss: java.lang.NumberFormatException)"
            in completeness(run)["reasons"])


def test_a_stage_left_running_by_a_killed_process_reads_as_killed(tmp_path: Path) -> None:
    import subprocess
    import sys
    run, _ = _load_run(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    run.set_stage("load", {"status": "running", "start_ms": 1, "pid": p.pid, "starttime": 1})
    assert run.stages()["load"]["status"] == "killed"
    from analysis.judge.completeness import completeness
    assert any("the load stage did not finish (killed" in r for r in completeness(run)["reasons"])


@pytest.mark.fast
def test_drain_lag_is_unknown_while_a_broker_group_is_out_of_the_route(tmp_path: Path) -> None:
    """A dead broker drops out of namesrv's route: its stored messages are out of reach, not drained
    (measured: a broker OOM-killed for good made a run report 26743 acknowledged keys `lost`)."""
    from types import SimpleNamespace

    from loadgen.drain import group_lag
    from rmqclient.admin import AdminClient
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "lag", "load": {"topic": "T", "duration": "5s"}}))
    s = load_scenario(f)
    # routed brokers, no queues: the real AdminClient.consumer_lag decides without opening a connection
    routes = {"T": {"brokerDatas": [{"brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:10911"}},
                                    {"brokerName": "broker-b", "brokerAddrs": {"0": "127.0.0.1:10921"}}]}}
    admin = AdminClient("127.0.0.1:1")  # namesrv never asked: topic_route is the route below
    admin.topic_route = lambda t: routes.get(t)  # type: ignore[method-assign]
    backend = SimpleNamespace(masters=lambda: [SimpleNamespace(broker_name="broker-a"),
                                               SimpleNamespace(broker_name="broker-b")], admin=lambda: admin)
    lag = group_lag(backend, s)  # type: ignore[arg-type]
    assert lag() == 0
    routes["T"]["brokerDatas"].pop()  # broker-b died: namesrv no longer routes it
    assert lag() is None
    assert lag(frozenset({"broker-b"})) == 0  # the groups still reachable: drained


@pytest.mark.fast
def test_drain_stops_early_once_settled_while_a_broker_group_has_no_running_node() -> None:
    """After the load nothing restarts a dead broker: the drain stops once deliveries settle, not
    drained, naming the group (it waited its whole drain_timeout before, 300 s in one test run)."""
    from types import SimpleNamespace

    from loadgen.drain import dead_groups, drain
    nodes = [SimpleNamespace(plan=SimpleNamespace(broker_name=g, is_broker=True), running=lambda up=up: up)
             for g, up in (("broker-a", False), ("broker-b", True))]
    backend = SimpleNamespace(masters=lambda: [n.plan for n in nodes], nodes=lambda: nodes)
    assert dead_groups(backend)() == ["broker-a"]  # type: ignore[arg-type]
    consumers = [SimpleNamespace(deliveries=lambda: 7)]
    live_lag = [0]

    def lag(skip: frozenset[str] = frozenset()) -> int | None:  # broker-a unknown; the rest is live_lag
        return live_lag[0] if "broker-a" in skip else None
    t = time.monotonic()
    assert drain(consumers, 0.3, 30, lag, dead_groups(backend)) == (7, False, ["broker-a"])  # type: ignore[arg-type]
    assert time.monotonic() - t < 2
    live_lag[0] = 5  # a live group still holds messages (its queues not back to a consumer yet): wait for them
    t = time.monotonic()
    assert drain(consumers, 0.3, 1.0, lag, dead_groups(backend)) == (7, False, [])  # type: ignore[arg-type]
    assert time.monotonic() - t >= 1.0
    live_lag[0] = 0
    nodes[0].running = lambda: True  # every group has a running broker: the lag decides, up to the timeout
    t = time.monotonic()
    assert drain(consumers, 0.3, 1.0, lag, dead_groups(backend)) == (7, False, [])  # type: ignore[arg-type]
    assert time.monotonic() - t >= 1.0
    assert drain(consumers, 0.3, 30, lambda skip=frozenset(): 0, dead_groups(backend)) == (7, True, [])  # type: ignore[arg-type]
