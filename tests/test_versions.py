"""RocketMQ versions other than the pinned one, on this JDK: a 5.1.x broker killed -9 restarts over
its own store (5.1.x frees mapped buffers through sun.nio.ch, which JDK 16+ exports only when asked:
cluster/plan/nodes.py JDK_EXPORTS) and keeps what it stored."""
from __future__ import annotations

import signal
from pathlib import Path

from conftest import _start, scenario_dict
from cluster.plan import tools
from pipeline.stages import down
from pipeline.stages.check import witness
from rmqchaos.spec import WitnessCheck


def test_a_5_1_1_broker_killed_restarts_over_its_store_and_keeps_its_messages(tmp_path: Path) -> None:
    d = scenario_dict("v511", 26276, [26211])
    d["cluster"].update({"rocketmq_version": "5.1.1", "subnet": "127.0.97.0/24"})
    run, c = _start(tmp_path, d)
    try:
        tool: tools.Runner = lambda main, args, timeout: c.run_tool(main, args, timeout, tmp_path)  # noqa: E731
        topic = "T_V511"
        res = witness(c.run, c, WitnessCheck(messages=200, threads=2, topic=topic))
        assert res["ok"], res["problems"]
        before = tools.topic_offsets(tool, c.namesrv_addr, topic)
        c.node("broker-a").kill(signal.SIGKILL)
        # before JDK_EXPORTS: IllegalAccessError (UtilAll.cleanBuffer -> sun.nio.ch.DirectBuffer) in
        # IndexService.load, and the broker never registered again
        c.node("broker-a").restart()
        st = {s.name: s for s in c.status()}["broker-a"]
        assert st.state == "running" and st.registered is True, st
        assert tools.topic_offsets(tool, c.namesrv_addr, topic) == before
        assert len({m[0] for m in tools.read_back(tool, c.namesrv_addr, topic)}) == 200
        log = c.node("broker-a").log_file.read_text(errors="replace")
        assert "IllegalAccessError" not in log
    finally:
        down.run(run)
