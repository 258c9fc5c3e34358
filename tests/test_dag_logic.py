"""Pure logic behind the DAGs, no JVM: the DAG files as the dag-processor parses them, the pass
gates, the machine's cluster slot, the nightly matrix, the pre-release scenario overlay, the
failure-policy helper."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.workflows import gates, matrix, prerelease
from pipeline.stages import slot
from pipeline.runs import create_run
from pipeline.scenario import runs_after_failure
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import now_ms
from rmqchaos.spec import SpecError

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parent.parent


def test_dag_files_parse_cleanly_with_what_an_airflow_user_expects(tmp_path: Path) -> None:
    # a fresh interpreter: deprecation warnings raised while airflow and the DAGs import count too
    env = dict(os.environ, RMQCHAOS_HOME=str(tmp_path / "home"))
    r = subprocess.run([sys.executable, "-m", "cli", "airflow", "check"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["import_errors"] == {} and rep["deprecations"] == []
    assert set(rep["dags"]) == {"rocketmq_nightly_resilience", "rocketmq_prerelease_load_test", "rocketmq_loss_report",
                                "rocketmq_upstream_corpus", "rocketmq_weekly_explore"}
    for dag_id, d in rep["dags"].items():
        assert d["owner"] == "rmqchaos" and "rocketmq" in d["tags"] and d["doc_md"], dag_id
        assert d["default_retries"] >= 1, dag_id  # analysis and report tasks retry ...
        cluster_tasks = [t for t in d["task_retries"] if t.split(".")[-1] in ("up", "check", "load", "drain")]
        assert all(d["task_retries"][t] == 0 for t in cluster_tasks), d  # ... a cluster task never (a second load)
    assert all(s < 1.0 for s in rep["parse_s"].values()), rep["parse_s"]  # no heavy top-level work


def _analyzed_run(tmp_path: Path, counts: dict, send_p99: int | None, busy: int, complete: bool = True):
    run = create_run(REPO / "scenarios" / "prerelease.yaml", tmp_path / "run", mode="detached")
    run.analysis_dir.mkdir()
    run.summary_file.write_text(json.dumps({
        "complete": complete, "incomplete_reasons": [] if complete else ["consumer c0 did not stop cleanly"],
        "counts": {"lost": 0, "duplicated": 0, "attempts": 1000, **counts},
        "errors": {"by_code": {"0": 1000 - busy, "2": busy} if busy else {"0": 1000}},
        "latency_ms": {"send": {"p99": send_p99} if send_p99 is not None else {}}}))
    return run


def test_gates_pass_and_each_crossed_gate_names_its_limit_and_measured_value(tmp_path: Path) -> None:
    run = _analyzed_run(tmp_path, {"lost": 3, "duplicated": 1}, send_p99=143, busy=20)
    ok = gates.enforce(run, {"max_lost": 5, "max_duplicated": None, "max_p99_send_ms": 200, "max_busy_error_rate": 0.05})
    assert ok["passed"] and [g["gate"] for g in ok["gates"]] == ["max_lost", "max_p99_send_ms", "max_busy_error_rate"]
    with pytest.raises(UserError) as e:
        gates.enforce(run, {"max_lost": 0, "max_p99_send_ms": 0, "max_busy_error_rate": 0.01, "max_duplicated": 1})
    msg = e.value.line()
    assert "gate max_lost (acknowledged keys never delivered): limit 0 keys, measured 3 keys" in msg
    assert "gate max_p99_send_ms (p99 send latency of acknowledged sends): limit 0 ms, measured 143 ms" in msg
    assert "gate max_busy_error_rate (busy answers (code 2) per attempt): limit 0.01, measured 0.02" in msg
    assert "max_duplicated" not in msg  # 1 <= 1 passed
    with pytest.raises(UserError, match="unknown gate"):
        gates.evaluate(run, {"max_lots": 1})


def test_the_verdict_reads_the_stages_up_to_the_analysis_not_a_report_being_rebuilt(tmp_path: Path) -> None:
    run = _analyzed_run(tmp_path, {}, send_p99=100, busy=0)
    t = now_ms()
    for name in ("up", "check", "load", "drain", "down", "analyze"):
        run.set_stage(name, {"status": "ok", "start_ms": t, "end_ms": t, "error": None})
    # the loss-report DAG, triggered by the analysis, rebuilds the report while `gates` reads the state
    run.set_stage("report", {"status": "running", "start_ms": t, "pid": os.getpid()})
    assert matrix.failures(run) == [] and gates.judge(run, {"max_lost": 0})["passed"]
    run.set_stage("load", {"status": "failed", "start_ms": t, "end_ms": t, "error": "fault x failed"})
    with pytest.raises(UserError, match="the run failed: stage load failed: fault x failed"):
        gates.judge(run, {"max_lost": 0})


def test_an_unverified_run_or_an_unmeasured_value_never_passes(tmp_path: Path) -> None:
    run = _analyzed_run(tmp_path, {}, send_p99=None, busy=0, complete=False)
    v = gates.evaluate(run, {"max_lost": 100, "max_p99_send_ms": 1000})
    assert not v["passed"] and [g["passed"] for g in v["gates"]] == [True, False]
    with pytest.raises(UserError, match="run incomplete, loss not verified: consumer c0 did not stop cleanly"):
        gates.enforce(run, {"max_lost": 100})


def test_the_cluster_slot_is_held_by_one_run_until_its_down(tmp_path: Path) -> None:
    a = create_run(REPO / "scenarios" / "control.yaml", tmp_path / "a", mode="detached")
    b = create_run(REPO / "scenarios" / "control.yaml", tmp_path / "b", mode="detached")
    assert slot.acquire(a) and slot.acquire(a)  # taken, and taken again by its holder
    assert not slot.acquire(b)  # a has not started yet, within STALE_S: still a's
    a.set_stage("up", {"status": "running", "pid": os.getpid(), "starttime": None})
    assert not slot.acquire(b)
    a.set_stage("up", {"status": "ok"})
    a.register()  # its cluster is up
    assert not slot.acquire(b)
    a.set_stage("down", {"status": "ok"})  # down ended (and releases the slot itself, see below)
    assert slot.acquire(b) and slot.holder()["run"] == str(b.path)
    slot.release(a)  # not the holder: nothing changes
    assert slot.holder()["run"] == str(b.path)
    slot.release(b)
    assert slot.holder() is None


def test_a_holder_that_failed_to_come_up_or_never_started_frees_the_slot(tmp_path: Path) -> None:
    a = create_run(REPO / "scenarios" / "control.yaml", tmp_path / "a", mode="detached")
    b = create_run(REPO / "scenarios" / "control.yaml", tmp_path / "b", mode="detached")
    assert slot.acquire(a)
    a.set_stage("up", {"status": "failed"})  # `up` cleaned up after itself; no `down` will run
    assert slot.acquire(b)
    a2 = create_run(REPO / "scenarios" / "control.yaml", tmp_path / "a2", mode="detached")
    slot._lease().write_text(json.dumps({"run": str(a2.path), "since_ms": now_ms() - 60_000}))
    assert not slot.acquire(b)  # took it a minute ago and has not started yet: still its
    slot._lease().write_text(json.dumps({"run": str(a2.path), "since_ms": now_ms() - int(slot.STALE_S * 1000) - 1}))
    assert slot.acquire(b)  # took it and never started: free after STALE_S
    slot._lease().write_text(json.dumps({"run": str(tmp_path / "gone"), "since_ms": now_ms()}))
    assert slot.acquire(b)  # its run directory is gone


def test_the_nightly_matrix_lists_the_headline_and_rejects_a_bad_entry(tmp_path: Path) -> None:
    names = [Path(p).name for p in matrix.scenarios()]
    assert {"control.yaml", "oom-tsp-on.yaml", "oom-tsp-off.yaml"} <= set(names)
    (tmp_path / "m.yaml").write_text("scenarios: [nope.yaml]\n")
    with pytest.raises(UserError, match="nope.yaml"):
        matrix.scenarios(tmp_path / "m.yaml")
    (tmp_path / "m.yaml").write_text("scenario: []\n")
    with pytest.raises(UserError, match="must be a non-empty list"):
        matrix.scenarios(tmp_path / "m.yaml")


def test_the_parts_of_a_matrix_cover_it_once_in_near_equal_shares_and_a_bad_part_is_one_line() -> None:
    whole = matrix.scenarios()
    parts = [matrix.scenarios(part=f"{k}/4") for k in range(1, 5)]
    assert sorted(p for part in parts for p in part) == sorted(whole) and len(set(whole)) == len(whole)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert parts[1][:2] == [whole[1], whole[5]]  # round robin: the slow kinds, listed together, spread out
    assert matrix.scenarios(part="1/1") == whole
    for bad in ("0/4", "5/4", "2", "a/b", "1/0", "-1/2"):
        with pytest.raises(UserError, match="part must be k/n"):
            matrix.scenarios(part=bad)


def test_make_run_is_the_quick_matrix_with_one_run_of_each_kind_of_finding() -> None:
    import re
    mk = (REPO / "Makefile").read_text()
    run_recipe = mk.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^MATRIX \?= scenarios/quick\.yaml$", mk, re.M) and '"matrix": "$(MATRIX)"' in run_recipe
    nightly_recipe = mk.split("\nnightly:", 1)[1].split("\n\n", 1)[0]
    assert '"matrix": "scenarios/nightly.yaml"' in nightly_recipe and '"part": "$(PART)"' in nightly_recipe
    assert re.search(r"^PART \?= 1/1$", mk, re.M)  # the whole matrix unless a part is asked for
    quick = [Path(p).name for p in matrix.scenarios("scenarios/quick.yaml")]
    assert {"control.yaml", "oom-tsp-on.yaml", "oom-tsp-off.yaml"} <= set(quick)  # the control and the TSP pair
    assert any(n.startswith("shared-host") for n in quick)  # busy answers on a noisy host
    assert {"retry-flood.yaml", "retry-pileup.yaml", "flush-timeout.yaml"} & set(quick)  # a RocketMQ-internal fault
    assert len(quick) <= 6 and set(quick) <= {Path(p).name for p in matrix.scenarios()}  # a part of the nightly


def test_prerelease_params_are_laid_over_the_base_and_validated_line_precisely(tmp_path: Path) -> None:
    run = prerelease.create({"rate": 120, "duration": 40, "message_size": 2048, "policy": "no_retry",
                             "fault_set": "oom_kill_broker_a", "broker_config": {"flushDiskType": "SYNC_FLUSH"}},
                            tmp_path / "run")
    s = run.scenario()
    assert (s.load.rate, s.load.duration, s.load.message_size, s.load.policy.kind) == (120, 40, 2048, "no_retry")
    assert s.cluster.broker_defaults.config["flushDiskType"] == "SYNC_FLUSH"
    assert [(f.kind, f.target, f.at) for f in s.faults] == [("oom_kill", "broker-a", 13.3)]
    assert run.state()["mode"] == "detached"  # its JVMs outlive the task that starts them
    with pytest.raises(SpecError, match=r"run2\.scenario\.yaml:\d+: cluster\.broker_defaults\.config\.flushDiskType"):
        prerelease.create({"broker_config": {"flushDiskType": "SYNC_FLUSHH"}}, tmp_path / "run2")
    with pytest.raises(UserError, match="fault set 'chaos' is not known"):
        prerelease.create({"fault_set": "chaos"}, tmp_path / "run3")


def test_only_drain_still_runs_after_a_failed_load() -> None:
    assert runs_after_failure("drain", "load")
    assert not runs_after_failure("drain", "check") and not runs_after_failure("load", "check")


def test_bad_dag_input_gets_one_clear_line_and_starts_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, RMQCHAOS_HOME=str(tmp_path / "home"), RMQCHAOS_RUNS=str(tmp_path / "runs"))
    cases = [
        (["rocketmq_prerelease_load_test", "--conf", '{"rate": -1}'],
         "rmqchaos: error: Invalid input for param rate: -1 is less than or equal to the minimum of 0"),
        (["rocketmq_prerelease_load_test", "--conf", "{rate"], "rmqchaos: error: --conf is not JSON"),
        (["no_such_dag"], "rmqchaos: error: no DAG 'no_such_dag'"),
    ]
    for args, line in cases:
        r = subprocess.run([sys.executable, "-m", "cli", "airflow", "test", *args], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        errors = [x for x in r.stderr.splitlines() if x.startswith("rmqchaos: error:")]
        assert len(errors) == 1 and errors[0].startswith(line), r.stderr[-2000:]
    assert not (tmp_path / "runs").exists()  # nothing was started
    with socket.socket() as busy:  # the api-server's port taken by someone else
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "cli", "airflow", "start"], cwd=REPO, capture_output=True, text=True,
                           env={**env, "RMQCHAOS_AIRFLOW_PORT": str(port)}, timeout=300)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"rmqchaos: error: port {port} is in use: set RMQCHAOS_AIRFLOW_PORT to a free port"], r.stderr
