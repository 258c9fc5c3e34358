"""make test's two workers (tests/_groups.py): which test modules may run at the same time."""
from __future__ import annotations

from pathlib import Path

import pytest

from _groups import components, module_resources, scenario_ports

pytestmark = pytest.mark.fast


def test_modules_sharing_a_port_or_a_session_cluster_are_one_group_and_others_are_not() -> None:
    res = {
        "test_a": module_resources('{"namesrv": {"port": 22876}, "timeout_ms": 15000}', []),
        "test_b": module_resources('"brokers": [{"name": "broker-a", "port": 22911}, ...] 22876', []),
        "test_c": module_resources("run(cluster)", ["cluster"]),
        "test_d": module_resources('scenario_dict("x", 19876, [24011])', []),  # the session cluster's namesrv port
        "test_e": module_resources('{"port": 26111}', ["tmp_path"]),
        "test_f": module_resources("docker", ["engine"]),
        "test_g": module_resources("docker too", ["engine"]),
    }
    assert "port:15000" not in res["test_a"]  # a round thousand is a duration, not a port
    g = components(res)
    assert g["test_a"] == g["test_b"] == "test_a" and g["test_c"] == g["test_d"] == "test_c"
    assert g["test_f"] == g["test_g"] == "test_f" and g["test_e"] == "test_e"
    assert len(set(g.values())) == 4


def test_a_scenario_file_brings_its_ports_through_its_bases_and_none_named_means_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("cluster:\n  namesrv: {port: 25976}\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nload: {rate: 100}\n")
    (tmp_path / "plain.yaml").write_text("name: plain\nload: {duration: 30s}\n")
    assert scenario_ports(tmp_path / "child.yaml") == {"25976"}
    assert scenario_ports(tmp_path / "plain.yaml") == {"9876", "10909", "10911", "10912"}


def test_the_suites_groups_keep_every_shared_cluster_on_one_worker() -> None:
    """The real modules of this suite: the users of conftest.py's session clusters are one group."""
    repo = Path(__file__).resolve().parent
    users = {m: module_resources((repo / f"{m}.py").read_text(), fx) for m, fx in
             [("test_load", ["cluster", "strict_cluster", "fresh_cluster"]), ("test_cluster", ["cluster", "strict_cluster"]),
              ("test_analysis", ["cluster"]), ("test_chaos", ["fresh_cluster"]), ("test_timers_real", [])]}
    g = components(users)
    assert g["test_load"] == g["test_cluster"] == g["test_analysis"] == g["test_chaos"]
    assert g["test_timers_real"] == "test_timers_real"
