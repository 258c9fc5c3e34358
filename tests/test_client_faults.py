"""The faults on the load's own clients (issue 50): producer_crash (a control file every load process
polls: rmqchaos/run/producer_control.py), consumer_kill and topic_queues, their checks at load time and
their intents. The real runs are tests/test_order_txn_real.py's."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import write_scenario

pytestmark = pytest.mark.fast


def test_a_control_request_is_seen_once_and_answered_per_process(tmp_path: Path) -> None:
    from rmqchaos.run import producer_control as pc
    assert pc.pending(tmp_path, set()) == []  # no control directory yet
    pc.request(tmp_path, "crash", "down")
    got = pc.pending(tmp_path, set())
    assert [(r["name"], r["action"], r["file"]) for r in got] == [("crash", "down", "crash.down")]
    pc.ack(tmp_path, "crash.down", "w0-1", {"abandoned_ends": 3})
    assert pc.pending(tmp_path, {"crash.down"}) == []  # the answer is not a request
    assert pc.acks(tmp_path, "crash", "down") == [{"producer_id": "w0-1", "abandoned_ends": 3}]
    assert pc.acks(tmp_path, "crash", "up") == []
    assert not list(pc.control_dir(tmp_path).glob(".*"))  # written whole: no temporary left


def test_the_crash_intent_says_what_was_left_without_an_end() -> None:
    from chaos.kinds.producer_crash import crash_intent
    i = crash_intent(1, [{"abandoned_ends": 180}], [{"client_id": "x"}])
    assert i["short"] is False and "180 half message(s) left without an end" in i["words"]
    assert crash_intent(1, [], None)["short"] is True  # nobody answered: the fault fell short


def test_the_consumer_kill_intent_names_a_consumer_that_did_not_come_back() -> None:
    from chaos.kinds.consumer_kill import consumer_intent
    ok = consumer_intent("c1", {"pid": 42, "signal": 9, "gone_after_ms": 30}, {"pid": 43})
    assert ok["short"] is False and "consumer c1 pid 42 gone 30 ms after 9" in ok["words"]
    bad = consumer_intent("c1", {"pid": 42, "gone_after_ms": 30}, {"pid": None, "error": "did not start"})
    assert bad["short"] is True and "did NOT start again: did not start" in bad["words"]


@pytest.mark.parametrize("doc, line", [
    ({"faults": [{"kind": "consumer_kill", "consumer": "c9", "at": "5s"}]},
     "faults[0].consumer: no consumer instance 'c9' in this scenario; instances: c0"),
    ({"faults": [{"kind": "consumer_kill", "target": "broker-a", "consumer": "c0", "at": "5s"}]},
     "a consumer_kill fault acts on the cluster, not on a node: drop target"),
    ({"faults": [{"kind": "producer_crash", "at": "5s", "back_after": "40s"}]},
     "faults[0].at: the fault (at 5s, lasting 40s) ends after the load's duration 30s"),
    ({"load": {"duration": "30s", "workers": 2}, "faults": [{"kind": "producer_crash", "at": "5s"}]},
     "producer_crash needs the load in one process (load.workers: 0)"),
    ({"load": {"duration": "30s", "client": "grpc"}, "cluster": {"proxy": {"mode": "local"}},
      "faults": [{"kind": "producer_crash", "at": "5s"}]},
     "producer_crash crashes the platform's own producer (load.client: remoting)"),
    ({"faults": [{"kind": "topic_queues", "queues": 4, "at": "5s"}]},
     "faults[0].queues: the load's topic already has 4 queue(s) per broker (load.queues): ask for another count"),
])
def test_client_fault_settings_are_one_line_at_load(tmp_path: Path, doc: dict[str, Any], line: str) -> None:
    from pipeline.runs import load_scenario
    from rmqchaos.spec import SpecError
    base = {"name": "t", "load": {"duration": "30s"}, "consumers": {"instances": [{"id": "c0"}]}}
    f = write_scenario(tmp_path / "t.yaml", {**base, **doc})
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    assert line in e.value.line() and len(e.value.line().splitlines()) == 1, e.value.line()


def test_a_power_loss_whose_nodes_exit_or_never_get_ready_is_the_clusters_answer_not_a_failed_fault() -> None:
    # broker-a-0 exits on its store; broker-a-1 runs but never registers (a whole controller-mode group
    # back at once whose controllers refused every election); broker-a-2 comes back
    from types import SimpleNamespace
    from chaos.kinds.power_loss import PowerLoss, PowerLossParams
    from cluster.node import ClusterStartError

    class Node:
        def __init__(self, name: str, fails: str | None, runs: bool) -> None:
            self.name, self.fails, self.runs = name, fails, runs
            self.pid: int | None = None

        def restart(self) -> None:
            if self.fails:
                self.pid = 7 if self.runs else None
                raise ClusterStartError(f"{self.name} did not become ready",
                                        cause="java.lang.NumberFormatException" if not self.runs else None)
            self.pid = 42

        def running(self) -> bool:
            return self.runs

    nodes = {"broker-a-0": Node("broker-a-0", "exits", False), "broker-a-1": Node("broker-a-1", "never ready", True),
             "broker-a-2": Node("broker-a-2", None, True)}
    k = PowerLoss.__new__(PowerLoss)
    k.params = PowerLossParams(back_after="10s")
    k.names = list(nodes)
    k.ctx = SimpleNamespace(cluster=SimpleNamespace(node=nodes.__getitem__, plans={n: SimpleNamespace(is_broker=False)
                                                                                     for n in nodes}))
    k.evidence = {"nodes_lost": {n: {"was_running": True, "dead": True, "fenced_ms": 1, "remounted": True} for n in nodes}}
    ev = k.stop()
    assert ev["not_started"] == {"broker-a-0": "java.lang.NumberFormatException",
                                 "broker-a-1": "running, never ready: broker-a-1 did not become ready"}
    assert ev["intent"]["short"] is False, ev["intent"]  # the power came back as asked for all three
