"""Consumers that really read before the first fault (issue 47): the serving gate on a fake cluster
(the consumers' status files planted, the cluster's answers scripted), the status files' merge per
group, and after a restart whether the broker group served again (the completeness rule's reason);
POP consumers through the proxy too (their status keyed by broker name). Pure logic; the real
remoting consumer is tested in tests/test_failover_run.py (served by the master within the gate's
bound on 5.5.0), the real POP consumers in tests/test_grpc.py."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.judge.completeness import completeness
from analysis.judge.serving import restarts, summarize, words
from loadgen.serving import gate, wanted
from pipeline.runs import create_run
from rmqchaos.run import serving
from rmqchaos.errors import UserError
from tests.test_role_targets import CTL, Answers

pytestmark = pytest.mark.fast

A0, A1 = "127.0.61.11:27111", "127.0.61.12:27115"
B = "127.0.61.21:27131"
SCENARIO = CTL.replace("load: {duration: 60s}", "load: {duration: 60s, topic: T}\nconsumers: {}") \
    + "  - {kind: kill, target: 'master-of:broker-a', at: 1s, restart_after: 5s}\n"


class Routed(Answers):
    """The fake cluster, with namesrv's route of every topic: both broker groups."""

    def routed_groups(self, topic: str) -> set[str]:  # type: ignore[override]
        return {"broker-a", "broker-b"}


class Alive:
    node = "consumer-c0"

    def running(self) -> bool:
        return True


def status(run: Any, brokers: dict[str, dict[str, Any]], cid: str = "c0", group: str = "rmqchaos_consumer",
           started_ms: int = 1_000, written_ms: int = 100_000, keyed_by: str = "address",
           unwatched: str | None = None) -> None:
    """A consumer's status file as the Java side writes it (io.rmqchaos.ServingStatus)."""
    full = {a: {"served": 0, "first_served_ms": None, "last_served_ms": None, "refused": {}, "counts": {}, "spans": [],
                "spans_truncated": False, **b} for a, b in brokers.items()}
    run.consumers_dir.mkdir(exist_ok=True)
    serving.status_path(run.consumers_dir, cid).write_text(json.dumps(
        {"consumer_id": cid, "group": group, "keyed_by": keyed_by, "unwatched": unwatched, "started_ms": started_ms,
         "written_ms": written_ms, "heartbeats": {"sent": 2 if keyed_by == "address" else 0, "lock_busy": 1 if keyed_by ==
                                                  "address" else 0, "failed": 0}, "brokers": full}))


def setup(tmp_path: Path, scenario: str = SCENARIO) -> tuple[Any, Routed]:
    f = tmp_path / "s.yaml"
    f.write_text(scenario)
    run = create_run(f, tmp_path / "run")
    c = Routed(run.scenario())
    c.reg = {"broker-a": {0: A0, 1: A1}, "broker-b": {0: B}}
    return run, c


def test_the_gate_refuses_in_one_line_naming_the_master_that_never_served_the_group(tmp_path: Path) -> None:
    run, c = setup(tmp_path)
    assert wanted(c, run.scenario()) == {"rmqchaos_consumer": {A0: "broker-a-0", B: "broker-b"}}
    # broker-b served; broker-a's master answered only "subscription not latest" (the slave served: not enough)
    status(run, {A0: {"refused": {"25": 7}}, A1: {"served": 3, "first_served_ms": 2_000},
                 B: {"served": 9, "first_served_ms": 1_500}})
    t0 = time.monotonic()
    with pytest.raises(UserError) as e:
        gate(run, c, run.scenario(), [Alive()], int(time.time() * 1000), lambda: True, 1.0, bound=0.3)  # type: ignore[list-item]
    assert 0.3 <= time.monotonic() - t0 < 2
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("no fault applied: master broker-a-0 (127.0.61.11:27111) never served consumer group "
                           "rmqchaos_consumer (its pulls were refused: code 25 x7 (subscription not latest)) within "
                           "0.3s of the consumers' start: see "), line
    assert "broker-b" not in line
    ev = [x for x in run.timeline() if x["kind"] == "serving_gate"]
    assert [x["outcome"] for x in ev] == ["refused"]
    assert ev[0]["params"]["missing"] == [{"group": "rmqchaos_consumer", "master": "broker-a-0", "addr": A0}]


def test_the_gate_says_when_the_load_ended_or_a_consumer_stopped_before_service_came(tmp_path: Path) -> None:
    run, c = setup(tmp_path)
    status(run, {B: {"served": 1, "first_served_ms": 1_500}})
    with pytest.raises(UserError) as e:
        gate(run, c, run.scenario(), [Alive()], int(time.time() * 1000), lambda: False, 1.0)  # type: ignore[list-item]
    assert "never served consumer group rmqchaos_consumer (no pull answered) before the load ended" in str(e.value)

    class Dead(Alive):
        def running(self) -> bool:
            return False
    with pytest.raises(UserError) as e:
        gate(run, c, run.scenario(), [Dead()], int(time.time() * 1000), lambda: True, 1.0)  # type: ignore[list-item]
    assert "before consumer-c0 stopped" in str(e.value)


def test_the_gate_passes_once_every_master_served_and_moves_the_faults_by_its_overshoot(tmp_path: Path) -> None:
    run, c = setup(tmp_path)
    status(run, {A0: {"served": 1, "first_served_ms": 2_500, "refused": {"25": 3}}, B: {"served": 1, "first_served_ms": 1_500}})
    run.load_dir.mkdir()
    run.load_started_file.write_text(json.dumps({"start_s": time.time() - 3.0}))  # the first fault (1 s) was due 2 s ago
    delay = gate(run, c, run.scenario(), [Alive()], 1_000, lambda: True, 1.0)  # type: ignore[list-item]
    assert 1.9 < delay < 3
    ev = [x for x in run.timeline() if x["kind"] == "serving_gate"][0]
    assert ev["outcome"] == "passed" and ev["params"]["missing"] == []
    assert ev["params"]["first_served_s"] == {"rmqchaos_consumer": {"broker-a-0": 1.5, "broker-b": 0.5}}


def broker_conf(run: Any, node: str, group: str, addr: str) -> None:
    d = run.path / "cluster" / node
    d.mkdir(parents=True, exist_ok=True)
    ip, port = addr.split(":")
    (d / "broker.conf").write_text(f"brokerName={group}\nbrokerIP1={ip}\nlistenPort={port}\n")


def test_a_restarted_broker_group_that_does_not_serve_again_makes_the_run_incomplete(tmp_path: Path) -> None:
    run, _ = setup(tmp_path)
    for n, g, a in (("broker-a-0", "broker-a", A0), ("broker-a-1", "broker-a", A1), ("broker-b", "broker-b", B)):
        broker_conf(run, n, g, a)
    # broker-a-0 served until its kill at 10 s; broker-a-1 (the new master) from 14 s to 20 s, then nothing
    # more from broker-a; broker-b throughout. Two instances of the group: merged.
    status(run, {A0: {"served": 5, "first_served_ms": 2_000, "last_served_ms": 10_000, "spans": [[2_000, 10_000]],
                      "refused": {"25": 4}},
                 A1: {"served": 5, "first_served_ms": 14_000, "last_served_ms": 20_000, "spans": [[14_000, 20_000]]}},
           written_ms=200_000)
    status(run, {B: {"served": 5, "first_served_ms": 1_500, "last_served_ms": 190_000, "spans": [[1_500, 190_000]]}},
           cid="c1", started_ms=1_200, written_ms=200_000)
    run.event("fault", "broker-a-0", 9_000, 10_000, "ok", fault_id="k", fault_kind="kill")
    run.event("fault", "broker-a-0", 18_000, 19_000, "ok", fault_id="k-restart", fault_kind="restart")  # back at 19 s
    run.event("fault", "broker-b", 30_000, 40_000, "ok", fault_id="rb", fault_kind="restart")  # back at 40 s
    rs = {r["fault_id"]: r for r in restarts(run)}
    assert rs["k-restart"]["groups"] == {"rmqchaos_consumer": {"served_again_s": 0.0, "within_bound": True}}
    assert rs["rb"]["groups"] == {"rmqchaos_consumer": {"served_again_s": 0.0, "within_bound": True}}
    run.event("fault", "broker-a-1", 50_000, 60_000, "ok", fault_id="ra", fault_kind="restart")  # broker-a never again
    comp = completeness(run)
    assert ("after ra restarted broker-a-1, broker group broker-a did not serve consumer group rmqchaos_consumer "
            "within 60s") in comp["reasons"]
    sv = summarize(run)
    assert sv is not None and sv["not_latest_by_broker"] == {"broker-a-0": 4, "broker-a-1": 0, "broker-b": 0}
    assert sv["groups"]["rmqchaos_consumer"]["brokers"]["broker-a-1"]["first_served_s"] == 13.0
    assert sv["groups"]["rmqchaos_consumer"]["heartbeats"]["sent"] == 4
    w = words(sv)
    assert "pulls refused 'subscription not latest' (code 25): broker-a-0 4, broker-a-1 0, broker-b 0" in w
    assert "after ra (broker-a-1): broker-a served rmqchaos_consumer again never, past the 60s bound" in w


def test_a_restart_the_consumers_did_not_outlive_by_the_bound_is_not_judged(tmp_path: Path) -> None:
    run, _ = setup(tmp_path)
    broker_conf(run, "broker-b", "broker-b", B)
    status(run, {B: {"served": 5, "first_served_ms": 1_500, "spans": [[1_500, 20_000]]}}, written_ms=30_000)
    run.event("fault", "broker-b", 21_000, 22_000, "ok", fault_id="rb", fault_kind="restart")
    assert restarts(run)[0]["groups"]["rmqchaos_consumer"] == {"served_again_s": None, "within_bound": None}
    assert not [r for r in completeness(run)["reasons"] if "did not serve" in r]


def test_served_from_finds_the_first_service_at_or_after_a_time() -> None:
    spans = [[1_000, 5_000], [9_000, 12_000]]
    assert serving.served_from(spans, 500) == 1_000
    assert serving.served_from(spans, 4_000) == 4_000  # inside a span: served within its 3 s gap
    assert serving.served_from(spans, 6_000) == 9_000
    assert serving.served_from(spans, 13_000) is None


# a POP group beside the remoting one: read through the proxy, its status keyed by broker name
POP_SCENARIO = SCENARIO.replace("consumers: {}", "consumers: {instances: [{id: c0}, {id: p0, group: g_pop, grpc: {}}, "
                                "{id: p1, group: g_pop, grpc: {kind: push}}]}") \
    .replace("  namesrv: {port: 27076}\n", "  namesrv: {port: 27076}\n  proxy: {enabled: true}\n")


def pop_setup(tmp_path: Path) -> tuple[Any, Routed]:
    return setup(tmp_path, POP_SCENARIO)


def test_the_gate_waits_for_a_pop_group_to_be_served_by_every_broker_group_of_its_topics(
        tmp_path: Path, capsys: Any) -> None:
    run, c = pop_setup(tmp_path)
    s = run.scenario()
    assert wanted(c, s) == {"rmqchaos_consumer": {A0: "broker-a-0", B: "broker-b"},
                            "g_pop": {"broker-a": "broker-a", "broker-b": "broker-b"}}
    t0 = int(time.time() * 1000) - 1_000  # the consumers started a second ago
    status(run, {A0: {"served": 1, "first_served_ms": t0 + 300}, B: {"served": 1, "first_served_ms": t0 + 200}})
    # broker-a delivered messages to the SimpleConsumer; broker-b has answered nothing yet
    status(run, {"broker-a": {"served": 2, "first_served_ms": t0 + 900, "counts": {"messages": 2}}}, cid="p0",
           group="g_pop", keyed_by="broker_name")
    done: list[float] = []
    th = threading.Thread(target=lambda: done.append(
        gate(run, c, s, [Alive()], t0, lambda: True, 1.0, bound=5.0)))  # type: ignore[list-item]
    th.start()
    time.sleep(0.5)
    assert th.is_alive() and not done  # held: broker-b has not served g_pop
    # the PushConsumer's receive that asked broker-b came back "no new message": broker-b served g_pop
    status(run, {"broker-b": {"served": 1, "first_served_ms": t0 + 1_400, "counts": {"no_new_message": 1}}}, cid="p1",
           group="g_pop", keyed_by="broker_name")
    th.join(timeout=3)
    assert done == [0.0]
    ev = [x for x in run.timeline() if x["kind"] == "serving_gate"][0]
    assert ev["outcome"] == "passed" and ev["params"]["pop_groups"] == ["g_pop"] and ev["params"]["not_gated"] == {}
    assert ev["params"]["first_served_s"] == {"g_pop": {"broker-a": 0.9, "broker-b": 1.4},
                                              "rmqchaos_consumer": {"broker-a-0": 0.3, "broker-b": 0.2}}
    err = capsys.readouterr().err
    assert "serving gate: every consumer group served by every broker of its topics " in err, err
    assert "after the consumers started (POP through the proxy: g_pop)" in err, err


def test_a_pop_group_never_served_is_one_line_naming_the_broker_group_and_its_answers(tmp_path: Path) -> None:
    run, c = pop_setup(tmp_path)
    status(run, {A0: {"served": 1, "first_served_ms": 1_300}, B: {"served": 1, "first_served_ms": 1_200}})
    # broker-b refused the group (CONSUMER_GROUP_NOT_FOUND, 40403), and two receives that asked it came
    # back with broker-a's messages: the proxy's route did not list broker-b
    status(run, {"broker-a": {"served": 5, "first_served_ms": 1_500, "counts": {"messages": 5}},
                 "broker-b": {"refused": {"40403": 3, "UNAVAILABLE": 1}, "counts": {"redirected": 2}}},
           cid="p0", group="g_pop", keyed_by="broker_name")
    with pytest.raises(UserError) as e:
        gate(run, c, run.scenario(), [Alive()], int(time.time() * 1000), lambda: True, 1.0, bound=0.3)  # type: ignore[list-item]
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("no fault applied: broker group broker-b never served POP consumer group g_pop through the "
                           "proxy (its receives were refused: code 40403 x3, code UNAVAILABLE x1) (2 receive(s) "
                           "asking it came back with another broker's messages: the proxy's route did not list it) "
                           "within 0.3s of the consumers' start: see "), line
    ev = [x for x in run.timeline() if x["kind"] == "serving_gate"][0]
    assert ev["outcome"] == "refused" and ev["params"]["missing"] == [
        {"group": "g_pop", "master": "broker-b", "addr": "broker-b"}]
    assert ev["params"]["first_served_s"]["g_pop"]["broker-b"] is None


def test_a_pop_group_whose_receives_cannot_be_watched_is_not_waited_for_and_the_run_says_why(
        tmp_path: Path, capsys: Any) -> None:
    run, c = pop_setup(tmp_path)
    status(run, {A0: {"served": 1, "first_served_ms": 1_300}, B: {"served": 1, "first_served_ms": 1_200}})
    why = "this rocketmq-client-java's gRPC has no global interceptors to watch receives with (NoClassDefFoundError)"
    for cid in ("p0", "p1"):
        status(run, {}, cid=cid, group="g_pop", keyed_by="broker_name", unwatched=why)
    assert gate(run, c, run.scenario(), [Alive()], int(time.time() * 1000), lambda: True, 1.0) == 0.0  # type: ignore[list-item]
    ev = [x for x in run.timeline() if x["kind"] == "serving_gate"][0]
    assert ev["outcome"] == "passed" and ev["params"]["not_gated"] == {"g_pop": why}
    assert set(ev["params"]["first_served_s"]) == {"rmqchaos_consumer"}
    err = capsys.readouterr().err
    assert f"serving gate: POP consumer group g_pop not waited for: {why}" in err, err
    assert "not waited for: " + why in words(summarize(run) or {})
    # one consumer of the group watched is enough: the group is gated on it
    status(run, {}, cid="p0", group="g_pop", keyed_by="broker_name")
    with pytest.raises(UserError) as e:
        gate(run, c, run.scenario(), [Alive()], int(time.time() * 1000), lambda: True, 1.0, bound=0.2)  # type: ignore[list-item]
    assert "broker group broker-a never served POP consumer group g_pop through the proxy (no receive answered)" \
        in str(e.value)


def test_pop_statuses_merge_per_group_and_show_per_broker_group_in_the_summary(tmp_path: Path) -> None:
    run, _ = pop_setup(tmp_path)
    for n, g, a in (("broker-a-0", "broker-a", A0), ("broker-a-1", "broker-a", A1), ("broker-b", "broker-b", B)):
        broker_conf(run, n, g, a)
    status(run, {A0: {"served": 3, "first_served_ms": 2_000, "refused": {"25": 2}, "spans": [[2_000, 9_000]]}})
    status(run, {"broker-a": {"served": 4, "first_served_ms": 1_500, "last_served_ms": 9_000,
                              "counts": {"messages": 3, "no_new_message": 1}, "spans": [[1_500, 9_000]]},
                 "broker-b": {"served": 1, "first_served_ms": 1_800, "counts": {"no_new_message": 1},
                              "refused": {"40403": 1}}}, cid="p0", group="g_pop", keyed_by="broker_name")
    status(run, {"broker-a": {"served": 2, "first_served_ms": 1_200, "counts": {"messages": 2, "redirected": 1}}},
           cid="p1", group="g_pop", keyed_by="broker_name", started_ms=900)
    g = serving.by_group(serving.read_statuses(run.consumers_dir))
    assert g["g_pop"]["keyed_by"] == ["broker_name"] and g["rmqchaos_consumer"]["keyed_by"] == ["address"]
    a = g["g_pop"]["brokers"]["broker-a"]
    assert (a["served"], a["first_served_ms"], a["counts"]) == (6, 1_200, {"messages": 5, "no_new_message": 1,
                                                                          "redirected": 1})
    assert g["g_pop"]["started_ms"] == 900 and g["g_pop"]["unwatched"] == {}
    sv = summarize(run)
    assert sv is not None
    pop = sv["groups"]["g_pop"]["brokers"]
    assert pop["broker-b"] == {"addr": "broker-b", "broker": "broker-b", "served": 1, "first_served_s": 0.9,
                               "not_latest": 0, "refused": {"40403": 1}, "counts": {"no_new_message": 1}}
    assert pop["broker-a"]["first_served_s"] == 0.3
    assert sv["not_latest_by_broker"] == {"broker-a-0": 2}  # no code 25 through the proxy
    # a restart of broker-a: the remoting group is judged, the POP group is not (docs/grpc.md)
    run.event("fault", "broker-a-0", 3_000, 4_000, "ok", fault_id="r", fault_kind="restart")
    assert set(restarts(run)[0]["groups"]) == {"rmqchaos_consumer"}
