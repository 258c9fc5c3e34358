"""A fresh cluster, broken on purpose: SIGKILL, restart on the same store, pause and resume."""
from __future__ import annotations

import signal
import time

import pytest

from cluster.plan import tools
from pipeline.stages.check import witness
from rmqchaos.spec import WitnessCheck
from rmqclient.admin import AdminClient, RemotingError


def _wait_state(cluster, node: str, want: str, within: float) -> str:
    deadline = time.monotonic() + within
    while True:
        st = {s.name: s for s in cluster.status()}[node].state
        if st == want or time.monotonic() > deadline:
            return st
        time.sleep(0.2)


@pytest.mark.long  # make test: the nightly DAG test's kill fault on broker-a, the OOM pair's kill and restart
def test_sigkilled_broker_is_reported_down_and_keeps_its_messages_after_restart(fresh_cluster, tmp_path) -> None:
    c = fresh_cluster
    topic = "T_KILL_RESTART"
    tool: tools.Runner = lambda main, args, timeout: c.run_tool(main, args, timeout, tmp_path)  # noqa: E731
    res = witness(c.run, c, WitnessCheck(messages=300, threads=3, topic=topic))
    assert res["ok"], res["problems"]
    before = tools.topic_offsets(tool, c.namesrv_addr, topic)
    assert before["broker-a"] > 0

    old_pid = c.node("broker-a").pid
    c.node("broker-a").kill(signal.SIGKILL)
    assert _wait_state(c, "broker-a", "down", within=5) == "down"
    st = {s.name: s for s in c.status()}
    assert st["broker-a"].pid is None
    assert st["broker-b"].state == "running" and st["namesrv"].state == "running"

    c.node("broker-a").restart()
    st = {s.name: s for s in c.status()}
    assert st["broker-a"].state == "running" and st["broker-a"].registered is True
    assert st["broker-a"].pid not in (None, old_pid)
    after = tools.topic_offsets(tool, c.namesrv_addr, topic)
    assert after == before
    msgs = tools.read_back(tool, c.namesrv_addr, topic)
    assert len({m[0] for m in msgs}) == 300
    assert sum(1 for m in msgs if m[1] == "broker-a") == before["broker-a"]
    assert any(e["kind"] == "restart" and e["target"] == "broker-a" for e in c.run.timeline())


def test_pause_freezes_a_broker_and_resume_thaws_it(fresh_cluster) -> None:
    c = fresh_cluster
    b = c.node("broker-b")
    b.pause()
    assert b.paused()
    assert _wait_state(c, "broker-b", "paused", within=2) == "paused"
    # a frozen broker answers nothing: an admin request to it times out
    with pytest.raises(RemotingError, match="timeout"):
        AdminClient(c.namesrv_addr, timeout=1).create_topic(b.plan.addr, "T_PAUSED")
    b.resume()
    assert _wait_state(c, "broker-b", "running", within=2) == "running"
    # answered again (a thawed broker may take seconds to catch up on a starved host: 3 s was not enough once)
    AdminClient(c.namesrv_addr, timeout=20).create_topic(b.plan.addr, "T_RESUMED")
