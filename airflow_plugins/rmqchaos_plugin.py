"""Airflow plugin of the embedded Airflow: serves the platform's reports from the api-server and puts
a "rmqchaos report" link on every task whose return value names a report.

- /rmqchaos/runs/<path under the runs directory>: a report (HTML or text) of a run, read-only, and
  nothing outside the runs directory ($RMQCHAOS_RUNS);
- the link: evaluated by the api-server from the task's return value (XCom `return_value`, a dict
  with "report": the report's path), so it works for every DAG task that returns one.
"""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

PREFIX = "/rmqchaos"
SUFFIXES = {".html": "text/html", ".txt": "text/plain", ".json": "application/json", ".png": "image/png"}


def runs_dir() -> Path:
    return Path(os.environ.get("RMQCHAOS_RUNS", Path(__file__).resolve().parent.parent / "runs")).resolve()


app = FastAPI(title="rmqchaos reports")


@app.get("/runs/{rel:path}")
def report(rel: str) -> FileResponse:
    base = runs_dir()
    f = (base / rel).resolve()
    if not f.is_relative_to(base) or f.suffix not in SUFFIXES or not f.is_file():
        raise HTTPException(status_code=404, detail="no such report")
    return FileResponse(f, media_type=SUFFIXES[f.suffix])


def report_url(path: str | None) -> str:
    """The link for a report path under the runs directory ("" for anything else: no link)."""
    if not path:
        return ""
    p = Path(path).resolve()
    base = runs_dir()
    if not p.is_relative_to(base):
        return ""
    root = os.environ.get("AIRFLOW__API__BASE_URL", "").rstrip("/")
    return f"{root}{PREFIX}/runs/{quote(str(p.relative_to(base)))}"


class RunReportLink(BaseOperatorLink):
    name = "rmqchaos report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from sqlalchemy import select

        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        with create_session() as session:
            value = session.scalar(select(XComModel.value).where(
                XComModel.dag_id == ti_key.dag_id, XComModel.run_id == ti_key.run_id,
                XComModel.task_id == ti_key.task_id, XComModel.map_index == ti_key.map_index,
                XComModel.key == "return_value"))
        value = XComModel.deserialize_value(SimpleNamespace(value=value))
        return report_url(value.get("report")) if isinstance(value, dict) else ""


class RmqchaosPlugin(AirflowPlugin):
    name = "rmqchaos"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "rmqchaos reports"}]
    global_operator_extra_links = [RunReportLink()]
