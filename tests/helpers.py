"""Assertions about what the platform left on the machine."""
from __future__ import annotations

import json
from pathlib import Path

from cluster.local import cgroups
from rmqchaos.procs import alive


def started(run_dir: Path) -> list[tuple[str, int, int]]:
    f = run_dir / "processes.jsonl"
    if not f.exists():
        return []
    recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return [(r["node"], r["pid"], r["starttime"]) for r in recs if r.get("event") == "start"]


def live(run_dir: Path) -> list[tuple[str, int]]:
    return [(n, p) for n, p, s in started(run_dir) if alive(p, s)]


def cgroup_dirs(run_id: str) -> list[Path]:
    return [d for d in cgroups.Cgroup(f"{cgroups.PREFIX}/{run_id}").dirs() if d.exists()]


def run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "state.json").read_text())["run_id"]


def assert_nothing_left(run_dir: Path) -> None:
    assert live(run_dir) == [], f"processes of {run_dir} still running"
    assert cgroup_dirs(run_id(run_dir)) == [], f"cgroups of {run_dir} still present"
