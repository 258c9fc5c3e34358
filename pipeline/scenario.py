"""A scenario run end to end: the stage order and the failure policy, in this one place.

    up → check → load (with its faults) → drain → down → analyze → report

Failure policy:
- `drain` also runs after a `load` that failed with a user-level error (a fault that could not be
  applied): the consumers it started still stop cleanly, so what the ledgers hold is complete;
- `down` always runs, whatever happened before it (also on Ctrl-C or SIGTERM);
- `analyze` runs on whatever the ledgers hold when the stages before it failed with a user-level
  error (a failed check, a fault that could not be applied), not when the run was interrupted;
- `report` always runs, so a failed run still says what happened;
- the first failure is returned (and re-raised by `run_many` once every report is written).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipeline.stages import analyze, check, down, drain, load, report, up
from pipeline.runs import create_run, load_scenario, reap_orphans
from pipeline.stages.stage import error_line
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir

#: the stages before `down`, in order; each is `run(run_dir) -> small result`
BEFORE_DOWN: tuple[tuple[str, Callable[[RunDir], object]], ...] = (
    ("up", up.run), ("check", check.run), ("load", load.run), ("drain", drain.run))
STAGES = ("up", "check", "load", "drain", "down", "analyze", "report")


def runs_after_failure(stage_name: str, failed_stage: str) -> bool:
    """Whether `stage_name` (before `down`) still runs after `failed_stage` failed with a user-level error."""
    return stage_name == "drain" and failed_stage == "load"


@dataclass
class Outcome:
    run: RunDir
    failure: BaseException | None

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_scenario(scenario_file: str | Path, out: str | Path | None = None, mode: str = "owned") -> Outcome:
    """One scenario through every stage; returns the run and its first failure (None when it passed)."""
    run = create_run(scenario_file, out, mode)
    say(f"run directory: {run.path}")
    o = run_stages(run)
    if isinstance(o.failure, UserError) and not run.processes.path.exists() and not run.ledgers_dir.exists():
        # nothing ever started (bad environment, port in use): no run directory for a run that never was
        shutil.rmtree(run.path, ignore_errors=True)
        raise o.failure
    return o


def run_stages(run: RunDir) -> Outcome:
    failed: BaseException | None = None
    failed_stage = ""
    try:
        for name, fn in BEFORE_DOWN:
            if failed is not None and not runs_after_failure(name, failed_stage):
                break
            try:
                fn(run)
            except UserError as e:
                if failed is None:
                    failed, failed_stage = e, name
    except BaseException as e:  # noqa: BLE001 - down must run whatever happened; an interruption wins
        failed = e
    finally:
        if run.processes.path.exists() or run.state().get("cluster") != "new":
            down.run(run)
    if failed is None or isinstance(failed, UserError):
        try:  # whatever was written to the ledgers is reconciled, also after a failed stage
            analyze.run(run)
        except UserError as e:
            failed = failed or e
    report.run(run)
    return Outcome(run, failed)


def run_many(scenario_files: list[str | Path], repeat: int = 1, out: str | Path | None = None,
             combined_report: str | Path | None = None) -> tuple[list[Outcome], str | None]:
    """Each scenario `repeat` times, one after another (every file is validated before anything
    starts), then one side-by-side HTML report of the analyzed runs. Returns the outcomes and the
    report's path; an interruption (not a user-level failure) stops the sequence and propagates."""
    for f in scenario_files:
        load_scenario(f)
    if not 1 <= repeat <= 100:
        raise UserError(f"--repeat {repeat} is out of range", "use 1..100")
    if out is not None and (len(scenario_files) > 1 or repeat > 1):
        raise UserError("--out names one run directory", "leave it out with several scenarios or --repeat")
    reap_orphans()
    done: list[Outcome] = []
    for f in scenario_files:
        for k in range(repeat):
            if repeat > 1:
                say(f"{f}: repeat {k + 1}/{repeat}")
            o = run_scenario(f, out)
            done.append(o)
            print(o.run.report_txt.read_text(), end="", flush=True)
            if o.failure is not None:
                if not isinstance(o.failure, UserError):
                    raise o.failure  # interrupted: stop here (the caller prints it once)
                if len(scenario_files) * repeat > 1:  # the others go on; the caller prints the first failure
                    say(f"{f}: failed: {error_line(o.failure)}")
    analyzed = [o.run for o in done if o.run.summary_file.exists()]
    rep: str | None = None
    if len(done) == 1:
        r = done[0].run
        rep = str(r.report_html if r.report_html.exists() else r.report_txt)
    elif analyzed:
        from pipeline.runs import default_run_dir
        target = Path(combined_report) if combined_report else Path(str(default_run_dir("report")) + ".html")
        rep = report.combined(analyzed, target)["html"]
    return done, rep
