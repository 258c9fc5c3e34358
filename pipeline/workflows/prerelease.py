"""The pre-release load test's scenario: a base scenario file with the release manager's choices
laid over it (an `extends:` overlay written next to the run, validated like any scenario file)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.runs import create_run, default_run_dir
from rmqchaos.machine import paths
from rmqchaos.run.rundir import RunDir

DEFAULT_BASE = paths.REPO / "scenarios" / "prerelease.yaml"


def _fault_sets(duration: float) -> dict[str, list[dict[str, Any]] | None]:
    """Named fault sets, each placed at a third of the load (None: keep the base scenario's faults)."""
    at = f"{max(1.0, round(duration / 3, 1))}s"
    return {
        "base": None,
        "none": [],
        "oom_kill_broker_a": [{"id": "oom-broker-a", "kind": "oom_kill", "target": "broker-a", "at": at,
                               "restart_after": "10s"}],
        "kill_broker_a": [{"id": "kill-broker-a", "kind": "kill", "target": "broker-a", "at": at,
                           "restart_after": "10s"}],
        "pause_broker_a": [{"id": "pause-broker-a", "kind": "pause", "target": "broker-a", "at": at,
                            "duration": "5s"}],
    }


FAULT_SETS = tuple(_fault_sets(30.0))


def overlay(base: str | Path, *, rocketmq_version: str | None = None, broker_config: dict[str, Any] | None = None,
            rate: float | None = None, duration: float | None = None, message_size: int | None = None,
            policy: str | None = None, fault_set: str = "base", name: str = "prerelease") -> dict[str, Any]:
    """The overlay document (None / empty: keep the base's value)."""
    doc: dict[str, Any] = {"extends": str(Path(base).resolve()), "name": name}
    cluster: dict[str, Any] = {}
    if rocketmq_version:
        cluster["rocketmq_version"] = rocketmq_version
    if broker_config:
        cluster["broker_defaults"] = {"config": dict(broker_config)}
    if cluster:
        doc["cluster"] = cluster
    load = {k: v for k, v in (("rate", rate), ("duration", duration), ("message_size", message_size)) if v is not None}
    if policy:
        load["policy"] = {"kind": policy}
    if load:
        doc["load"] = load
    sets = _fault_sets(float(duration or 30.0))
    if fault_set not in sets:
        from rmqchaos.errors import UserError
        raise UserError(f"fault set {fault_set!r} is not known", f"use one of {', '.join(sets)}")
    if sets[fault_set] is not None:
        doc["faults"] = sets[fault_set]
    return doc


def create(params: dict[str, Any], out: str | Path | None = None, *, baseline: bool = False) -> RunDir:
    """A detached run directory for the pre-release test described by `params` (the DAG's Params:
    scenario, rocketmq_version, broker_config, rate, duration, message_size, policy, fault_set).
    baseline: the same test with the pinned version and no broker.conf overrides (scenario name
    `prerelease-baseline`, so the run history keeps the baseline's runs apart)."""
    base = Path(params.get("scenario") or DEFAULT_BASE)
    if not base.is_absolute():
        base = paths.REPO / base
    doc = overlay(base, rocketmq_version=None if baseline else params.get("rocketmq_version"),
                  broker_config=None if baseline else params.get("broker_config"),
                  rate=params.get("rate"), duration=params.get("duration"), message_size=params.get("message_size"),
                  policy=params.get("policy"), fault_set=params.get("fault_set") or "base",
                  name="prerelease-baseline" if baseline else "prerelease")
    d = Path(out) if out is not None else default_run_dir("prerelease")
    d.parent.mkdir(parents=True, exist_ok=True)
    src = d.with_name(d.name + ".scenario.yaml")  # beside the run: the run directory must not exist yet
    src.write_text("# the pre-release test's choices over its base scenario (written by the DAG)\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    return create_run(src, d, mode="detached")
