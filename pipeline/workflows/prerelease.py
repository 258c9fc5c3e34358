"""The pre-release load test's scenario: a base scenario file with the release manager's choices
laid over it (an `extends:` overlay written next to the run, validated like any scenario file).

The candidate (`rocketmq_version`, `broker_config`) and the baseline (`baseline_version`, e.g. 4.9.7
for the upgrade question; default the base's version) share the base scenario's config keys. When
their versions differ, each side takes those keys under its own version's names: a key RocketMQ
renamed between the majors is mapped (rmqchaos.spec.majors.RENAMED_IN_5, recorded in the run's
state), a key only one version has is refused in one line before any run directory exists."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.runs import create_run, default_run_dir
from rmqchaos.errors import UserError
from rmqchaos.machine import paths
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec import across, config_keys, load_scenario, resolved_document

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


def _base(params: dict[str, Any]) -> Path:
    base = Path(params.get("scenario") or DEFAULT_BASE)
    return base if base.is_absolute() else paths.REPO / base


def versions(params: dict[str, Any], base_doc: dict[str, Any]) -> dict[str, str]:
    """Each side's RocketMQ version: Param `rocketmq_version` (candidate) or `baseline_version`,
    else the base scenario's own (the pinned one unless it names another)."""
    own = (base_doc.get("cluster") or {}).get("rocketmq_version") or paths.pinned_rocketmq_version()
    return {"candidate": params.get("rocketmq_version") or own, "baseline": params.get("baseline_version") or own}


def _confs(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The config mappings of a scenario document: (where, which keys: namesrv or broker, the mapping)."""
    cl = doc.get("cluster") or {}
    out = [("cluster.namesrv.config", "namesrv", (cl.get("namesrv") or {}).get("config") or {}),
           ("cluster.broker_defaults.config", "broker", (cl.get("broker_defaults") or {}).get("config") or {})]
    return out + [(f"cluster.brokers[{i}].config", "broker", b.get("config") or {})
                  for i, b in enumerate(cl.get("brokers") or []) if isinstance(b, dict)]


def _side(params: dict[str, Any], baseline: bool) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, str]]:
    """One side's overlay document, its base document with renamed keys mapped (None: the base file
    as it is), and the keys mapped {name given: name on this side's version}."""
    base = _base(params)
    conf = None if baseline else dict(params.get("broker_config") or {})
    base_doc = resolved_document(base)
    v = versions(params, base_doc)
    me, other = ("baseline", "candidate") if baseline else ("candidate", "baseline")
    mapped: dict[str, str] = {}
    mapped_base = None
    if v[me] != v[other] and params.get("baseline", True):
        keys, other_keys = config_keys(v[me]), config_keys(v[other])
        fix = ("remove it from the base scenario (the candidate may set it in broker_config)" if baseline
               else "remove it from the base scenario")
        refused: list[str] = []
        changed = False
        for where, part, c in _confs(base_doc):
            new, m, r = across(c, f"the base scenario's {where}", f"{v[me]} (the {me})", keys[part],
                               f"{v[other]} (the {other})", other_keys[part], fix)
            if m:
                c.clear()
                c.update(new)
                changed = True
            mapped |= m
            refused += r
        if conf:
            conf, m, r = across(conf, "broker_config", f"{v[me]} (the {me})", keys["broker"],
                                f"{v[other]} (the {other})", other_keys["broker"], "remove it from broker_config")
            mapped |= m
            refused += r
        if refused:
            raise UserError("; ".join(refused))
        mapped_base = base_doc if changed else None
    doc = overlay(base, rocketmq_version=v["baseline"] if baseline else params.get("rocketmq_version"),
                  broker_config=conf, rate=params.get("rate"), duration=params.get("duration"),
                  message_size=params.get("message_size"), policy=params.get("policy"),
                  fault_set=params.get("fault_set") or "base", name="prerelease-baseline" if baseline else "prerelease")
    return doc, mapped_base, mapped


def _write(params: dict[str, Any], d: Path, baseline: bool) -> tuple[Path, dict[str, str]]:
    """The side's scenario file beside the run directory `d` (which must not exist yet), its base
    with keys mapped beside it when any was; and the keys mapped."""
    doc, mapped_base, mapped = _side(params, baseline)
    if mapped_base is not None:
        copy = d.with_name(d.name + ".base.yaml")
        copy.write_text(f"# {_base(params)} with its extends merged and the keys RocketMQ renamed under this "
                        f"side's names: {mapped} (written by the pre-release test)\n"
                        + yaml.safe_dump(mapped_base, sort_keys=False))
        doc["extends"] = str(copy)
    src = d.with_name(d.name + ".scenario.yaml")
    src.write_text("# the pre-release test's choices over its base scenario (written by the DAG)\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    return src, mapped


def check(params: dict[str, Any], stem: Path) -> None:
    """Both sides validated (keys across the two versions too) before any run directory exists: a
    UserError or SpecError line for the first side refused. Their files are written where round 1's
    runs will be (`<stem>-candidate-1.scenario.yaml` ...), so a line names a file that stays."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    for side in ("candidate", "baseline") if params.get("baseline", True) else ("candidate",):
        src, _ = _write(params, stem.with_name(f"{stem.name}-{side}-1"), side == "baseline")
        load_scenario(src)


def create(params: dict[str, Any], out: str | Path | None = None, *, baseline: bool = False) -> RunDir:
    """A detached run directory for the pre-release test described by `params` (the DAG's Params:
    scenario, rocketmq_version, broker_config, rate, duration, message_size, policy, fault_set,
    baseline_version). baseline: the same test on `baseline_version` (default: the base's version)
    without broker.conf overrides (scenario name `prerelease-baseline`, so the run history keeps the
    baseline's runs apart). Keys mapped for its version: state `renamed_keys`."""
    d = Path(out) if out is not None else default_run_dir("prerelease")
    d.parent.mkdir(parents=True, exist_ok=True)
    src, mapped = _write(params, d, baseline)
    run = create_run(src, d, mode="detached")
    if mapped:
        run.update_state(renamed_keys=mapped)
    return run
