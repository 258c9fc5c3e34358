"""The embedded Airflow: one Airflow 3 on this machine, with the project's dags/, its metadata in
SQLite under $RMQCHAOS_HOME/airflow, every listener on 127.0.0.1 (airflow_home.py: settings,
init, start/stop/status, dag.test(), the REST API; its docstring says why each listener is as it is).
"""
from orchestrator.airflow_home import (api, check_dags, configure, home, init, start, status, stop, test_dag, token, url,
                                       wait_dag_run)

__all__ = ["api", "check_dags", "configure", "home", "init", "start", "status", "stop", "test_dag", "token", "url",
           "wait_dag_run"]
