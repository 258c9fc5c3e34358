"""The partition fault on loopback: its rules as the scenario names them (fast), then on a real
cluster a probe connection for every pair of nodes inside and across the cut, during and after;
the CI form of scenarios/partition-namesrv.yaml (broker-a leaves namesrv's route while it keeps
taking sends); and a run SIGKILLed during a partition, whose rules `down --all` removes."""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, RMQCHAOS, cli, write_scenario
from helpers import assert_nothing_left

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="iptables rules need root")
SCENARIOS = REPO / "scenarios"


def ours_in_iptables() -> list[str]:
    return [ln for ln in subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout.splitlines()
            if "RMQC" in ln or "rmqchaos:" in ln]


# ---------------------------------------------------------------- pure logic

@pytest.mark.fast
def test_partition_rules_name_each_listener_between_the_groups_addresses() -> None:
    from chaos.kinds.partition import drops
    from rmqchaos.spec import Scenario
    s = Scenario.model_validate({"name": "p", "load": {"duration": "10s"}})
    both = drops(s, [["broker-a"], ["namesrv"]], one_way=False)
    # broker-a's packets to namesrv's port and from its own ports (replies), and the mirror image
    assert set(both) == {("127.0.10.11", "127.0.10.1", 9876, None), ("127.0.10.1", "127.0.10.11", None, 9876),
                         *{("127.0.10.1", "127.0.10.11", p, None) for p in (10911, 10909, 10912)},
                         *{("127.0.10.11", "127.0.10.1", None, p) for p in (10911, 10909, 10912)}}
    one = drops(s, [["producers"], ["broker-a", "broker-b"]], one_way=True)
    assert {(src, dst) for src, dst, *_ in one} == {("127.0.10.201", "127.0.10.11"), ("127.0.10.201", "127.0.10.21")}
    assert all(d[2] is not None for d in one)  # clients listen on nothing: only the brokers' ports


@pytest.mark.fast
@pytest.mark.parametrize("extra, expect", [
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"], ["broker-z"]]}]},
     "faults[0].groups[1][0]: no node or client 'broker-z'; members: namesrv, broker-a, broker-b, producers"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"], ["broker-a"]]}]},
     "'broker-a' is in groups 0 and 1"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["producers"], ["consumers"]]}]},
     "these groups share no link"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["broker-a"]]}]}, "faults[0].groups"),
    ({"faults": [{"kind": "partition", "at": "1s", "groups": [["10.0.0.1"], ["namesrv"]]}]},
     "faults[0].groups[0][0]: String should match pattern"),  # a name, never an address
    ({"cluster": {"subnet": "10.0.0.0/24"}}, "cluster.subnet: must be a /24 inside 127.0.0.0/8"),
    ({"cluster": {"subnet": "127.0.0.0/24"}}, "cluster.subnet: must be a /24 inside 127.0.0.0/8"),
])
def test_a_partition_names_members_never_addresses_and_bad_ones_are_one_line(tmp_path: Path, extra: dict,
                                                                              expect: str) -> None:
    f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"}, **extra})
    r = cli("run", str(f), "--out", str(tmp_path / "never"))
    assert r.returncode == 1 and expect in r.stderr and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


# ---------------------------------------------------------------- on a real cluster

def _connects(src: str, dst: str, port: int) -> bool:
    try:
        socket.create_connection((dst, port), timeout=1.0, source_address=(src, 0)).close()
        return True
    except OSError:
        return False


def test_a_partition_blocks_exactly_the_named_links_during_and_none_after(fresh_cluster) -> None:
    from chaos.kinds import registry
    from chaos.protocol import FaultContext
    from rmqchaos.spec import Fault
    c = fresh_cluster
    fault = Fault.model_validate({"id": "cut", "kind": "partition", "at": 0, "groups": [["broker-a"], ["namesrv"]]})
    kind = registry()["partition"]
    part = kind(FaultContext(c.run, c), fault, kind.Params.model_validate(fault.params))
    nodes = {n: p for n, p in c.plans.items()}
    cut = {frozenset(("broker-a", "namesrv"))}

    def probe() -> dict[tuple[str, str], bool]:
        return {(a, b): _connects(nodes[a].host, nodes[b].host, nodes[b].ports[0])
                for a, b in itertools.permutations(nodes, 2)}

    assert all(probe().values())
    part.start()
    try:
        assert len([r for r in ours_in_iptables() if r.startswith("-A RMQC-")]) == 8
        during = probe()
        assert {k for k, ok in during.items() if not ok} == {k for k in during if frozenset(k) in cut}, during
        # the producers' address reaches both sides still: only the named pair is cut
        assert _connects("127.0.10.201", nodes["broker-a"].host, nodes["broker-a"].ports[0])
    finally:
        ev = part.stop()
    assert all(probe().values())
    assert ev["rules"] == ev["removed"] == 8 and 0 < ev["held_s"] < 30, ev
    # the broker's registration connection to namesrv crossed the cut when it started
    assert any(x.startswith(f"{nodes['broker-a'].host}:") and x.endswith(f"->{nodes['namesrv'].addr}")
               for x in ev["links_at_start"]), ev
    assert [r for r in ours_in_iptables() if r.startswith("-A RMQC-")] == []


def test_broker_cut_from_namesrv_leaves_the_route_while_it_keeps_taking_sends(tmp_path: Path) -> None:
    """The CI form of scenarios/partition-namesrv.yaml: namesrv keeps a broker that stopped
    registering for 120 s by default (RouteInfoManager); a broker with enableSlaveActingMaster
    reports its own timeout (brokerNotActiveTimeoutMillis, 10 s), so the route changes within a
    CI-sized run. Producers with a cached route keep sending to broker-a meanwhile."""
    f = write_scenario(tmp_path / "part.yaml", {
        "extends": str(SCENARIOS / "partition-namesrv.yaml"), "name": "partition-namesrv-ci",
        "cluster": {"namesrv": {"port": 22876}, "stop_timeout": "3s",
                    "broker_defaults": {"config": {"enableSlaveActingMaster": True}},
                    "brokers": [{"name": "broker-a", "port": 22911}, {"name": "broker-b", "port": 22921}]},
        "load": {"duration": "40s", "rate": 150},
        # the consumers learn that broker-a is back in the route at their next route refresh: 5 s
        # here, not the client's 30 s, so the drain does not wait for it
        "consumers": {"settle": "3s", "route_refresh": "5s"},
        "faults": [{"id": "cut-a-ns", "kind": "partition", "at": "5s", "duration": "25s",
                    "groups": [["broker-a"], ["namesrv"]]}]})
    run = tmp_path / "run"
    r = cli("run", str(f), "--out", str(run), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_nothing_left(run)
    assert [x for x in ours_in_iptables() if x.startswith("-A RMQC-")] == []
    s = json.loads((run / "analysis" / "summary.json").read_text())
    cut = next(e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == "cut-a-ns")
    assert cut["outcome"] == "ok" and cut["params"]["evidence"]["rules"] == 8
    a = [(m["ts_ms"], m["brokers"]["broker-a"]) for m in s["monitor"] if "brokers" in m]
    out = [t for t, b in a if b["registered"] is False and b["up"]]
    assert out and cut["start_ms"] < out[0] < cut["end_ms"], "namesrv never dropped broker-a during the cut"
    assert any(b["registered"] and t > cut["end_ms"] for t, b in a), "broker-a did not register again"
    # sends went on to broker-a while it was cut from namesrv (the producers' cached route), and nothing was lost
    during = {r["t"] for r in s["series"] if cut["start_ms"] // 1000 < r["t"] < out[0] // 1000}
    assert any((r["acked_by_broker"] or {}).get("broker-a") for r in s["series"] if r["t"] in during)
    assert s["complete"] is True and s["counts"]["lost"] == 0


def test_a_run_sigkilled_during_a_partition_leaves_no_rule_after_down(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "p.yaml", {
        "name": "part-kill", "cluster": {"namesrv": {"port": 22976}, "stop_timeout": "3s",
                                         "brokers": [{"name": "broker-a", "port": 22991}]},
        "load": {"topic": "T_PART_KILL", "rate": 50, "duration": "60s"},
        "faults": [{"id": "cut", "kind": "partition", "at": "1s", "groups": [["broker-a"], ["namesrv", "producers"]]}]})
    out = tmp_path / "run"
    p = subprocess.Popen([*RMQCHAOS, "run", str(f), "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not [x for x in ours_in_iptables() if x.startswith("-A RMQC-")]:
            assert p.poll() is None, p.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the partition never started"
            time.sleep(0.2)
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert [x for x in ours_in_iptables() if x.startswith("-A RMQC-")]  # the rules outlived the CLI
    r = cli("cluster", "down", "--all")
    assert r.returncode == 0, r.stderr
    assert "removed iptables chain RMQC-" in r.stdout + r.stderr
    assert ours_in_iptables() == []
    assert_nothing_left(out)
    assert yaml.safe_load((out / "scenario.yaml").read_text())["faults"][0]["kind"] == "partition"
