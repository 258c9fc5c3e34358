"""The CLI as a user runs it: up/status/down, a whole run, and cleanup after the CLI was SIGKILLed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import RMQCHAOS, REPO, cli, scenario_dict, write_scenario
from helpers import assert_nothing_left, live


def test_cluster_up_status_down_leaves_nothing(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("cli", 21876, [21911, 21921]))
    rd = tmp_path / "cl"
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(rd))
    assert r.returncode == 0, r.stderr
    assert "cluster ready" in r.stderr and "namesrv 127.0.10.1:21876" in r.stdout
    # the three nodes and the cluster monitor (a client process of the run, reaped with it)
    assert sorted(n for n, _ in live(rd)) == ["broker-a", "broker-b", "monitor", "namesrv"]

    r = cli("cluster", "status", "--run-dir", str(rd))
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:]}
    assert set(rows) == {"namesrv", "broker-a", "broker-b"}
    for name, port in (("broker-a", "21911"), ("broker-b", "21921")):
        assert rows[name][2] == "running" and rows[name][3].isdigit()
        assert rows[name][4].startswith(port) and rows[name][5] == "yes"
    js = json.loads(cli("cluster", "status", "--run-dir", str(rd), "--json").stdout)
    assert {s["name"]: s["pid"] for s in js} == {n: p for n, p in live(rd) if n != "monitor"}
    assert "cluster state: ready" in r.stdout.splitlines()[0]

    assert cli("cluster", "kill", "broker-b", "--run-dir", str(rd)).returncode == 0
    r = cli("cluster", "status", "--run-dir", str(rd))
    assert "cluster state: degraded (broker-b down)" in r.stdout.splitlines()[0], r.stdout

    r = cli("cluster", "down", "--run-dir", str(rd))
    assert r.returncode == 0, r.stderr
    assert_nothing_left(rd)
    assert json.loads((rd / "state.json").read_text())["cluster"] == "down"

    # a restart of a cluster that is down refuses at once, and starts nothing
    r = cli("cluster", "restart", "broker-a", "--run-dir", str(rd))
    assert r.returncode == 1 and "namesrv 127.0.10.1:21876 does not answer" in r.stderr, r.stderr
    assert_nothing_left(rd)


@pytest.mark.long  # make test: every `rmqchaos run` test (the shared-host and partition CI forms) runs up to the report
def test_run_end_to_end_writes_report(tmp_path: Path) -> None:
    d = scenario_dict("e2e", 21876, [21911, 21921],
                      checks={"witness": {"messages": 200, "threads": 2, "topic": "T_E2E"}})
    f = write_scenario(tmp_path / "s.yaml", d)
    out = tmp_path / "run"
    r = cli("run", str(f), "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"report: {out / 'report.txt'}" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert [*rep["stages"]] == ["up", "check", "load", "drain", "down", "analyze", "report"]  # load, analyze: nothing to do
    assert all(s["status"] == "ok" for n, s in rep["stages"].items() if n != "report")
    assert rep["witness"]["ok"] and rep["witness"]["read_back_total"] == 200
    for name in ("scenario.yaml", "scenario.src.yaml", "timeline.jsonl", "processes.jsonl",
                 "cluster/broker-a/broker.conf", "cluster/namesrv/namesrv.properties"):
        assert (out / name).is_file(), name
    assert "brokerName=broker-a" in (out / "cluster/broker-a/broker.conf").read_text()
    assert_nothing_left(out)


def _start_run_and_sigkill_it_once_up(tmp_path: Path, name: str) -> Path:
    f = write_scenario(tmp_path / f"{name}.yaml",
                       scenario_dict(name, 21876, [21911, 21921], checks={"witness": {"messages": 100000}}))
    out = tmp_path / name
    p = subprocess.Popen([*RMQCHAOS, "run", str(f), "--out", str(out)], cwd=REPO, env=os.environ.copy(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        st = out / "state.json"
        if st.exists() and json.loads(st.read_text()).get("cluster") == "ready":
            break
        assert p.poll() is None, "run exited before the cluster was up"
        assert time.monotonic() < deadline, "cluster never came up"
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    time.sleep(1)
    assert len(live(out)) == 4, "the killed CLI should have left its JVMs and monitor behind (that is what is reaped)"
    return out


def test_cli_sigkilled_after_up_is_reaped_by_the_next_down(tmp_path: Path) -> None:
    out = _start_run_and_sigkill_it_once_up(tmp_path, "killed1")
    r = cli("cluster", "down", "--all")
    assert r.returncode == 0, r.stderr
    assert_nothing_left(out)


@pytest.mark.long  # make test: the next `down --all` reaps the same leftovers (reap_lost_runs, which `up` calls too)
def test_cli_sigkilled_after_up_is_reaped_by_the_next_up(tmp_path: Path) -> None:
    out = _start_run_and_sigkill_it_once_up(tmp_path, "killed2")
    # same ports: this `up` can only succeed if it reaped the orphaned cluster first
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("after", 21876, [21911, 21921]))
    rd = tmp_path / "next"
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(rd))
    assert r.returncode == 0, r.stderr
    assert "reaping leftovers of run" in r.stderr
    assert_nothing_left(out)
    assert cli("cluster", "down", "--run-dir", str(rd)).returncode == 0
    assert_nothing_left(rd)
