"""Consumers that really read before the first fault (issue 47): the serving gate on a fake cluster
(the consumers' status files planted, the cluster's answers scripted), the status files' merge per
group, and after a restart whether the broker group served again (the completeness rule's reason).
Pure logic; the real consumer is tested in tests/test_failover_run.py (served by the master within
the gate's bound on 5.5.0)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.completeness import completeness
from analysis.serving import restarts, summarize, words
from loadgen.serving import gate, wanted
from pipeline.runs import create_run
from rmqchaos import serving
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
           started_ms: int = 1_000, written_ms: int = 100_000) -> None:
    """A consumer's status file as the Java side writes it (io.rmqchaos.Serving)."""
    full = {a: {"served": 0, "first_served_ms": None, "last_served_ms": None, "refused": {}, "spans": [],
                "spans_truncated": False, **b} for a, b in brokers.items()}
    run.consumers_dir.mkdir(exist_ok=True)
    serving.status_path(run.consumers_dir, cid).write_text(json.dumps(
        {"consumer_id": cid, "group": group, "started_ms": started_ms, "written_ms": written_ms,
         "heartbeats": {"sent": 2, "lock_busy": 1, "failed": 0}, "brokers": full}))


def setup(tmp_path: Path) -> tuple[Any, Routed]:
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
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
