"""Runs: load a scenario (with every fault checked against its kind), create or open a run
directory, and reap what killed invocations left running. Everything that starts a run goes
through here, the CLI, the DAGs and the tests alike."""
from __future__ import annotations

import time
from pathlib import Path

from chaos.registry import registry
from cluster import get_backend, reap_lost_runs
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir, registered_runs
from rmqchaos.spec import Scenario
from rmqchaos.spec import load_scenario as _load

def load_scenario(path: str | Path) -> Scenario:
    """A scenario file (and its `extends:` bases), validated, faults checked against their kinds."""
    return _load(path, fault_kinds=registry())


def as_run(run: str | Path | RunDir) -> RunDir:
    return run if isinstance(run, RunDir) else RunDir.open(run)


def default_run_dir(scenario_name: str) -> Path:
    return paths.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario_name}"


def create_run(scenario_file: str | Path, out: str | Path | None = None, mode: str = "owned") -> RunDir:
    """A new run directory for `scenario_file` (default runs/<time>-<name>).

    mode 'owned': its processes end with the process that runs it (`rmqchaos run`, a test);
    'detached': they outlive it (`cluster up`, `stage up`, a DAG task) until `down`."""
    s = load_scenario(scenario_file)
    d = Path(out) if out is not None else default_run_dir(s.name)
    return RunDir.create(d, s, Path(scenario_file).read_text(), mode)


def attach_run(scenario_file: str | Path, out: str | Path, cluster_run: str | Path | RunDir) -> RunDir:
    """A run of its own (scenario, ledgers, timeline, analysis) whose stages act on the cluster of
    another run (started by `cluster up` or `stage up`): up and down are that run's business."""
    target = as_run(cluster_run)
    run = create_run(scenario_file, out, mode="detached")
    run.update_state(cluster_run=str(target.path), cluster="attached")
    return run


def cluster_run_dir(run_dir: str | Path | None) -> Path:
    """The run directory of a by-hand cluster: the given one, else $RMQCHAOS_HOME/default."""
    return Path(run_dir) if run_dir else paths.state_home() / "default"


def open_cluster_run(run_dir: str | Path | None) -> RunDir:
    d = cluster_run_dir(run_dir)
    if not (d / "state.json").exists():
        raise UserError(f"no cluster run directory at {d}", "start one with `rmqchaos cluster up`")
    return RunDir.open(d)


def reap_orphans() -> list[str]:
    """Before starting anything: end what an earlier, killed invocation left running. Returns what
    was done (also said as progress)."""
    done: list[str] = []
    for line in reap_lost_runs():
        say(line)
        done.append(line)
    for rd in registered_runs():
        try:
            if rd.is_orphan():
                say(f"reaping leftovers of run {rd.run_id} ({rd.path}) whose owner is gone")
                for d in get_backend(rd).down():
                    say("  " + d)
                    done.append(d)
        except (OSError, ValueError, UserError) as e:
            say(f"could not reap {rd.path}: {e}")
    return done


def namesrv_target(namesrv: str | None, run_dir: str | Path | None) -> tuple[str, RunDir | None]:
    """(namesrv address, its run or None) for by-hand commands: an explicit loopback address wins,
    else the cluster of `run_dir` (default: the one `cluster up` made)."""
    if namesrv:
        if not namesrv.split(":")[0].startswith("127."):
            raise UserError(f"namesrv {namesrv} is not on loopback", "the platform only talks to 127.0.0.0/8")
        return namesrv, None
    run = open_cluster_run(run_dir)
    return get_backend(run).namesrv_addr, run
