"""The per-session outcome files (tests/_outcomes.py) and `make test-flaky`'s failure rates."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import _outcomes

pytestmark = pytest.mark.fast


def _session(d: Path, name: str, outcomes: dict[str, str], exitstatus: int = 1) -> Path:
    f = d / f"{name}.json"
    f.write_text(json.dumps({"exitstatus": exitstatus, "tests": {
        k: {"outcome": o, "duration_s": 1.0, "markers": []} for k, o in outcomes.items()}}))
    return f


def test_failure_rates_count_each_test_over_the_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [_session(tmp_path, "1", {"a": "passed", "b": "failed", "c": "error", "d": "skipped"}),
             _session(tmp_path, "2", {"a": "passed", "b": "failed", "c": "passed", "d": "skipped"}),
             _session(tmp_path, "3", {"a": "passed", "b": "passed", "c": "passed"}, exitstatus=0)]
    r = _outcomes.failure_rates(files)
    assert r["rows"] == [("b", 2, 3), ("c", 1, 3)] and r["tests"] == 4 and r["failures"] == 3
    assert r["failing_sessions"] == 2 and r["broken"] == []
    assert _outcomes.report(files) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["2/3", "67%", "b"] and out[1].split() == ["1/3", "33%", "c"]
    assert out[-1] == "total: 2 of 4 tests failed at least once in 3 sessions (3 failures; 2 of 3 had one)"


def test_no_failure_is_exit_0_and_an_interrupted_session_is_not(tmp_path: Path) -> None:
    ok = [_session(tmp_path, str(i), {"a": "passed", "b": "xfailed"}, exitstatus=0) for i in range(2)]
    assert _outcomes.report(ok) == 0
    broken = _session(tmp_path, "x", {"a": "passed"}, exitstatus=2)
    assert _outcomes.failure_rates([*ok, broken])["broken"] == [(str(broken), 2)]
    assert _outcomes.report([*ok, broken]) == 1 and _outcomes.report([]) == 1


def test_a_session_writes_each_tests_outcome_duration_and_markers(tmp_path: Path) -> None:
    (tmp_path / "test_planted.py").write_text(
        "import pytest, time\n"
        "@pytest.fixture\n"
        "def bad_teardown():\n    yield\n    raise RuntimeError('teardown')\n"
        "@pytest.mark.fast\ndef test_ok(): time.sleep(0.2)\n"
        "def test_fails(): assert False\n"
        "def test_errs(bad_teardown): pass\n"
        "@pytest.mark.long\ndef test_skipped(): pytest.skip('no')\n"
        "@pytest.mark.xfail(strict=True)\ndef test_xf(): assert False\n")
    runs = tmp_path / "runs"
    env = {**os.environ, _outcomes.ENV: str(runs),
           "PYTHONPATH": os.pathsep.join([str(Path(_outcomes.__file__).parent), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_outcomes", "-p", "no:cacheprovider",
                        "test_planted.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    [f] = runs.glob("*.json")
    assert f"outcomes: {f}" in r.stdout
    doc = json.loads(f.read_text())
    tests = {k.split("::")[1]: v for k, v in doc["tests"].items()}
    assert {k: v["outcome"] for k, v in tests.items()} == {
        "test_ok": "passed", "test_fails": "failed", "test_errs": "error", "test_skipped": "skipped", "test_xf": "xfailed"}
    assert tests["test_ok"]["markers"] == ["fast"] and tests["test_skipped"]["markers"] == ["long"]
    assert tests["test_ok"]["duration_s"] >= 0.2
    assert doc["exitstatus"] == 1 and doc["totals"]["tests"] == 5 and doc["totals"]["failed"] == 1
    assert doc["start"] <= doc["end"] and doc["commit"] == _outcomes._git("rev-parse", "HEAD")
    assert _outcomes.failure_rates([f])["rows"] == [("test_planted.py::test_errs", 1, 1),
                                                    ("test_planted.py::test_fails", 1, 1)]
