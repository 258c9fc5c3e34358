"""`rmqchaos explore` on real RocketMQ (issue 49): drawn schedules run end to end and every run lands
in the run history with its seed and anomalies. The long test runs two schedules of any kind; its
short twin in `make test` one pause."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, write_scenario
from helpers import assert_nothing_left

# the small base on this test's own addresses and ports
BASE = {"extends": str(REPO / "scenarios" / "explore" / "small.yaml"), "name": "explore-test",
        "cluster": {"subnet": "127.0.72.0/24", "namesrv": {"port": 27476}, "ready_timeout": "90s", "stop_timeout": "3s",
                    "brokers": [{"name": "broker-a", "port": 27411}]},
        "load": {"duration": "32s"}, "consumers": {"settle": "2s", "drain_timeout": "60s"}}


def _explore(tmp_path: Path, runs: int, seed: int, kinds: list[str] | None) -> dict:
    from analysis.history import history
    from pipeline.workflows.explore import explore
    base = write_scenario(tmp_path / "base.yaml", BASE)
    rec = explore(base, runs=runs, seed=seed, only=kinds, keep_all=True, out=tmp_path / "explore")
    assert [r["seed"] for r in rec["runs"]] == list(range(seed, seed + runs))
    assert json.loads((tmp_path / "explore" / "explore.json").read_text())["runs"] == rec["runs"]
    rows = {r["explore_seed"]: r for r in history.runs()}
    for r in rec["runs"]:
        assert r["seed"] in rows, f"seed {r['seed']} not in the run history"  # recorded, whatever it found
        assert rows[r["seed"]]["anomalies"] == [a["check"] for a in r["anomalies"]]
        assert (tmp_path / "explore" / f"explore-{r['seed']}.yaml").is_file()  # the drawn scenario, kept
        assert_nothing_left(Path(r["run_dir"]))
    return rec


def test_one_drawn_pause_runs_end_to_end_and_is_recorded_with_its_seed(tmp_path: Path) -> None:
    rec = _explore(tmp_path, 1, 7, ["pause"])
    run = rec["runs"][0]
    assert run["schedule"].startswith("pause ") and run["failures"] == [], run
    assert run["complete"], run["incomplete_reasons"]


@pytest.mark.long
def test_a_two_run_exploration_on_a_small_topology_records_both_runs(tmp_path: Path) -> None:
    rec = _explore(tmp_path, 2, 11, None)
    assert len(rec["runs"]) == 2
