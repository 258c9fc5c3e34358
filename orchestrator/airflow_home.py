"""The embedded Airflow's home: one Airflow 3 on this machine, with the project's dags/, its metadata in
SQLite under $RMQCHAOS_HOME/airflow, every listener on 127.0.0.1.

- `configure()` puts the environment in place (before anything imports airflow);
- `init()` migrates the metadata DB and creates the cluster pool (idempotent);
- `start()` / `stop()` / `status()` run api-server, scheduler and dag-processor as recorded processes;
- `test_dag()` runs one DAG in this process with `dag.test()`, the same tasks a scheduler would run.

Listeners: the api-server binds to 127.0.0.1 ([api] host). The scheduler's worker log server
binds to every interface with no setting for its host (airflow/utils/serve_logs/core.py: host=""),
so it is not started (--skip-serve-logs): with LocalExecutor the api-server reads the task logs from
the same disk. No triggerer (no deferrable task) and no scheduler health-check server (off by default).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcessLog, alive, record_spawn, send, spawn, starttime, stop as stop_pid
from rmqchaos.machine.procs import wait_gone as pids_gone
from rmqchaos.progress import say
from rmqchaos.machine.wait import poll_until

POOL = "rmqchaos_cluster"  # the DAGs' cluster tasks run in it (dags/rmqchaos_tasks.py)
USER = "admin"
DAGS = paths.REPO / "dags"
PLUGINS = paths.REPO / "airflow_plugins"
COMPONENTS = {  # name -> `airflow` arguments
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}


def port() -> int:
    """The api-server's port: clear of the proxy's 8080 and of every port the scenarios use."""
    return int(os.environ.get("RMQCHAOS_AIRFLOW_PORT", "28080"))


def home() -> Path:
    return paths.state_home() / "airflow"


def url(path: str = "") -> str:
    return f"http://127.0.0.1:{port()}{path}"


def env() -> dict[str, str]:
    """The Airflow settings of the embedded instance (AIRFLOW__SECTION__KEY overrides airflow.cfg)."""
    h = home()
    pythonpath = os.pathsep.join([str(paths.REPO), str(DAGS), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {
        "AIRFLOW_HOME": str(h),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": "regexp",  # dags/.airflowignore (glob warns, via pathspec)
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",  # 2 cores: analyses in parallel, the cluster tasks one at a time
        # a new DAG waits to be switched on (else the scheduler starts the nightly matrix at once)
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(h / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{h / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port()),
        "AIRFLOW__API__WORKERS": "2",
        # 2 cores under load and SQLite: the default 5 s made a task's call time out while JVMs started
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__API__BASE_URL": url(),
        # tasks report to the api-server's execution API: the same host and port it listens on
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": url("/execution/"),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(h / "logs"),
        "PYTHONPATH": pythonpath,
        # the runs of the DAGs land where `rmqchaos run` puts them
        "RMQCHAOS_HOME": str(paths.state_home()),
        "RMQCHAOS_RUNS": str(paths.runs_dir()),
    }


def configure(log_level: str | None = None) -> None:
    """This process's environment for Airflow; must run before anything imports airflow.
    log_level: Airflow's own logging in this process (`check` and `test` use WARNING: the platform's
    progress lines say what happens, Airflow's INFO lines would bury them; errors still show)."""
    if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(home()):
        raise UserError("airflow was imported before the embedded Airflow was configured", "a bug: report it")
    home().mkdir(parents=True, exist_ok=True)
    os.environ.update(env())
    if log_level:
        os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = os.environ.get("RMQCHAOS_AIRFLOW_LOG_LEVEL", log_level)
    for p in (str(paths.REPO), str(DAGS)):
        if p not in sys.path:
            sys.path.insert(0, p)
    pw = home() / "passwords.json"
    if not pw.exists():  # SimpleAuthManager's password file, made here so `start` can print it
        pw.write_text(json.dumps({USER: secrets.token_urlsafe(12)}))
        pw.chmod(0o600)


def password() -> str:
    return json.loads((home() / "passwords.json").read_text())[USER]


def _airflow(*args: str, timeout: float = 600) -> str:
    exe = Path(sys.executable).with_name("airflow")
    r = subprocess.run([str(exe), *args], env={**os.environ, **env()}, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise UserError(f"`airflow {' '.join(args)}` failed (exit {r.returncode})", "see below", detail=tail)
    return r.stdout


def init() -> None:
    """Metadata DB migrated and the cluster pool (one slot) in place; fast when already done."""
    configure()
    marker = home() / "initialized"
    from importlib.metadata import version
    want = f"apache-airflow {version('apache-airflow')}"
    if marker.exists() and marker.read_text() == want and (home() / "airflow.db").is_file():
        return
    say(f"initialising the embedded Airflow in {home()} (metadata DB, pool {POOL})")
    _airflow("db", "migrate")
    _airflow("pools", "set", POOL, "1", "rmqchaos: the machine's one RocketMQ cluster")
    marker.write_text(want)


def _log() -> ProcessLog:
    return ProcessLog(home() / "processes.jsonl")


def _running() -> dict[str, tuple[int, int]]:
    """Components started here and still alive: name -> (pid, start time)."""
    return _log().running()


def _healthy() -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url("/api/v2/monitor/health"), timeout=3) as r:
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def start(timeout: float = 180) -> dict[str, Any]:
    """api-server, scheduler and dag-processor in the background (their output in $AIRFLOW_HOME/logs)."""
    running = _running()
    if running:
        raise UserError(f"the embedded Airflow is already running ({', '.join(running)})",
                        f"open {url()} or stop it with `rmqchaos airflow stop`")
    from cluster.plan.nodes import port_in_use  # noqa: PLC0415 - the one port probe
    if port_in_use(port()):
        raise UserError(f"port {port()} is in use", "set RMQCHAOS_AIRFLOW_PORT to a free port")
    init()
    exe = Path(sys.executable).with_name("airflow")
    for name, args in COMPONENTS.items():
        cmd = [str(exe), *args]
        p = spawn(cmd, cwd=home(), env={**os.environ, **env()}, log_file=home() / "logs" / f"{name}.log",
                  new_session=True)
        record_spawn(_log(), name, p, cmd)
    say(f"waiting for the Airflow api-server on {url()}")
    try:
        poll_until(_healthy, timeout, "the Airflow api-server", interval=1.0, check=_check_started,
                   hint=f"see {home() / 'logs'}", progress_every=15, progress=lambda: "still waiting for the api-server")
    except BaseException:
        stop()
        raise
    return {"url": url(), "user": USER, "password": password(), "components": list(_running())}


def _check_started() -> None:
    gone = [n for n in COMPONENTS if n not in _running()]
    if gone:
        raise UserError(f"airflow {gone[0]} exited while starting", f"see {home() / 'logs' / (gone[0] + '.log')}")


def stop() -> list[str]:
    """End every component this platform started (by recorded pid: SIGTERM, SIGKILL after 30 s), then
    whatever is left of its session (`_session`), the scheduler first and the api-server last.

    On SIGTERM the scheduler's LocalExecutor.end() puts a None on the workers' queue for each worker
    it finds alive, then joins each with no timeout. A None goes to whichever worker reads first: an
    idle worker that takes an early one and exits before the loop reaches it is skipped, one None
    short, and the last worker back from its task waits on the queue for ever (Airflow 3.3.2,
    airflow/executors/local_executor.py). The scheduler then hangs in join() until its SIGKILL, and
    that worker lives on under init: forked, it keeps the scheduler's SIGTERM handler (a no-op
    outside the main process: SchedulerJobRunner._exit_gracefully), ignores SIGINT (_run_worker) and
    holds the queue's write end itself, so its read never ends. The workers and their task processes
    stay in the scheduler's session: found there, they are ended. The api-server goes last so that
    tasks still running can report their end (stopped first, it left their supervisors retrying the
    execution API for a minute and more, which held end() as well). A component that died without an
    exit record is swept too."""
    done = []
    log = _log()
    ended = log.exited()
    order = ("scheduler", "dag-processor", "api-server")
    for r in sorted((r for r in log.starts() if (r.node, r.pid) not in ended),
                    key=lambda r: order.index(r.node) if r.node in order else -1):
        name = r.node
        how = stop_pid(r.pid, r.starttime, 30) if alive(r.pid, r.starttime) else "already-exited"
        left = _session(r.pid, r.starttime)
        for p, s in left:
            send(p, s, signal.SIGTERM)  # a task process ends as on a scheduler's kill; a worker ignores it
        if left and not pids_gone(left, 10):
            for p, s in left:
                send(p, s, signal.SIGKILL)
            pids_gone(left, 10)
        log.record_exit(name, r.pid, how)
        if how != "already-exited" or left:
            done.append(f"{name} pid {r.pid}: {how}" + (f", {len(left)} more of its processes ended" if left else ""))
    return done


def _session(leader: int, since: int) -> list[tuple[int, int]]:
    """(pid, start time) of the live processes of the session that `leader`, started at `since`,
    began (spawn(new_session=True)), once the leader has exited: everything a component starts stays
    in it (the LocalExecutor's workers; their task processes move to process groups of their own,
    not to another session). The kernel does not reuse a pid while a session of that id has a member,
    so a process of that session id is one of them, unless the pid now belongs to another process
    (the session had emptied): then none is."""
    if starttime(leader) not in (None, since):
        return []
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == leader:
            continue
        try:
            stat = (d / "stat").read_text()
            rest = stat[stat.rindex(")") + 2:].split()
            if rest[0] not in ("Z", "X") and int(rest[3]) == leader and int(rest[19]) >= since:
                out.append((int(d.name), int(rest[19])))
        except (OSError, ValueError, IndexError):
            continue
    return out


def status() -> dict[str, Any]:
    return {"url": url(), "running": {n: p for n, (p, _) in _running().items()}, "health": _healthy()}


def token() -> str:
    """A JWT for the REST API (SimpleAuthManager's POST /auth/token)."""
    body = json.dumps({"username": USER, "password": password()}).encode()
    req = urllib.request.Request(url("/auth/token"), data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["access_token"]


def api(method: str, path: str, body: dict[str, Any] | None = None, tok: str | None = None) -> Any:
    """One call of the REST API (v2), JSON in and out."""
    req = urllib.request.Request(url(path), method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {tok or token()}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


def check_dags() -> dict[str, Any]:
    """Parse dags/ as the dag-processor does and say what an Airflow user would check: import errors,
    deprecation warnings, each file's parse time, each DAG's owner, tags, docs and retry policy.
    Must run in a process that has not imported airflow yet (the warnings raised on import count)."""
    import warnings
    configure()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from airflow.dag_processing.dagbag import BundleDagBag
        bag = BundleDagBag(dag_folder=str(DAGS), bundle_path=DAGS, bundle_name="dags-folder")
    deprecations = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught
                    if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning))]
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "owner": dag.owner, "tags": sorted(dag.tags), "doc_md": bool(dag.doc_md and dag.doc_md.strip()),
            "default_retries": (dag.default_args or {}).get("retries"),
            "task_retries": {t.task_id: t.retries for t in dag.tasks},
            "tasks": len(dag.tasks),
        }
    return {"import_errors": dict(bag.import_errors), "deprecations": deprecations, "dags": dags,
            "parse_s": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats}}


@contextmanager
def _stoppable() -> Iterator[None]:
    """Ctrl-C stops the whole DAG run, not only its running task (SIGTERM too until the first task:
    Airflow's in-process task runner then sets its own SIGTERM handler): the signal interrupts
    that task (it unwinds as `rmqchaos run` does) and every later stage but `down` refuses at once
    (pipeline.stages.stage.request_stop), so `dag.test` ends within seconds. Whatever way it ends, a cluster
    this process started and did not bring down is brought down (only those registered meanwhile:
    a test's shared cluster of the same process stays up); then the interrupt goes on up."""
    from pipeline.stages import down
    from pipeline.stages.stage import request_stop, reset_stop, stop_requested

    def on_signal(signum: int, frame: Any) -> None:
        if stop_requested() is None:
            say(f"{signal.Signals(signum).name}: stopping the DAG run (every cluster it started is stopped)")
        request_stop(f"the DAG run was stopped ({signal.Signals(signum).name})")
        raise KeyboardInterrupt
    before = down.registered()
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException:
        down.owned(but=before)
        raise
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        stopped = stop_requested()
        reset_stop()  # the next DAG run of this process (a test's) starts afresh
    if stopped:
        down.owned(but=before)
        raise KeyboardInterrupt


def test_dag(dag_id: str, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """One DAG run in this process with `dag.test()` on the embedded metadata DB: the DAG's tasks in
    dependency order, as a scheduler would run them. Returns the run's state and each task's state."""
    init()
    from airflow.dag_processing.dagbag import BundleDagBag
    bag = BundleDagBag(dag_folder=str(DAGS), bundle_path=DAGS, bundle_name="dags-folder")
    if bag.import_errors:
        f, err = next(iter(bag.import_errors.items()))
        raise UserError(f"DAG file {f} does not import", "see below", detail=err)
    if dag_id not in bag.dags:
        raise UserError(f"no DAG {dag_id!r}", f"DAGs: {', '.join(sorted(bag.dags))}")
    dag = bag.dags[dag_id]
    import warnings
    # dag.test() talks to the execution API in process through starlette's TestClient, which warns
    # about its own httpx dependency (Airflow's internals, not an import of ours or of the DAGs)
    warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient` is deprecated")
    say(f"running DAG {dag_id} with dag.test() (metadata in {home()})")
    from airflow.sdk.exceptions import ParamValidationError
    try:
        with _stoppable():
            dr = dag.test(run_conf=conf or None)
    except ParamValidationError as e:  # a Param out of its schema: one line, nothing started
        raise UserError(str(e).splitlines()[0], f"see the Params of {dag_id} (rmqchaos airflow check)") from None
    def name(task_id: str, map_index: int) -> str:
        return task_id + (f"[{map_index}]" if map_index >= 0 else "")
    tis = {name(ti.task_id, ti.map_index): str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id, key="return_value")).all()
        returns = {name(x.task_id, x.map_index): XComModel.deserialize_value(x) for x in rows}
    # the DAG run's report: that of a last task or of a task just before one (the nightly's combined
    # report before its verdict, the pre-release run's report before its gates)
    reports = {k: v["report"] for k, v in returns.items() if isinstance(v, dict) and v.get("report")}
    near_end = [t.task_id for t in dag.leaves] + [u for t in dag.leaves for u in sorted(t.upstream_task_ids)]
    report = next((reports[t] for t in near_end if t in reports), None)
    return {"dag_id": dag_id, "run_id": dr.run_id, "state": str(getattr(dr.state, "value", dr.state)),
            "tasks": tis, "returns": returns, "report": report}


def wait_dag_run(dag_id: str, run_id: str, timeout: float, tok: str | None = None) -> dict[str, Any]:
    """Poll a DAG run through the REST API until it ends; returns its last record."""
    last: dict[str, Any] = {}

    def ended() -> bool:
        nonlocal last
        last = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", tok=tok)
        return last.get("state") in ("success", "failed")
    poll_until(ended, timeout, f"DAG run {run_id}", interval=3.0, progress_every=30,
               progress=lambda: f"DAG run {run_id}: {last.get('state')}")
    return last


def wait_gone(timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _running() and time.monotonic() < deadline:
        time.sleep(0.2)
