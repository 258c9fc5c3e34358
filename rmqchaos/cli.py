"""rmqchaos: the command line. Every subcommand has --help; errors are one line and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rmqchaos import paths, stages
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir, registered_runs
from rmqchaos.spec import load_scenario

SIGNALS = {s.name: s for s in signal.Signals}


def _default_cluster_dir() -> Path:
    return paths.state_home() / "default"


def reap_orphans() -> None:
    """Before starting anything: end what an earlier, killed invocation left running."""
    from cluster.local import reap
    from cluster.orphans import reap_lost_runs
    for line in reap_lost_runs():
        say(line)
    for rd in registered_runs():
        try:
            if rd.is_orphan():
                say(f"reaping leftovers of run {rd.run_id} ({rd.path}) whose owner is gone")
                for d in reap(rd):
                    say("  " + d)
        except (OSError, ValueError, UserError) as e:
            say(f"could not reap {rd.path}: {e}")


def _new_run(scenario_file: str, out: str | None, mode: str) -> RunDir:
    s = load_scenario(scenario_file)
    if out is None:
        out = str(paths.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{s.name}")
    return RunDir.create(out, s, Path(scenario_file).read_text(), mode)


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so `down` still runs


# ---------------------------------------------------------------- commands

def _run_one(scenario_file: str, out: str | None) -> tuple[RunDir, BaseException | None]:
    """up → check → load (with faults) → down → analyze → report, for one scenario."""
    run = _new_run(scenario_file, out, mode="owned")
    say(f"run directory: {run.path}")
    failed: BaseException | None = None
    try:
        stages.up(run)
        stages.check(run)
        stages.load(run)
    except BaseException as e:  # noqa: BLE001 - down must run whatever happened
        failed = e
    finally:
        stages.down(run)
    if failed is None or isinstance(failed, UserError):
        try:  # whatever was written to the ledgers is reconciled, also after a failed stage
            stages.analyze(run)
        except UserError as e:
            failed = failed or e
    rep = stages.report(run)
    print(rep.read_text(), end="")
    return run, failed


def cmd_run(a: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    for f in a.scenario:  # every scenario is valid before anything starts
        load_scenario(f)
    if a.repeat < 1 or a.repeat > 100:
        raise UserError(f"--repeat {a.repeat} is out of range", "use 1..100")
    if a.out and (len(a.scenario) > 1 or a.repeat > 1):
        raise UserError("--out names one run directory", "leave it out with several scenarios or --repeat")
    reap_orphans()
    done: list[RunDir] = []
    first_failure: BaseException | None = None
    for f in a.scenario:
        for k in range(a.repeat):
            if a.repeat > 1:
                say(f"{f}: repeat {k + 1}/{a.repeat}")
            run, failed = _run_one(f, a.out)
            done.append(run)
            if failed is not None:
                say(f"{f}: failed: {failed}")
                first_failure = first_failure or failed
                if not isinstance(failed, UserError):
                    raise failed  # interrupted: stop here
    analyzed = [r for r in done if (r.path / "analysis" / "summary.json").exists()]
    if len(done) == 1:
        html = done[0].path / "report.html"
        print(f"report: {html if html.exists() else done[0].path / 'report.txt'}")
    elif analyzed:
        from analysis.report import write_report
        out = Path(a.report) if a.report else paths.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-report.html"
        print(f"report: {write_report([r.path for r in analyzed], out)}")
    if first_failure is not None:
        raise first_failure
    return 0


def cmd_cluster_up(a: argparse.Namespace) -> int:
    reap_orphans()
    d = Path(a.run_dir) if a.run_dir else _default_cluster_dir()
    if (d / "state.json").exists():
        old = RunDir.open(d)
        if old.state().get("cluster") not in ("down", "failed", "new"):
            say(f"a cluster from {d} is still recorded as up; stopping it first")
            stages.down(old)
        shutil.rmtree(d)
    run = _new_run(a.scenario, str(d), mode="detached")
    stages.up(run)
    print(f"cluster up: namesrv {stages.backend(run).namesrv_addr}; run directory {run.path}")
    print("next: rmqchaos cluster status" + ("" if not a.run_dir else f" --run-dir {run.path}")
          + ", rmqchaos cluster down" + ("" if not a.run_dir else f" --run-dir {run.path}"))
    return 0


def _cluster_run(a: argparse.Namespace) -> RunDir:
    d = Path(a.run_dir) if getattr(a, "run_dir", None) else _default_cluster_dir()
    if not (d / "state.json").exists():
        raise UserError(f"no cluster run directory at {d}", "start one with `rmqchaos cluster up`")
    return RunDir.open(d)


def cmd_cluster_status(a: argparse.Namespace) -> int:
    run = _cluster_run(a)
    sts = stages.backend(run).status()
    if a.json:
        print(json.dumps([s.__dict__ for s in sts], indent=2))
        return 0
    print(f"run {run.run_id}  ({run.path})  cluster state: {run.state().get('cluster')}")
    print(f"{'node':12s} {'role':8s} {'state':11s} {'pid':>7s} {'ports':18s} {'registered':10s} {'memory':>8s}")
    for s in sts:
        reg = "-" if s.registered is None else ("yes" if s.registered else "NO")
        mem = f"{s.memory_bytes / 2**20:.0f}M" if s.memory_bytes else "-"
        print(f"{s.name:12s} {s.role:8s} {s.state:11s} {s.pid or '-':>7} {','.join(map(str, s.ports)):18s} "
              f"{reg:10s} {mem:>8s}")
    return 0


def cmd_cluster_down(a: argparse.Namespace) -> int:
    targets = registered_runs() if a.all else [_cluster_run(a)]
    if a.all:
        from cluster.orphans import reap_lost_runs
        for line in reap_lost_runs():
            say(line)
    if not targets:
        print("nothing to stop")
    for run in targets:
        stages.down(run)
        print(f"down: {run.path}")
    return 0


def cmd_node(a: argparse.Namespace) -> int:
    run = _cluster_run(a)
    node = stages.backend(run).node(a.node)
    if a.action == "kill":
        sig = SIGNALS.get(a.signal.upper() if a.signal.upper().startswith("SIG") else "SIG" + a.signal.upper())
        if sig is None:
            raise UserError(f"unknown signal {a.signal!r}", "use a name such as SIGKILL, TERM or STOP")
        node.kill(sig)
    elif a.action == "pause":
        node.pause()
    elif a.action == "resume":
        node.resume()
    elif a.action == "restart":
        node.restart()
    print(f"{a.action} {a.node}: done")
    return 0


def cmd_stage(a: argparse.Namespace) -> int:
    if a.stage == "up":
        if (Path(a.run_dir) / "state.json").exists():
            run = RunDir.open(a.run_dir)
            run.take_ownership("detached")
        else:
            if not a.scenario:
                raise UserError(f"{a.run_dir} is not a run directory yet", "pass --scenario FILE to create it")
            run = _new_run(a.scenario, a.run_dir, mode="detached")
        reap_orphans()
        stages.up(run)
    else:
        run = RunDir.open(a.run_dir)
        if a.stage == "check":
            stages.check(run)
        elif a.stage == "load":
            stages.load(run)
        elif a.stage == "analyze":
            stages.analyze(run)
        elif a.stage == "down":
            stages.down(run)
        elif a.stage == "report":
            print(stages.report(run).read_text(), end="")
    return 0


def cmd_analyze(a: argparse.Namespace) -> int:
    run = RunDir.open(a.run_dir)
    summ = stages.analyze(run, a.master)
    if summ is None:
        raise UserError(f"{run.path} has no ledgers", "run a scenario with a `load:` section")
    print(json.dumps(summ["counts"], indent=1))
    print(f"summary: {run.path / 'analysis' / 'summary.json'}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from analysis.report import write_report
    out = write_report(a.run_dirs, a.out)
    print(f"report: {out}")
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    s = load_scenario(a.scenario)
    print(f"{a.scenario}: valid (scenario {s.name!r}, {len(s.cluster.brokers)} broker group(s), "
          f"RocketMQ {s.cluster.rocketmq_version})")
    if a.resolved:
        from rmqchaos.spec import dump_scenario
        print(dump_scenario(s), end="")
    return 0


# ---------------------------------------------------------------- parser

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmqchaos", description="Chaos and load tests for a real Apache RocketMQ "
                                "cluster on this machine.")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run a scenario end to end (up, checks, load, down, report)",
                       description="Run each SCENARIO end to end: start the cluster, run its checks, the load with its "
                                   "faults and consumers, stop it, reconcile the ledgers (PySpark) and "
                                   "write the report. All state lands in the run directory.")
    r.add_argument("scenario", nargs="+", help="scenario YAML file(s), e.g. scenarios/smoke.yaml; several are "
                                               "run one after another and reported side by side")
    r.add_argument("--out", help="run directory to create, for a single run (default: runs/<time>-<scenario name>)")
    r.add_argument("--repeat", type=int, default=1, help="run each scenario N times; the report shows the spread")
    r.add_argument("--report", help="HTML report of several runs (default: runs/<time>-report.html)")
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("cluster", help="start, inspect, break and stop a cluster by hand")
    csub = c.add_subparsers(dest="action", required=True)
    rd_help = "run directory of the cluster (default: $RMQCHAOS_HOME/default, i.e. .rmqchaos/default)"
    cu = csub.add_parser("up", help="start a cluster and return once every broker is registered and routable")
    cu.add_argument("--scenario", default=str(paths.REPO / "scenarios" / "smoke.yaml"),
                    help="scenario whose `cluster:` section to use (default: scenarios/smoke.yaml)")
    cu.add_argument("--run-dir", help=rd_help)
    cu.set_defaults(fn=cmd_cluster_up)
    cs = csub.add_parser("status", help="nodes, pids, ports, registration, memory")
    cs.add_argument("--run-dir", help=rd_help)
    cs.add_argument("--json", action="store_true", help="machine-readable output")
    cs.set_defaults(fn=cmd_cluster_status)
    cd = csub.add_parser("down", help="stop every process and remove every cgroup the cluster started")
    g = cd.add_mutually_exclusive_group()
    g.add_argument("--run-dir", help=rd_help)
    g.add_argument("--all", action="store_true", help="every registered run with live processes (also those whose run directory was deleted)")
    cd.set_defaults(fn=cmd_cluster_down)
    for act, hlp in (("kill", "send a signal to a node (default SIGKILL)"), ("pause", "freeze a node (cgroup freezer)"),
                     ("resume", "thaw a paused node"), ("restart", "stop and start a node on the same store")):
        n = csub.add_parser(act, help=hlp)
        n.add_argument("node", help="node name: namesrv, broker-a, broker-a-s (slave), proxy ...")
        n.add_argument("--run-dir", help=rd_help)
        if act == "kill":
            n.add_argument("--signal", default="SIGKILL", help="signal name (default SIGKILL)")
        n.set_defaults(fn=cmd_node, action=act)

    s = sub.add_parser("stage", help="run one pipeline stage against a run directory (as the DAG tasks do)",
                       description="Stages: up (needs --scenario the first time), check, load, down, analyze, report. "
                                   "Each reads and writes only the run directory; down always cleans up.")
    s.add_argument("stage", choices=["up", "check", "load", "down", "analyze", "report"])
    s.add_argument("run_dir", help="run directory")
    s.add_argument("--scenario", help="scenario file (stage up on a new run directory)")
    s.set_defaults(fn=cmd_stage)

    an = sub.add_parser("analyze", help="reconcile a run's ledgers with PySpark (analysis/summary.json)",
                        description="Classify every business key (ok, lost, duplicated, recovered, failed, "
                                    "indeterminate) and write RUN_DIR/analysis/summary.json, keys.parquet and "
                                    "series.parquet. Spark runs local[*] unless --master says otherwise.")
    an.add_argument("run_dir")
    an.add_argument("--master", help="Spark master URL (default local[*], or $RMQCHAOS_SPARK_MASTER)")
    an.set_defaults(fn=cmd_analyze)
    rp = sub.add_parser("report", help="one self-contained HTML report from one or more analyzed runs",
                        description="Several runs are shown side by side (e.g. transientStorePoolEnable on vs off).")
    rp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rp.add_argument("--out", required=True, help="HTML file to write")
    rp.set_defaults(fn=cmd_report)

    from rmqchaos import bench, manual
    manual.add_parsers(sub)
    bench.add_parsers(sub)

    v = sub.add_parser("validate", help="validate a scenario file")
    v.add_argument("scenario")
    v.add_argument("--resolved", action="store_true", help="print the scenario with every default filled in")
    v.set_defaults(fn=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return int(a.fn(a) or 0)
    except UserError as e:
        print(f"rmqchaos: error: {e.line()}", file=sys.stderr)
        if e.detail:
            print(e.detail, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rmqchaos: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
