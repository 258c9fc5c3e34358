"""rmqchaos: the command line. Every subcommand has --help; errors are one line and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from pipeline.stages import analyze, check, down, drain, load, report, up
from pipeline.runs import cluster_run_dir, create_run, load_scenario, open_cluster_run, reap_orphans
from cli.services import cmd_airflow, cmd_docker, cmd_image, cmd_spark
from pipeline.scenario import run_many
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import parse_signal
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so `down` still runs


# ---------------------------------------------------------------- commands

def cmd_run(a: argparse.Namespace) -> int:
    done, rep = run_many(a.scenario, a.repeat, a.out, a.report)
    if rep:
        print(f"report: {rep}")
    failure = next((o.failure for o in done if o.failure is not None), None)
    if failure is not None:
        raise failure
    return 0


def cmd_cluster_up(a: argparse.Namespace) -> int:
    reap_orphans()
    d = cluster_run_dir(a.run_dir)
    if (d / "state.json").exists():
        old = RunDir.open(d)
        if old.state().get("cluster") not in ("down", "failed", "new"):
            say(f"a cluster from {d} is still recorded as up; stopping it first")
            down.run(old)
        shutil.rmtree(d)
    run = create_run(a.scenario, d, mode="detached")
    res = up.run(run)
    print(f"cluster up: namesrv {res['namesrv']}; run directory {run.path}")
    print("next: rmqchaos cluster status" + ("" if not a.run_dir else f" --run-dir {run.path}")
          + ", rmqchaos cluster down" + ("" if not a.run_dir else f" --run-dir {run.path}"))
    return 0


def cmd_cluster_status(a: argparse.Namespace) -> int:
    from cluster import get_backend
    run = open_cluster_run(a.run_dir)
    sts = get_backend(run).status()
    if a.json:
        print(json.dumps([s.__dict__ for s in sts], indent=2))
        return 0
    print(f"run {run.run_id}  ({run.path})  cluster state: {_cluster_state(run, sts)}")
    print(f"{'node':12s} {'role':8s} {'state':11s} {'pid':>7s} {'ports':18s} {'registered':10s} {'memory':>8s}")
    for s in sts:
        reg = "-" if s.registered is None else ("yes" if s.registered else "NO")
        mem = f"{s.memory_bytes / 2**20:.0f}M" if s.memory_bytes else "-"
        print(f"{s.name:12s} {s.role:8s} {s.state:11s} {s.pid or '-':>7} {','.join(map(str, s.ports)):18s} "
              f"{reg:10s} {mem:>8s}")
    return 0


def _cluster_state(run: RunDir, sts: list[Any]) -> str:
    """The recorded state, corrected by what is true now: a node down, or an owner that is gone."""
    st = run.state().get("cluster")
    if st != "ready":
        return str(st)
    down_nodes = [s.name for s in sts if s.state in ("down", "not-started")]
    if down_nodes:
        return f"degraded ({', '.join(down_nodes)} down)"
    if run.is_orphan():
        return "orphaned (the run that started it is gone: rmqchaos cluster down --all)"
    return "ready"


def cmd_cluster_down(a: argparse.Namespace) -> int:
    if a.all:
        targets = down.all_runs()
    else:
        targets = [open_cluster_run(a.run_dir)]
        down.run(targets[0], graceful=True)  # a person's cluster: its shutdown hooks run
    if not targets:
        print("nothing to stop")
    for run in targets:
        print(f"down: {run.path}")
    return 0


def cmd_node(a: argparse.Namespace) -> int:
    from cluster import get_backend
    run = open_cluster_run(a.run_dir)
    node = get_backend(run).node(a.node)
    if a.action == "kill":
        try:
            sig = parse_signal(a.signal)
        except ValueError as e:
            raise UserError(str(e), "use a name such as SIGKILL, TERM or STOP") from None
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
            run = create_run(a.scenario, a.run_dir, mode="detached")
        reap_orphans()
        res: Any = up.run(run)
    elif a.stage == "report":
        res = report.run(a.run_dir)
        print(Path(res["txt"]).read_text(), end="")
        return 0
    else:
        res = {"check": check.run, "load": load.run, "drain": drain.run, "analyze": analyze.run,
               "down": down.run}[a.stage](a.run_dir)
    print(json.dumps(res, default=str))
    return 0


def cmd_analyze(a: argparse.Namespace) -> int:
    res = analyze.run(a.run_dir, a.master)
    if res["counts"] is None:
        raise UserError(f"{a.run_dir} has no ledgers", "run a scenario with a `load:` section")
    if not res["complete"]:
        print(f"INCOMPLETE RUN: loss not verified: {'; '.join(res['incomplete_reasons'])}")
    print(json.dumps(res["counts"], indent=1))
    print(f"summary: {res['summary']}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    print(f"report: {report.combined(a.run_dirs, a.out, history=a.history or bool(a.db), db=a.db)['html']}")
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    s = load_scenario(a.scenario)
    print(f"{a.scenario}: valid (scenario {s.name!r}, {len(s.cluster.brokers)} broker group(s), "
          f"RocketMQ {s.cluster.version_label})")
    if a.resolved:
        from rmqchaos.spec import dump_scenario
        print(dump_scenario(s), end="")
    return 0


def cmd_compose(a: argparse.Namespace) -> int:
    from pipeline.compose import render
    files = render(a.scenario)
    out = Path(a.out)
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
        print(out / rel)
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
                                   "Each reads and writes only the run directory and prints its result as one "
                                   "JSON line (report: the text report); down always cleans up.")
    s.add_argument("stage", choices=["up", "check", "load", "drain", "down", "analyze", "report"])
    s.add_argument("run_dir", help="run directory")
    s.add_argument("--scenario", help="scenario file (stage up on a new run directory)")
    s.set_defaults(fn=cmd_stage)

    an = sub.add_parser("analyze", help="reconcile a run's ledgers with PySpark (analysis/summary.json)",
                        description="Classify every business key (ok, lost, duplicated, recovered, failed, "
                                    "indeterminate, undelivered_at_stop) and write RUN_DIR/analysis/summary.json, "
                                    "keys.parquet and series.parquet. A run whose consumers did not drain and stop "
                                    "cleanly is INCOMPLETE: its undelivered acked keys are not called lost. "
                                    "Spark runs local[*] unless --master says otherwise.")
    an.add_argument("run_dir")
    an.add_argument("--master", help="Spark master URL (default local[*], or $RMQCHAOS_SPARK_MASTER)")
    an.set_defaults(fn=cmd_analyze)
    rp = sub.add_parser("report", help="one self-contained HTML report from one or more analyzed runs",
                        description="Several runs are shown side by side (e.g. transientStorePoolEnable on vs off).")
    rp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rp.add_argument("--out", required=True, help="HTML file to write")
    rp.add_argument("--history", action="store_true",
                    help="with each scenario's trend over its earlier runs and what left its range (the run history)")
    rp.add_argument("--db", help="with --history: the run history file (default: $RMQCHAOS_HISTORY, else "
                                         "$RMQCHAOS_HOME/history.duckdb)")
    rp.set_defaults(fn=cmd_report)

    import bench
    from cli import explore, history, manual
    manual.add_parsers(sub)
    history.add_parsers(sub)
    explore.add_parsers(sub)
    bench.add_parsers(sub)

    af = sub.add_parser("airflow", help="the embedded Airflow that runs dags/ (127.0.0.1, SQLite under $RMQCHAOS_HOME)",
                        description="init: metadata DB and pool; start/stop/status: api-server, scheduler and "
                                    "dag-processor in the background; check: parse dags/ (import errors, "
                                    "deprecation warnings, parse time, owner/tags/docs/retries); test DAG: one "
                                    "DAG run in this process with dag.test() (what `make run` does)")
    af.add_argument("action", choices=["init", "start", "stop", "status", "check", "test"])
    af.add_argument("dag", nargs="?", help="test: the DAG id")
    af.add_argument("--conf", help="test: the DAG run's conf (Params) as JSON")
    af.set_defaults(fn=cmd_airflow)
    sp = sub.add_parser("spark", help="a Spark standalone cluster on 127.0.0.1 for `analyze --master`",
                        description="up: a master and workers from the pinned pyspark (spark-class), every listener "
                                    "on 127.0.0.1, logs and pids under $RMQCHAOS_HOME/spark; status; down: stop them "
                                    "by pid. Then `rmqchaos analyze RUN_DIR --master spark://127.0.0.1:17077`, or "
                                    "RMQCHAOS_SPARK_MASTER for every analyze (the DAGs' too).")
    sp.add_argument("action", choices=["up", "status", "down"])
    sp.add_argument("--workers", type=int, default=2, help="up: workers (default 2)")
    sp.add_argument("--cores", type=int, default=1, help="up: cores per worker (default 1)")
    sp.add_argument("--memory-mb", type=int, default=2048, help="up: memory per worker in MiB (default 2048)")
    sp.add_argument("--port", type=int, default=17077, help="up: the master's port (default 17077)")
    sp.add_argument("--webui-port", type=int, default=18180,
                    help="up: the master's web UI port; workers use the next ones (default 18180)")
    sp.set_defaults(fn=cmd_spark)
    co = sub.add_parser("compose", help="render docker-compose.yml and docker/*.conf from a scenario",
                        description="render: the containerized cluster of SCENARIO, from the same node plan the "
                                    "local backend starts (host networking, 127.0.0.1 listeners, per-node volumes, "
                                    "memory limits), written under --out (default: the current directory)")
    co.add_argument("action", choices=["render"])
    co.add_argument("scenario")
    co.add_argument("--out", default=".", help="directory to write docker-compose.yml and docker/ into")
    co.set_defaults(fn=cmd_compose)
    dk = sub.add_parser("docker", help="a Docker engine for the container parts: dockerd without a bridge",
                        description="up: start Debian's dockerd by pid (--bridge=none --iptables=false "
                                    "--ip6tables=false --ip-masq=false --ip-forward=false; unix socket only; data "
                                    "under .cache/docker); status; down: stop it by pid. DOCKER_HOST, when set, "
                                    "names the engine the container parts use instead.")
    dk.add_argument("action", choices=["up", "status", "down"])
    dk.set_defaults(fn=cmd_docker)
    im = sub.add_parser("image", help="build the RocketMQ image offline (Debian JRE + the Maven jars)",
                        description="build: rmqchaos/rocketmq:VERSION from a debootstrap'd Debian rootfs with "
                                    "openjdk-17-jre-headless (cached in .cache/image) and the pinned RocketMQ jars, "
                                    "imported with `docker import`; nothing is pulled")
    im.add_argument("action", choices=["build"])
    im.add_argument("--rocketmq-version", help="default: the version pinned in pom.xml")
    im.set_defaults(fn=cmd_image)
    v = sub.add_parser("validate", help="validate a scenario file")
    v.add_argument("scenario")
    v.add_argument("--resolved", action="store_true", help="print the scenario with every default filled in")
    v.set_defaults(fn=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)  # SIGTERM unwinds like Ctrl-C: what was started is stopped
    try:
        return int(a.fn(a) or 0)
    except UserError as e:
        print(f"rmqchaos: error: {e.line()}", file=sys.stderr)
        if e.detail:
            print(e.detail, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rmqchaos: interrupted: what was started is stopped, the ledgers are kept", file=sys.stderr)
        return 130
    except SystemExit as e:
        if isinstance(e.code, int) and e.code > 128:
            print(f"rmqchaos: terminated by {signal.Signals(e.code - 128).name}: what was started is stopped, "
                  "the ledgers are kept", file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())
