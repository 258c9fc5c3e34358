"""The pre-release maximum-rate search (as the OpenMessaging Benchmark's): on one cluster per side,
load steps at rising rates (start, start x factor, ... at most `steps`, each `step_duration` seconds
and at most rate x duration messages), each judged from its own ledgers; the search stops at the
first step that breaks a bound and reports the last rate that held. A step holds when its p99 send
latency (acknowledged sends) is within max_p99_send_ms, its error rate (errors, busy refusals and
unanswered attempts per attempt) within max_error_rate, and its achieved rate at least
MIN_ACHIEVED of the asked one (else the load generator or the broker could not push it: not held).
No faults during the steps: the search measures capacity, the rounds measure resilience."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from analysis.judge import loadstep
from pipeline.stages import load
from pipeline.workflows import prerelease
from pipeline.runs import as_run, attach_run
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir

#: the Param's keys: default, lowest, highest (a bound of None: open), whole number
KEYS: dict[str, tuple[float, float, float | None, bool]] = {
    "start": (200, 1, 100_000, False), "factor": (2.0, 1.1, 10, False), "steps": (4, 1, 8, True),
    "step_duration": (10, 2, 120, False), "max_p99_send_ms": (200, 1, None, False),
    "max_error_rate": (0.01, 0, 1, False)}
#: a step whose acknowledged rate is below this share of the asked rate did not hold
MIN_ACHIEVED = 0.9
RESULT = "maxrate.json"


def settings(value: Any) -> dict[str, float] | None:
    """The Param `max_rate_search`: null/false (no search), true (the defaults) or an object of KEYS
    (missing keys: their defaults). Raises one UserError with one line per bad value."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise UserError(f"max_rate_search {value!r} is not null, true or an object",
                        f"max_rate_search: {{{', '.join(KEYS)}}}")
    bad = [f"max_rate_search.{k}: not a setting (use {', '.join(KEYS)})" for k in value if k not in KEYS]
    out: dict[str, float] = {}
    for k, (default, lo, hi, whole) in KEYS.items():
        v = value.get(k, default)
        kind = "a whole number" if whole else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and v != int(v)):
            bad.append(f"max_rate_search.{k}: {v!r} is not {kind}")
        elif v < lo or (hi is not None and v > hi):
            bad.append(f"max_rate_search.{k}: {v:g} is not from {lo:g} to {hi:g}" if hi is not None
                       else f"max_rate_search.{k}: {v:g} is below {lo:g}")
        else:
            out[k] = int(v) if whole else float(v)
    if bad:
        raise UserError(" | ".join(bad), "max_rate_search: null, or {start, factor, steps, step_duration, "
                                         "max_p99_send_ms, max_error_rate}")
    return out


def rates(s: dict[str, float]) -> list[float]:
    """The asked rates, msg/s: start x factor^k for k < steps, capped at the spec's 200000."""
    return [round(min(s["start"] * s["factor"] ** k, 200_000), 1) for k in range(int(s["steps"]))]


def judge_step(rate: float, m: dict[str, Any], s: dict[str, float]) -> dict[str, Any]:
    """A step's row: the asked rate, what it measured, held or not and why not (every bound broken)."""
    why = []
    if m["achieved_rate"] < MIN_ACHIEVED * rate:
        why.append(f"achieved {m['achieved_rate']:g} msg/s, below {MIN_ACHIEVED:.0%} of the asked {rate:g}: "
                   "the load could not push it")
    if m["p99_send_ms"] is None:
        why.append("no acknowledged send: p99 not measured")
    elif m["p99_send_ms"] > s["max_p99_send_ms"]:
        why.append(f"p99 send {m['p99_send_ms']} ms above {s['max_p99_send_ms']:g} ms")
    if m["error_rate"] is None or m["error_rate"] > s["max_error_rate"]:
        why.append(f"error rate {m['error_rate']} above {s['max_error_rate']:g}")
    return {"rate": rate, **m, "held": not why, "why": "; ".join(why)}


def result(steps: list[dict[str, Any]], s: dict[str, float]) -> dict[str, Any]:
    """The search's answer from its steps in order: the last rate that held before the first break."""
    held = []
    for st in steps:
        if not st["held"]:
            break
        held.append(st["rate"])
    broke = next((st for st in steps if not st["held"]), None)
    if not held:
        verdict = "none held" + (f" (first step: {broke['why']})" if broke else "")
    elif broke is None:
        verdict = f"did not break within {len(steps)} steps: held up to {held[-1]:g} msg/s"
    else:
        verdict = f"held up to {held[-1]:g} msg/s; broke at {broke['rate']:g} msg/s: {broke['why']}"
    return {"max_rate": held[-1] if held else None, "broke_at": broke["rate"] if broke else None,
            "verdict": verdict, "settings": s, "steps": steps}


def search(run_dir: str | Path | RunDir, s: dict[str, float], run_step: Any) -> dict[str, Any]:
    """The steps in order, stopping at the first that breaks a bound; run_step(index, rate) -> measured."""
    steps: list[dict[str, Any]] = []
    for i, rate in enumerate(rates(s), 1):
        st = judge_step(rate, run_step(i, rate), s)
        say(f"max-rate step {i} at {rate:g} msg/s: achieved {st['achieved_rate']:g}, p99 send {st['p99_send_ms']} ms, "
            f"error rate {st['error_rate']}: " + ("held" if st["held"] else "BROKE: " + st["why"]))
        steps.append(st)
        if not st["held"]:
            break
    return result(steps, s)


def _step_run(cluster: RunDir, i: int, rate: float, s: dict[str, float]) -> RunDir:
    """A run of its own attached to the side's cluster: the side's load at `rate` for step_duration,
    at most rate x step_duration messages, no consumers, no faults."""
    d = yaml.safe_load((cluster.path / "scenario.yaml").read_text())
    d["name"] = f"{d.get('name', 'prerelease')}-step{i}"
    d["load"] = {**(d.get("load") or {}), "rate": rate, "duration": s["step_duration"],
                 "messages": max(1, math.ceil(rate * s["step_duration"]))}
    d.update(consumers=None, faults=[], checks={})
    d.pop("expect", None)
    steps = cluster.path / "steps"
    steps.mkdir(exist_ok=True)
    f = steps / f"step{i}.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return attach_run(f, steps / f"step{i}", cluster)


def run(run_dir: str | Path | RunDir) -> dict[str, Any]:
    """The search on the run's cluster (up already): its steps as attached runs under steps/, the
    result in maxrate.json (also returned)."""
    r = as_run(run_dir)
    s = settings(r.state().get("maxrate"))
    if s is None:
        raise UserError(f"{r.path} is not a max-rate search run", "make it with pipeline.workflows.maxrate.prepare")

    def one(i: int, rate: float) -> dict[str, Any]:
        step = _step_run(r, i, rate, s)
        load.run(step)
        return loadstep.measure(step.path, s["step_duration"])
    out = search(r, s, one) | {"side": (r.state().get("prerelease") or {}).get("side", "candidate")}
    (r.path / RESULT).write_text(json.dumps(out, indent=1))
    return out


def prepare(params: dict[str, Any], after: str | None) -> list[str]:
    """With Param max_rate_search set: one run directory per side (candidate, and the baseline with
    Param `baseline`), in that order after the run `after` (the rounds' last); else none."""
    s = settings(params.get("max_rate_search"))
    if s is None:
        return []
    stem = Path((as_run(after).state().get("prerelease") or {}).get("comparison")) if after else None
    out: list[str] = []
    for side in ("candidate", "baseline") if params.get("baseline", True) else ("candidate",):
        d = (stem.with_name(f"{stem.name}-maxrate-{side}") if stem else None)
        run = prerelease.create(params, d, baseline=side == "baseline")
        run.update_state(prerelease={"side": side, "round": "max-rate", "comparison": str(stem or run.path)},
                         maxrate=s, after=out[-1] if out else after)
        out.append(str(run.path))
    return out


def collect(run_dirs: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each side's search result, and a problem line per search that left none."""
    found, problems = [], []
    for d in run_dirs:
        f = Path(d) / RESULT
        side = (as_run(d).state().get("prerelease") or {}).get("side", "candidate")
        if f.exists():
            found.append(json.loads(f.read_text()))
        else:
            problems.append(f"max-rate search on the {side} did not finish (see its tasks; {d})")
    return found, problems
