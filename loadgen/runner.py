"""Run the scenario's load with Locust, headless, as a library: in this process (`workers: 0`) or as a
Locust master with N worker processes. Importing this module imports Locust, which monkey-patches
the process for gevent: the platform therefore runs it in a process of its own
(`python -m loadgen RUN_DIR`, see loadgen/drain.py run_loadgen), but any Python program may call
`run_load(run_dir)` directly.

Locust's stats CSV (`load/locust_stats.csv`, `_stats_history.csv`, `_failures.csv`) and HTML report
(`load/locust.html`) land in the run directory, with `load/summary.json`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gevent
import locust  # noqa: F401  (monkey-patches before anything else binds sockets)
from locust import events
from locust.env import Environment
from locust.html import get_html_report
from locust.stats import CSV_STATS_INTERVAL_SEC, PERCENTILES_TO_REPORT, StatsCSVFileWriter, stats_history

from cluster import get_backend
from cluster.plan.nodes import addresses, free_port
from loadgen.context import LoadContext, LoadPlan
from loadgen.user import ProducerUser
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.machine.procs import spawn
from rmqchaos.run.rundir import RunDir
from rmqchaos.spec.timing import level_ms
from rmqchaos.machine.wait import poll_until

STOP_GRACE_S = 30.0  # after the deadline: in-flight attempts end within their timeouts


def plan_for(run: RunDir, worker: int, workers: int, deadline: float, ledger: bool | None,
             ledger_turns: float = 0.0) -> LoadPlan:
    s = run.scenario()
    if s.load is None:
        raise UserError(f"{run.path}: the scenario has no `load:` section", "add one (see scenarios/load-smoke.yaml)")
    return LoadPlan(run_dir=str(run.path), run_id=run.run_id, namesrv=get_backend(run).namesrv_addr,
                    source=addresses(s)["producers"], load=s.load,
                    worker=worker, workers=workers, deadline=deadline,
                    ledger=s.load.ledger if ledger is None else ledger, ledger_turns=ledger_turns,
                    level_delay_ms=level_ms(s, s.load.timer.delay_level) if s.load.timer and s.load.timer.delay_level
                    else 0)


def _env(ctx_plan: LoadPlan | None) -> Environment:
    grace = ctx_plan.load.timeout * 4 + 5 if ctx_plan else STOP_GRACE_S
    env = Environment(user_classes=[ProducerUser], events=events, stop_timeout=grace)
    if ctx_plan is not None:
        env.rmq_ctx = LoadContext(ctx_plan, env.events)  # type: ignore[attr-defined]
    return env


def _progress(env: Environment, t0: float, duration: float) -> None:
    while True:
        gevent.sleep(5.0)
        st = env.runner.stats.total  # type: ignore[union-attr]
        say(f"load: {time.time() - t0:5.1f}s/{duration:.0f}s  attempts {st.num_requests}  "
            f"failed {st.num_failures}  {st.current_rps:.0f}/s now  users {env.runner.user_count}")  # type: ignore[union-attr]


def _finish_reports(env: Environment, out: Path, csvw: StatsCSVFileWriter) -> dict[str, Any]:
    st = env.runner.stats.total  # type: ignore[union-attr]
    try:
        (out / "locust.html").write_text(get_html_report(env, show_download_link=False))
    except Exception as e:  # noqa: BLE001 - the report is a convenience; the ledgers are the record
        say(f"load: could not write the Locust HTML report: {e}")
    csvw.close_files()
    return {"locust_requests": st.num_requests, "locust_failures": st.num_failures,
            "locust_p50_ms": st.get_response_time_percentile(0.5), "locust_p99_ms": st.get_response_time_percentile(0.99)}


def run_load(run_dir: str | Path, ledger: bool | None = None, ledger_turns: float = 0.0) -> dict[str, Any]:
    """Run the load of the run directory's scenario to its end; returns the summary it writes.
    ledger_turns > 0 (bench ledger --alternate, one process only): the ledger on and off in turns of
    that many seconds, each turn's CPU and accepted count in the summary's `ledger_turns`."""
    run = RunDir.open(run_dir)
    load = run.scenario().load
    if load is None:
        raise UserError(f"{run.path}: the scenario has no `load:` section", "add one")
    out = run.path / "load"
    out.mkdir(exist_ok=True)
    t0 = time.time()
    deadline = t0 + load.duration
    workers = max(1, load.workers)
    say(f"load: {load.users} users, {load.rate:g} msg/s, {load.duration:g}s"
        + (f", at most {load.messages} messages" if load.messages else "")
        + f", policy {load.policy.kind}, topic {load.topic}"
        + (f", {load.workers} worker processes" if load.workers else ""))
    if load.workers == 0:
        plan = plan_for(run, 0, 1, deadline, ledger, ledger_turns)
        env = _env(plan)
        runner = env.create_local_runner()
    else:
        env = _env(None)
        port = free_port()
        runner = env.create_master_runner(master_bind_host="127.0.0.1", master_bind_port=port)
        procs = [_spawn_worker(run, i, workers, port, deadline, ledger) for i in range(workers)]
        poll_until(lambda: runner.worker_count >= workers, 60, f"{workers} Locust workers to connect",
                   interval=0.2, hint="see load/worker-*.log")
    csvw = StatsCSVFileWriter(env, PERCENTILES_TO_REPORT, str(out / "locust"), full_history=False)
    side = [gevent.spawn(csvw.stats_writer), gevent.spawn(stats_history, runner),
            gevent.spawn(_progress, env, t0, load.duration)]
    (out / "started").write_text(json.dumps({"start_s": time.time()}))  # the faults' clock starts here
    runner.start(load.users, load.spawn_rate)
    ctx: LoadContext | None = getattr(env, "rmq_ctx", None)
    if ctx is not None:
        done = lambda: ctx.finished  # noqa: E731
    else:  # master: workers' users stop themselves at the deadline or quota
        started = time.time()
        done = lambda: time.time() - started > 2 and runner.user_count == 0  # noqa: E731
    hard_end = deadline + load.timeout * 4 + STOP_GRACE_S
    while not done():
        if time.time() > hard_end:
            say("load: in-flight sends did not finish in time; stopping Locust anyway")
            break
        gevent.sleep(0.1)
    runner.quit()
    if ctx is not None:
        ctx.close()
    else:
        linger = load.transaction.linger if load.transaction else 0.0  # a worker waits for its check-backs
        for p in procs:
            try:
                p.wait(timeout=30 + linger)
            except subprocess.TimeoutExpired:
                p.kill()
    gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.3)  # one more pass of the CSV writer, over the final stats
    for g in side:
        g.kill()
    for f in (csvw.requests_flush, csvw.stats_history_flush, csvw.failures_flush, csvw.exceptions_flush):
        f()
    summary = {"start_s": t0, "end_s": time.time(), "deadline_s": deadline, "workers": load.workers,
               **_finish_reports(env, out, csvw), **({"ledger_turns": ctx.turns} if ctx is not None and ctx.turns else {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    say(f"load: done, {summary['locust_requests']} attempts ({summary['locust_failures']} not accepted) "
        f"in {summary['end_s'] - t0:.1f}s")
    return summary


def run_worker(run_dir: str, index: int, workers: int, port: int, deadline: float, ledger: bool | None) -> None:
    run = RunDir.open(run_dir)
    env = _env(plan_for(run, index, workers, deadline, ledger))
    runner = env.create_worker_runner("127.0.0.1", port)
    try:
        runner.greenlet.join()
    finally:
        env.rmq_ctx.close()  # type: ignore[attr-defined]


def _spawn_worker(run: RunDir, i: int, workers: int, port: int, deadline: float,
                  ledger: bool | None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "loadgen", str(run.path), "--worker", str(i), "--workers", str(workers),
           "--master-port", str(port), "--deadline", repr(deadline)]
    if ledger is not None:
        cmd += ["--ledger", "on" if ledger else "off"]
    # dies with this process; gevent-patched threads are greenlets, so PDEATHSIG holds
    return spawn(cmd, log_file=run.load_dir / f"worker-{i}.log", env=dict(os.environ), die_with_parent=True)


