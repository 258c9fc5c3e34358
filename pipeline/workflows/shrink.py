"""Shrinking an anomalous fault schedule to a smaller one that still shows the anomaly (Jepsen's and
QuickCheck's shrinking, greedy): drop faults, shorten what lasts, move faults earlier, as long as a
run budget lasts. The search is pure (`minimize`, a `shows(faults)` callable runs one trial);
`shrink_run` drives it with real runs of a drawn scenario and writes the result as a scenario file
with an `expect:` block.

Intermittent anomalies: a candidate is tried up to `repeats` times and counts as showing the anomaly
on its first showing; the result says how often each accepted schedule showed it (k of n)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rmqchaos.spec import to_seconds

DURATION_KEYS = ("duration", "restart_after", "back_after")
MIN_HOLD_S = 2.0  # shortening stops here: a shorter fault is no longer the same fault
MIN_AT_S = 10.0  # the explorer's warm-up (chaos/explore.py WARMUP_S): no fault before the consumers read


@dataclass
class Trial:
    faults: list[dict[str, Any]]
    step: str  # what this candidate changed, e.g. 'drop kill-1', 'shorten partition-2 duration 20s -> 10s'
    showed: int
    runs: int

    @property
    def accepted(self) -> bool:
        return self.showed > 0


@dataclass
class Shrunk:
    faults: list[dict[str, Any]]  # the smallest schedule found that showed the anomaly
    showed: int  # in how many of its own runs
    runs: int
    trials: list[Trial] = field(default_factory=list)
    budget_left: int = 0
    reproduced: bool = True  # False: the original schedule did not show it again within its repeats

    def words(self) -> str:
        if not self.reproduced:
            return f"the original schedule did not show the anomaly again in {self.runs} run(s): nothing to shrink"
        return (f"{len(self.faults)} fault(s), showed the anomaly in {self.showed} of {self.runs} run(s); "
                f"{sum(t.runs for t in self.trials)} run(s) in {len(self.trials)} trial(s)"
                + (", budget spent" if self.budget_left <= 0 else ""))


def _secs(v: Any) -> float:
    return to_seconds(v)


def candidates(faults: list[dict[str, Any]], min_hold_s: float = MIN_HOLD_S,
               min_at_s: float = MIN_AT_S) -> list[tuple[str, list[dict[str, Any]]]]:
    """The next smaller schedules to try, most reducing first: each fault dropped (last first); each
    lasting value cut to min_hold_s, or halved; each `at` moved to min_at_s, or halfway there."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for i in reversed(range(len(faults))):
        if len(faults) > 1:
            out.append((f"drop {faults[i].get('id', i)}", faults[:i] + faults[i + 1:]))
    for i, f in enumerate(faults):  # the biggest step first (to the floor), then half of it
        for k in DURATION_KEYS:
            if f.get(k) is None:
                continue
            now = _secs(f[k])
            for new in dict.fromkeys([min_hold_s, max(min_hold_s, round(now / 2 * 2) / 2)]):
                if new < now:
                    out.append((f"shorten {f.get('id', i)} {k} {now:g}s -> {new:g}s",
                                faults[:i] + [{**f, k: f"{new:g}s"}] + faults[i + 1:]))
    for i, f in enumerate(faults):
        now = _secs(f.get("at", 0))
        for new in dict.fromkeys([min_at_s, round((now + min_at_s) / 2 * 2) / 2]):
            if now - new >= 1.0:
                out.append((f"move {f.get('id', i)} at {now:g}s -> {new:g}s",
                            faults[:i] + [{**f, "at": f"{new:g}s"}] + faults[i + 1:]))
    return out


def minimize(faults: list[dict[str, Any]], shows: Callable[[list[dict[str, Any]]], bool], budget: int,
             repeats: int = 1, min_hold_s: float = MIN_HOLD_S, min_at_s: float = MIN_AT_S,
             progress: Callable[[str], None] = lambda _: None,
             valid: Callable[[list[dict[str, Any]]], bool] = lambda _: True) -> Shrunk:
    """Greedy shrinking within `budget` runs: the original is run first (up to `repeats` times); then
    the first candidate that shows the anomaly replaces the schedule, and the candidates of the new
    schedule are tried, until none shows it or the budget is spent. A candidate `valid` refuses (a
    fault dropped that another's `after` names) costs no run."""
    left = budget

    def trial(fs: list[dict[str, Any]], step: str) -> Trial:
        nonlocal left
        showed = runs = 0
        while runs < repeats and left > 0 and not showed:
            runs += 1
            left -= 1
            showed += bool(shows(fs))
        t = Trial(fs, step, showed, runs)
        progress(f"shrink: {step}: {'showed' if showed else 'did not show'} the anomaly ({showed} of {runs}); "
                 f"{left} run(s) left")
        return t

    first = trial(faults, "the original schedule")
    if not first.accepted:
        return Shrunk(faults, 0, first.runs, [first], left, reproduced=False)
    best, trials = first, [first]
    failed: set[str] = set()  # schedules tried that did not show it: not run again
    changed = True
    while changed and left > 0:
        changed = False
        for step, cand in candidates(best.faults, min_hold_s, min_at_s):
            if left <= 0:
                break
            key = json.dumps(cand, sort_keys=True)
            if key in failed or not valid(cand):
                continue
            t = trial(cand, step)
            trials.append(t)
            if t.accepted:
                best, changed = t, True
                break
            failed.add(key)
    showed, runs = best.showed, best.runs
    if repeats > 1 and left >= repeats:  # how often the result shows it: `repeats` more runs, all of them
        extra = 0
        for _ in range(repeats):
            left -= 1
            extra += bool(shows(best.faults))
        progress(f"shrink: the result showed the anomaly in {extra} of {repeats} more run(s)")
        showed, runs = showed + extra, runs + repeats
    return Shrunk(best.faults, showed, runs, trials, left)


# ---------------------------------------------------------------- with real runs

def shrink_run(run_dir: str | Path, check: str | None = None, budget: int = 12, repeats: int = 1,
               out: str | Path | None = None) -> dict[str, Any]:
    """Shrink the schedule of an anomalous run with real runs: each candidate is the run's base (the
    explorer's base for a drawn run, else the run's resolved scenario) with the candidate's faults.
    `check`: the anomaly to keep (analysis/judge/anomalies.py; default the run's first). Writes the result
    as a scenario with an `expect:` block (issue `unfiled:...`, shows_on the run's version) and returns
    {scenario, check, shrunk (Shrunk.words()), faults, trials [{step, showed, runs}], dir}."""
    import shutil

    import yaml

    from analysis.judge.anomalies import CHECKS
    from pipeline.history.explored import judge
    from pipeline.runs import as_run, default_run_dir, load_scenario
    from pipeline.scenario import run_scenario
    from rmqchaos.errors import UserError
    from rmqchaos.progress import say

    r = as_run(run_dir)
    j = judge(r.path)
    found = [a["check"] for a in j["anomalies"]]
    if check is None:
        if not found:
            raise UserError(f"{r.path}: the run shows no anomaly to shrink", "pass a run that `rmqchaos explore` kept")
        check = found[0]
    if check not in CHECKS:
        raise UserError(f"--check {check}: no such anomaly check", f"checks: {', '.join(CHECKS)}")
    if check not in found:
        raise UserError(f"{r.path}: the run does not show {check}", f"it shows: {', '.join(found) or 'nothing'}")
    if not 1 <= budget <= 200 or not 1 <= repeats <= 20:
        raise UserError(f"--budget {budget} / --repeats {repeats} out of range", "use --budget 1..200, --repeats 1..20")
    doc = yaml.safe_load((r.path / "scenario.yaml").read_text()) or {}
    origin = doc.get("explore") or {}
    base = Path(origin["base"]) if origin.get("base") else r.path / "scenario.yaml"
    load_scenario(base)
    faults = [_written(f) for f in doc.get("faults") or []]
    name = str(doc.get("name") or "run")
    d = Path(out) if out else Path(str(default_run_dir(f"shrink-{name}")))
    d.mkdir(parents=True, exist_ok=True)
    n = 0

    def shows(fs: list[dict[str, Any]]) -> bool:
        nonlocal n
        n += 1
        f = d / f"trial-{n}.yaml"
        f.write_text(yaml.safe_dump({"extends": str(base.resolve()), "name": f"shrink-trial-{n}", "faults": fs,
                                     "signature": None, "expect": None}, sort_keys=False))
        o = run_scenario(f, d / f"trial-{n}")
        if o.failure is not None and not isinstance(o.failure, UserError):
            raise o.failure  # interrupted (Ctrl-C, SIGTERM): the search stops, its runs are kept
        got = check in [a["check"] for a in judge(o.run.path)["anomalies"]]
        if not got:
            shutil.rmtree(o.run.path, ignore_errors=True)
        return got
    def valid(fs: list[dict[str, Any]]) -> bool:
        f = d / "candidate.yaml"
        f.write_text(yaml.safe_dump({"extends": str(base.resolve()), "name": "shrink-candidate", "faults": fs,
                                     "signature": None, "expect": None}, sort_keys=False))
        try:
            load_scenario(f)
            return True
        except UserError:
            return False
    res = minimize(faults, shows, budget, repeats, progress=say, valid=valid)
    version = str((doc.get("cluster") or {}).get("rocketmq_version") or "")
    seed = origin.get("seed")
    tag = f"explore-{seed}" if seed is not None else name
    target = d / f"shrunk-{tag}.yaml"
    target.write_text(
        f"# shrunk by `rmqchaos shrink {r.path} --check {check}` (pipeline/workflows/shrink.py): {res.words()}\n"
        + yaml.safe_dump({"extends": str(base.resolve()), "name": f"shrunk-{tag}"[:41],
                          "description": f"{check} ({CHECKS[check]}) with {len(res.faults)} fault(s), from {r.path.name}",
                          "faults": res.faults, "signature": None,
                          "expect": {"issue": f"unfiled:{tag}-{check}", "shows_on": [version] if version else [],
                                     "conditions": [CHECKS[check]]}}, sort_keys=False))
    return {"scenario": str(target), "check": check, "shrunk": res.words(), "faults": res.faults, "dir": str(d),
            "reproduced": res.reproduced,
            "trials": [{"step": t.step, "showed": t.showed, "runs": t.runs} for t in res.trials]}


def _written(f: dict[str, Any]) -> dict[str, Any]:
    """A fault as the resolved scenario holds it, back to what a person writes: no nulls, no defaults
    the kind fills in again (timeout 60), seconds with their unit."""
    out = {k: v for k, v in f.items() if v is not None and not (k == "timeout" and v == 60.0)}
    for k in ("at", *DURATION_KEYS):
        if isinstance(out.get(k), (int, float)) and not isinstance(out.get(k), bool):
            out[k] = f"{out[k]:g}s"
    return out
