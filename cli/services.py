"""The services the platform starts and stops by PID, each on 127.0.0.1: a Spark standalone cluster,
a Docker engine (and the image it runs), the embedded Airflow (`rmqchaos spark|docker|image|airflow`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from rmqchaos.errors import UserError


def cmd_spark(a: argparse.Namespace) -> int:
    from analysis.ledgers import spark_cluster as spark

    def started() -> str:
        r = spark.up(a.workers, a.cores, a.memory_mb, a.port, a.webui_port)
        return (f"Spark master {r['master']} with {r['workers_alive']} worker(s), {r['cores']} core(s); web UI "
                f"{r['web_ui']}; analyze with `rmqchaos analyze RUN_DIR --master {r['master']}`; stop it with "
                "`rmqchaos spark down`")
    return _service(a.action, started, spark.status, spark.down, "no Spark cluster started by rmqchaos is running")


def _service(action: str, up: Callable[[], str], status: Callable[[], dict[str, Any]], down: Callable[[], list[str]],
             none: str) -> int:
    """up | status | down of a service the platform starts by pid (Spark, dockerd)."""
    if action == "up":
        print(up())
    elif action == "status":
        print(json.dumps(status(), indent=2))
    else:
        done = down()
        print("\n".join(done) if done else none)
    return 0


def cmd_airflow(a: argparse.Namespace) -> int:
    import orchestrator
    orchestrator.configure("WARNING" if a.action in ("check", "test") else None)
    if a.action == "init":
        orchestrator.init()
        print(f"embedded Airflow ready in {orchestrator.home()}")
    elif a.action == "start":
        r = orchestrator.start()
        print(f"Airflow UI: {r['url']}  (log in as {r['user']} / {r['password']}); "
              f"stop it with `rmqchaos airflow stop`")
    elif a.action == "stop":
        done = orchestrator.stop()
        print("\n".join(done) if done else "the embedded Airflow is not running")
    elif a.action == "status":
        print(json.dumps(orchestrator.status(), indent=2))
    elif a.action == "check":
        r = orchestrator.check_dags()
        print(json.dumps(r, indent=2))
        return 0 if not r["import_errors"] and not r["deprecations"] else 1
    elif a.action == "test":
        if not a.dag:
            raise UserError("`rmqchaos airflow test` needs a DAG id", "e.g. rocketmq_nightly_resilience")
        try:
            conf = json.loads(a.conf) if a.conf else None
        except ValueError as e:
            raise UserError(f"--conf is not JSON: {e}", "e.g. --conf '{\"rate\": 200}'") from None
        if conf is not None and not isinstance(conf, dict):
            raise UserError("--conf must be a JSON object", "e.g. --conf '{\"rate\": 200}'")
        r = orchestrator.test_dag(a.dag, conf)
        for k, v in sorted(r["returns"].items()):  # each run's text report, as `rmqchaos run` prints it
            if isinstance(v, dict) and v.get("txt") and Path(v["txt"]).is_file():
                print(Path(v["txt"]).read_text(), end="", flush=True)
        report = r["report"]
        failed = sorted(k for k, v in r["tasks"].items() if v in ("failed", "upstream_failed"))
        print(f"DAG {a.dag} run {r['run_id']}: {r['state']}"
              + (f"; failed tasks: {', '.join(failed)}" if failed else ""))
        if report:
            print(f"report: {report}")
        return 0 if r["state"] == "success" else 1
    return 0


def cmd_docker(a: argparse.Namespace) -> int:
    from cluster.container import engine

    def started(st: dict[str, Any]) -> str:
        return (f"Docker engine {st['server_version']} (API {st['api_version']}, dockerd pid {st['dockerd_pid']}) at "
                f"{st['docker_host']}, without a bridge; for the docker CLI: export DOCKER_HOST={st['docker_host']}; "
                "stop it with `rmqchaos docker down`")
    return _service(a.action, lambda: started(engine.up()), engine.status, engine.down,
                    "no dockerd started by rmqchaos is running")


def cmd_image(a: argparse.Namespace) -> int:
    from cluster.container import image
    r = image.build(a.rocketmq_version)
    print(f"built {r['image']} ({r['id']}, {r['size_mb']} MB) in {r['seconds']} s; "
          f"run it with `.venv/bin/docker-compose -f docker-compose.yml up -d` or `cluster.backend: docker`")
    return 0
