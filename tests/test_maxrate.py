"""The pre-release maximum-rate search (pipeline/workflows/maxrate.py, analysis/judge/loadstep.py): its Param, the
rule on planted step results (fast), and a short search on one small real cluster (make test)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.judge import loadstep
from pipeline.workflows import compare, maxrate
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir

S = {"start": 100.0, "factor": 2.0, "steps": 4, "step_duration": 5.0, "max_p99_send_ms": 50.0,
     "max_error_rate": 0.01}


def _m(achieved: float, p99: int | None = 10, error_rate: float | None = 0.0) -> dict:
    return {"attempts": 1000, "acked": 1000, "errors": 0, "busy": 0, "error_rate": error_rate,
            "achieved_rate": achieved, "p99_send_ms": p99}


@pytest.mark.fast
def test_the_param_takes_null_true_or_an_object_and_names_each_bad_value_on_one_line() -> None:
    assert maxrate.settings(None) is None and maxrate.settings(False) is None
    assert maxrate.settings(True) == {"start": 200, "factor": 2.0, "steps": 4, "step_duration": 10,
                                      "max_p99_send_ms": 200, "max_error_rate": 0.01}
    assert maxrate.settings({"start": 50, "steps": 2})["start"] == 50
    with pytest.raises(UserError) as e:
        maxrate.settings({"start": 0, "steps": 2.5, "factor": "x", "max_error_rate": 2, "speed": 1})
    line = e.value.line()
    assert "\n" not in line
    for part in ("max_rate_search.speed: not a setting", "max_rate_search.start: 0 is not from 1 to 100000",
                 "max_rate_search.steps: 2.5 is not a whole number", "max_rate_search.factor: 'x' is not a number",
                 "max_rate_search.max_error_rate: 2 is not from 0 to 1"):
        assert part in line
    with pytest.raises(UserError, match="max_rate_search 5 is not null, true or an object"):
        maxrate.settings(5)
    assert maxrate.rates(S) == [100, 200, 400, 800]


@pytest.mark.fast
def test_the_search_stops_at_the_first_break_and_reports_the_last_rate_that_held() -> None:
    planted = {100: _m(99), 200: _m(199), 400: _m(398, p99=80), 800: _m(790)}
    asked: list[float] = []

    def step(i: int, rate: float) -> dict:
        asked.append(rate)
        return planted[rate]
    r = maxrate.search("unused", S, step)
    assert asked == [100, 200, 400]  # not the fourth: the third broke
    assert (r["max_rate"], r["broke_at"]) == (200, 400)
    assert [s["held"] for s in r["steps"]] == [True, True, False]
    assert "p99 send 80 ms above 50 ms" in r["verdict"]


@pytest.mark.fast
def test_a_step_whose_achieved_rate_fell_short_did_not_hold_nor_one_with_errors() -> None:
    short = maxrate.judge_step(400, _m(300), S)  # p99 and errors fine, but 75 % of the asked rate
    assert not short["held"] and "below 90% of the asked 400: the load could not push it" in short["why"]
    assert maxrate.judge_step(400, _m(361), S)["held"]
    assert not maxrate.judge_step(100, _m(100, error_rate=0.02), S)["held"]
    assert not maxrate.judge_step(100, _m(0, p99=None, error_rate=1.0), S)["held"]
    none = maxrate.search("unused", S, lambda i, rate: _m(rate / 2))
    assert none["max_rate"] is None and none["verdict"].startswith("none held") and len(none["steps"]) == 1
    every = maxrate.search("unused", {**S, "steps": 2}, lambda i, rate: _m(rate))
    assert every["max_rate"] == 200 and every["broke_at"] is None
    assert every["verdict"] == "did not break within 2 steps: held up to 200 msg/s"


@pytest.mark.fast
def test_a_step_is_measured_from_its_own_ledger(tmp_path: Path) -> None:
    led = tmp_path / "ledgers"
    led.mkdir()
    recs = []
    for i in range(100):
        recs.append({"rec": "intent", "producer_id": "p", "attempt_id": i, "start_ms": 1000 + i * 10})
        if i < 98:  # two sends never answered
            busy = i < 1
            recs.append({"rec": "outcome", "producer_id": "p", "attempt_id": i, "start_ms": 1000 + i * 10,
                         "end_ms": 1000 + i * 10 + (i + 1), "outcome": "error" if busy else "ok",
                         "code": 2 if busy else None})
    (led / "send-p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    m = loadstep.measure(tmp_path, 1.0)
    assert (m["attempts"], m["acked"], m["errors"], m["busy"]) == (100, 97, 3, 1)
    assert m["error_rate"] == 0.03 and m["p99_send_ms"] == 98  # round trips 2..98 ms: the 97th of 97
    assert m["achieved_rate"] == round(97 / 1.068, 1)  # the ledger's window (1000..2068 ms) is longer than asked


@pytest.mark.fast
def test_the_sides_searches_run_after_the_rounds_and_show_on_the_compare_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RMQCHAOS_RUNS", str(tmp_path / "runs"))
    params = {"rate": 50, "duration": 5, "fault_set": "none", "max_rate_search": {"start": 100, "steps": 2}}
    runs = compare.prepare(params)
    assert maxrate.prepare({**params, "max_rate_search": None}, runs[-1]) == []
    with pytest.raises(UserError, match="max_rate_search.steps: 9 is not from 1 to 8"):
        compare.prepare({**params, "max_rate_search": {"steps": 9}})  # before any run is made
    assert "none was prepared" in compare.evaluate(runs, params, [])["problems"][-1]
    searches = maxrate.prepare(params, runs[-1])
    assert [RunDir.open(d).state()["after"] for d in searches] == [runs[-1], searches[0]]
    assert [RunDir.open(d).state()["prerelease"]["side"] for d in searches] == ["candidate", "baseline"]
    s = maxrate.settings(params["max_rate_search"])
    (Path(searches[0]) / maxrate.RESULT).write_text(json.dumps(
        maxrate.result([maxrate.judge_step(100, _m(100), s), maxrate.judge_step(200, _m(150), s)], s)
        | {"side": "candidate"}))
    v = compare.evaluate(runs, params, searches)
    assert [m["max_rate"] for m in v["max_rate"]] == [100]
    assert any("max-rate search on the baseline did not finish" in p for p in v["problems"]) and not v["passed"]
    page = compare.render(v)
    assert "Maximum rate (informational)" in page and "the load could not push it" in page


# long (~65 s: each step is an attached run with its own Locust start and ledger seal): make test has
# the search's rule on planted steps (above) and each step's load stage on real clusters (test_load.py)
@pytest.mark.long
def test_a_short_search_on_one_small_cluster_runs_its_steps_at_their_rates(tmp_path: Path) -> None:
    """The DAG's path without Airflow (maxrate.prepare → up → maxrate.run → down) on one broker:
    2 steps of 4 s at 50 and 100 msg/s under loose bounds. Each step ran at its asked rate (the
    count bound: at most rate x 4 messages) and the result agrees with the steps' own measures.
    Subnet 127.0.94.0/24, ports 22276 (namesrv) and 22211 (broker)."""
    import yaml

    from pipeline.stages import down, up
    from tests.helpers import live
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({
        "extends": str(Path(__file__).resolve().parents[1] / "scenarios" / "prerelease.yaml"),
        "cluster": {"subnet": "127.0.94.0/24", "namesrv": {"port": 22276, "jvm": {
            "heap_mb": 128, "options": ["-XX:TieredStopAtLevel=1"]}}, "ready_timeout": "60s", "stop_timeout": "2s",
            "broker_defaults": {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256,
                                        "options": ["-XX:TieredStopAtLevel=1"]}},
            "brokers": [{"name": "broker-a", "port": 22211}]}}))
    params = {"scenario": str(base), "fault_set": "none", "baseline": False,
              "max_rate_search": {"start": 50, "factor": 2, "steps": 2, "step_duration": 4,
                                  "max_p99_send_ms": 2000, "max_error_rate": 0.05}}
    [d] = maxrate.prepare(params, None)
    run = RunDir.open(d)
    try:
        up.run(run)
        r = maxrate.run(run)
    finally:
        down.run(run)
    assert not live(run.path)
    s = r["settings"]
    assert [st["rate"] for st in r["steps"]][:1] == [50] and len(r["steps"]) <= 2
    for st in r["steps"]:
        assert st["attempts"] >= st["acked"] > 0 and st["acked"] <= st["rate"] * 4  # the count bound held
        rerun = maxrate.judge_step(st["rate"], {k: st[k] for k in (
            "attempts", "acked", "errors", "busy", "error_rate", "achieved_rate", "p99_send_ms")}, s)
        assert rerun["held"] == st["held"]
        if st["held"]:
            assert st["achieved_rate"] >= 0.9 * st["rate"] and st["p99_send_ms"] <= 2000
    assert r == json.loads((run.path / maxrate.RESULT).read_text())
    assert r["max_rate"] == maxrate.result(r["steps"], s)["max_rate"]
    # on an idle small cluster these rates hold (a broken step is said with its reason, never silently)
    assert r["max_rate"] == 100 and r["broke_at"] is None, r["verdict"]
