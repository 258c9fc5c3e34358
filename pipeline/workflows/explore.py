"""`rmqchaos explore`: seeded random fault schedules over a base scenario's cluster and load, run one
after another within a budget (runs or hours), keeping every run whose checks flag an anomaly
(analysis/judge/anomalies.py) with the seed that drew it. Run k of an exploration from seed S draws its
faults with seed S + k (chaos/explore.py), so `rmqchaos explore BASE --seed S+k --runs 1` draws it
again, and the drawn scenario file (kept beside the run) runs it again as is.

An exploration's directory (default runs/<time>-explore-<base>/) holds each drawn scenario, the runs
that found something (a run that found nothing is removed unless `keep_all`: its row stays in the
run history), and explore.json, rewritten after every run so an interrupted exploration keeps what
it found."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from chaos.explore import schedule, words
from chaos.registry import registry
from pipeline.history.explored import judge, kept, lines
from pipeline.runs import default_run_dir, load_scenario
from pipeline.stages.stage import error_line
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say

MAX_RUNS = 1000
MAX_HOURS = 72.0
RECORD = "explore.json"


def draw(base: str | Path, seed: int, max_faults: int = 3, only: list[str] | None = None) -> list[dict[str, Any]]:
    """The faults seed `seed` draws over `base` (validated as a scenario first)."""
    kinds = registry()
    unknown = [k for k in only or [] if k not in kinds]
    if unknown:
        raise UserError(f"--kinds: no fault kind {unknown[0]!r}", f"kinds: {', '.join(sorted(kinds))}")
    faults = schedule(load_scenario(base), kinds, seed, max_faults, only)
    if not faults:
        raise UserError(f"{base}: no fault kind can be drawn on its cluster" + (f" among {', '.join(only)}" if only else ""),
                        "explore needs a load and brokers; see docs/explore.md")
    return faults


def scenario_doc(base: str | Path, seed: int, faults: list[dict[str, Any]]) -> dict[str, Any]:
    """The drawn scenario: the base with these faults, no signature of its own (the explorer's checks
    judge it), and where it came from."""
    b = Path(base).resolve()
    return {"extends": str(b), "name": f"explore-{seed}", "explore": {"seed": seed, "base": str(b)},
            "description": f"drawn by rmqchaos explore from {b.name} with seed {seed}: {words(faults)}"[:2000],
            "faults": faults, "signature": None, "expect": None}


def write_scenario(directory: Path, base: str | Path, seed: int, faults: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    f = directory / f"explore-{seed}.yaml"
    f.write_text(f"# drawn by `rmqchaos explore {base} --seed {seed} --runs 1` (pipeline/workflows/explore.py)\n"
                 + yaml.safe_dump(scenario_doc(base, seed, faults), sort_keys=False))
    load_scenario(f)  # what it wrote validates, or one line now
    return f


def plan(base: str | Path, runs: int, seed: int, max_faults: int = 3, only: list[str] | None = None,
         out: str | Path | None = None) -> list[str]:
    """The scenario files of `runs` drawn schedules (seeds seed..seed+runs-1), written into `out`
    (default runs/<time>-explore-<base>/): what the weekly DAG maps its runs over."""
    check_budget(runs, None, seed, max_faults)
    d = Path(out) if out else explore_dir(base)
    return [str(write_scenario(d, base, seed + k, draw(base, seed + k, max_faults, only))) for k in range(runs)]


def plan_params(params: dict[str, Any]) -> list[str]:
    """plan() from a DAG run's Params: base, runs, seed (None: from the clock), max_faults."""
    seed = params.get("seed")
    base = Path(params["base"])
    return plan(base if base.is_absolute() else paths.REPO / base, int(params["runs"]), int(time.time()) if seed is None else int(seed),
                int(params.get("max_faults") or 3))


def explore_dir(base: str | Path) -> Path:
    return Path(str(default_run_dir("explore-" + Path(base).stem)))


def check_budget(runs: int | None, hours: float | None, seed: int | None, max_faults: int) -> None:
    if runs is None and hours is None:
        raise UserError("explore needs a budget", "give --runs N or --hours H (or both: whichever ends first)")
    if runs is not None and not 1 <= runs <= MAX_RUNS:
        raise UserError(f"--runs {runs} is out of range", f"use 1..{MAX_RUNS}")
    if hours is not None and not 0 < hours <= MAX_HOURS:
        raise UserError(f"--hours {hours:g} is out of range", f"use more than 0 and at most {MAX_HOURS:g}")
    if seed is not None and not 0 <= seed < 2 ** 53:
        raise UserError(f"--seed {seed} is out of range", "use a non-negative integer below 2^53")
    if not 1 <= max_faults <= 8:
        raise UserError(f"--max-faults {max_faults} is out of range", "use 1..8")


def explore(base: str | Path, runs: int | None = None, hours: float | None = None, seed: int | None = None,
            max_faults: int = 3, only: list[str] | None = None, keep_all: bool = False,
            out: str | Path | None = None) -> dict[str, Any]:
    """Draw and run schedules until `runs` have run or `hours` have passed (a run is not started when
    the last one's wall time would overrun the hours). Returns the record: {dir, base, seed, runs
    [judge() each], anomalies (the runs with one)}."""
    from pipeline.scenario import run_scenario
    check_budget(runs, hours, seed, max_faults)
    seed = int(time.time()) if seed is None else seed  # from the clock: never the same twice
    load_scenario(base)
    d = Path(out) if out else explore_dir(base)
    d.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + hours * 3600 if hours is not None else None
    rec: dict[str, Any] = {"dir": str(d), "base": str(Path(base).resolve()), "seed": seed, "max_faults": max_faults,
                           "kinds": only, "runs": [], "anomalies": []}
    say(f"explore: {base} from seed {seed}, budget " + " or ".join(
        x for x in (f"{runs} run(s)" if runs else "", f"{hours:g} h" if hours else "") if x) + f"; into {d}")
    last_s = 0.0
    for k in range(runs or MAX_RUNS):
        if deadline is not None and time.monotonic() + last_s > deadline:
            say(f"explore: the {hours:g} h budget leaves no time for another run ({k} run(s) done)")
            break
        t0 = time.monotonic()
        faults = draw(base, seed + k, max_faults, only)
        f = write_scenario(d, base, seed + k, faults)
        say(f"explore: run {k + 1}{'/' + str(runs) if runs else ''}, seed {seed + k}: {words(faults)}")
        o = run_scenario(f, d / f"run-{seed + k}")
        if o.failure is not None and not isinstance(o.failure, UserError):
            (d / RECORD).write_text(json.dumps(rec, indent=1) + "\n")
            raise o.failure  # interrupted (Ctrl-C, SIGTERM): what was found so far is in explore.json
        j = judge(o.run.path)
        if o.failure is not None:
            j["failures"] = list(dict.fromkeys([*j["failures"], error_line(o.failure)]))
        found = "; ".join(a["seen"] for a in j["anomalies"])
        say(f"explore: seed {seed + k}: " + (f"ANOMALY: {found}" if found else "nothing found" if j["complete"]
                                              else "did not finish: " + "; ".join(j["incomplete_reasons"] or j["failures"])))
        if not kept(j) and not keep_all:
            shutil.rmtree(o.run.path, ignore_errors=True)
            j["run_dir"] = None  # nothing found: its row stays in the run history
        rec["runs"].append(j)
        rec["anomalies"] = [x for x in rec["runs"] if x["anomalies"]]
        (d / RECORD).write_text(json.dumps(rec, indent=1) + "\n")
        last_s = time.monotonic() - t0
    return rec


def prepare(scenario_file: str | Path) -> str:
    """A detached run directory for one drawn scenario of a scheduled exploration, beside it."""
    from pipeline.runs import create_run, reap_orphans
    reap_orphans()
    f = Path(scenario_file)
    return str(create_run(f, f.parent / f"run-{f.stem.removeprefix('explore-')}", mode="detached").path)


def collect(run_dirs: list[str], keep_all: bool = False) -> dict[str, Any]:
    """After a scheduled exploration (the weekly DAG): each run judged, the runs that found nothing
    removed (unless keep_all), explore.json written beside the drawn scenarios, one line per run
    printed. Returns the record as explore() does."""
    recs = []
    for d in run_dirs:
        j = judge(d)
        if not kept(j) and not keep_all:
            shutil.rmtree(d, ignore_errors=True)
            j["run_dir"] = None
        recs.append(j)
    seeds = [x["seed"] for x in recs if x["seed"] is not None]
    d = Path(run_dirs[0]).parent if run_dirs else None
    rec = {"dir": str(d) if d else None, "base": None, "seed": min(seeds, default=None),
           "runs": recs, "anomalies": [x for x in recs if x["anomalies"]]}
    if d is not None:
        (d / RECORD).write_text(json.dumps(rec, indent=1) + "\n")
    for line in lines(rec):
        print(line, flush=True)
    return rec
