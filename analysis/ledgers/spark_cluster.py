"""A Spark standalone cluster on this machine, from the pinned pyspark: one master and N workers
started with `spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`, every
listener on 127.0.0.1 (SPARK_LOCAL_IP also binds the web UIs, Spark's WebUI falls back to 0.0.0.0
without it), logs and pids under $RMQCHAOS_HOME/spark, stopped by PID. `rmqchaos analyze --master
spark://127.0.0.1:PORT` (or RMQCHAOS_SPARK_MASTER, which the DAGs' analyze task reads too) runs the
same job on it; the executors read the ledgers from the same disk.

Ports: master 17077 (web UI 18180), workers' web UIs 18181.. : clear of Spark's own defaults (7077,
8080, which a user's Spark may hold), of Airflow's 28080 and of every port the scenarios use.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cluster.plan.jvm import find_java, java_home
from cluster.plan.nodes import port_in_use
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcessLog, record_spawn, spawn, stop as stop_pid
from rmqchaos.progress import say
from rmqchaos.machine.wait import poll_until

PORT, WEBUI_PORT = 17077, 18180


def home() -> Path:
    return paths.state_home() / "spark"


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def _log() -> ProcessLog:
    return ProcessLog(home() / "processes.jsonl")


def _running() -> dict[str, tuple[int, int]]:
    """Processes started here and still alive: name -> (pid, start time)."""
    return _log().running()


def _state() -> dict[str, Any]:
    f = home() / "cluster.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def master_url() -> str | None:
    st = _state()
    return f"spark://127.0.0.1:{st['port']}" if st and "master" in _running() else None


def _env() -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(spark_home()), "JAVA_HOME": java_home(), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(home() / "logs"), "SPARK_WORKER_DIR": str(home() / "work"),
            # no REST submission server (port 6066): applications come through the master's RPC port
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # the executors' Python workers: this environment's interpreter, with the repository importable
            "PYSPARK_PYTHON": sys.executable, **paths.module_env()}


def _master_json(webui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=3) as r:
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def up(workers: int = 2, cores: int = 1, memory_mb: int = 2048, port: int = PORT, webui_port: int = WEBUI_PORT,
       timeout: float = 120) -> dict[str, Any]:
    """Start the master and `workers` workers of `cores` cores each; returns once all registered."""
    if _running():
        raise UserError(f"a Spark cluster started by rmqchaos is already running ({', '.join(_running())})",
                        "use it (`rmqchaos spark status`) or stop it with `rmqchaos spark down`")
    if workers < 1 or cores < 1 or memory_mb < 512:
        raise UserError(f"invalid Spark cluster size: {workers} worker(s) of {cores} core(s), {memory_mb} MiB",
                        "give at least 1 worker of 1 core and 512 MiB")
    for p in (port, webui_port, *range(webui_port + 1, webui_port + 1 + workers)):
        if port_in_use(p):
            raise UserError(f"port {p} is in use", "pass --port / --webui-port with free ports")
    find_java()
    h = home()
    h.mkdir(parents=True, exist_ok=True)
    (h / "cluster.json").write_text(json.dumps({"port": port, "webui_port": webui_port, "workers": workers,
                                                "cores": cores, "memory_mb": memory_mb}) + "\n")
    spark_class = str(spark_home() / "bin" / "spark-class")
    cmds = {"master": [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                       "--port", str(port), "--webui-port", str(webui_port)]}
    for i in range(workers):
        cmds[f"worker-{i + 1}"] = [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                   "--host", "127.0.0.1", "--cores", str(cores), "--memory", f"{memory_mb}m",
                                   "--webui-port", str(webui_port + 1 + i), "--work-dir", str(h / "work")]
    try:
        for name, cmd in cmds.items():  # spark-class execs the JVM: the recorded pid is the JVM's
            record_spawn(_log(), name, spawn(cmd, cwd=h, env=_env(), log_file=h / "logs" / f"{name}.log",
                                             new_session=True), cmd)
        say(f"waiting for the Spark master on 127.0.0.1:{port} and {workers} worker(s)")

        def started() -> None:
            gone = [n for n in cmds if n not in _running()]
            if gone:
                raise UserError(f"spark {gone[0]} exited while starting", f"see {h / 'logs' / (gone[0] + '.log')}")

        poll_until(lambda: (m := _master_json(webui_port)) and m.get("aliveworkers") == workers and m, timeout,
                   f"{workers} Spark worker(s) to register", interval=0.5, check=started, hint=f"see {h / 'logs'}")
    except BaseException:
        down()
        raise
    return status()


def status() -> dict[str, Any]:
    st, running = _state(), _running()
    m = _master_json(st["webui_port"]) if st and "master" in running else None
    return {"master": master_url(), "web_ui": f"http://127.0.0.1:{st['webui_port']}" if m else None,
            "running": {n: p for n, (p, _) in running.items()},
            "workers_alive": m.get("aliveworkers") if m else None, "cores": m.get("cores") if m else None,
            "applications": [a.get("name") for a in (m or {}).get("activeapps", [])], "logs": str(home() / "logs")}


def down() -> list[str]:
    """End every process started here (workers first), by recorded pid: SIGTERM, then SIGKILL."""
    done = []
    for name, (pid, st) in sorted(_running().items(), key=lambda x: x[0] == "master"):
        how = stop_pid(pid, st, 20)
        _log().record_exit(name, pid, how)
        done.append(f"{name} pid {pid}: {how}")
    return done
