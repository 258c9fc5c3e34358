"""Every pytest session's outcomes, one JSON file per session, and the failure rates over several.

The recorder (registered by tests/conftest.py, or `-p _outcomes`) writes $RMQCHAOS_TEST_RUNS/<UTC start>-<pid>.json
(default .cache/test-runs/, gitignored) at the session's end:
  {"start": ISO, "end": ISO, "wall_s": s, "commit": sha, "dirty": bool, "args": [...],
   "exitstatus": int, "collect_errors": [nodeid...],
   "totals": {"passed": n, "failed": n, ..., "tests": n, "duration_s": s},
   "tests": {nodeid: {"outcome": o, "duration_s": setup+call+teardown, "markers": [...]}}}
outcome: passed, failed (the call failed), error (setup or teardown failed), skipped, xfailed, xpassed.

`failure_rates(files)` reads such files (`make test-flaky N=5`: scripts/test_flaky.py); `python
tests/_outcomes.py FILE...` prints them; `--totals FILE...` sums one `make test`'s sessions in one line;
`--durations FILE...` prints the real tests' durations (tests/durations.json, tests/_groups.py's hint).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parent.parent
ENV = "RMQCHAOS_TEST_RUNS"  # the directory the session files go to
BAD = ("failed", "error")  # what counts as a failure of a test
_BUILTIN_MARKS = {"parametrize", "usefixtures", "filterwarnings", "skip", "skipif", "xfail"}
_OUR_MARKS = {"fast", "long", "alone"}  # pyproject.toml's markers


def runs_dir() -> Path:
    return Path(os.environ.get(ENV) or REPO / ".cache" / "test-runs")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


class Recorder:
    """pytest plugin: per nodeid, the outcome of its phases and their summed duration."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.start = time.time()
        self.markers: dict[str, list[str]] = {}
        self.tests: dict[str, dict[str, Any]] = {}
        self.collect_errors: list[str] = []
        self.path: Path | None = None

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collect_errors.append(report.nodeid)

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:
            self.markers[item.nodeid] = sorted({m.name for m in item.iter_markers()} - _BUILTIN_MARKS)

    def pytest_runtest_logreport(self, report: Any) -> None:
        # under pytest-xdist the reports come from the workers and the controller collected nothing:
        # the markers are then the report's keywords
        t = self.tests.get(report.nodeid)
        if t is None:
            marks = self.markers.get(report.nodeid)
            t = self.tests[report.nodeid] = {"outcome": None, "duration_s": 0.0, "markers": marks if marks is not None
                                             else sorted(k for k in report.keywords if k in _OUR_MARKS)}
        t["duration_s"] = round(t["duration_s"] + report.duration, 3)
        xfail = hasattr(report, "wasxfail")
        if t["outcome"] in BAD:  # the first failure of a test stays its outcome
            pass
        elif report.failed:
            t["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            t["outcome"] = "xfailed" if xfail else "skipped"
        elif report.when == "call":
            t["outcome"] = "xpassed" if xfail else "passed"
        elif t["outcome"] is None and report.when == "teardown":  # setup passed, no call report
            t["outcome"] = "passed"

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        if session.config.option.collectonly:
            return
        end = time.time()
        totals: dict[str, Any] = {}
        for t in self.tests.values():  # an interrupted session's test may have no outcome yet
            totals[str(t["outcome"])] = totals.get(str(t["outcome"]), 0) + 1
        totals["tests"] = len(self.tests)
        totals["duration_s"] = round(sum(t["duration_s"] for t in self.tests.values()), 1)
        doc = {"start": _iso(self.start), "end": _iso(end), "wall_s": round(end - self.start, 1),
               "commit": _git("rev-parse", "HEAD"),
               "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
               "args": self.args, "exitstatus": int(exitstatus),
               "collect_errors": self.collect_errors, "totals": totals, "tests": self.tests}
        d = runs_dir()
        d.mkdir(parents=True, exist_ok=True)
        stamp = datetime.fromtimestamp(self.start, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.path = d / f"{stamp}-{os.getpid()}.json"
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
        tmp.replace(self.path)  # a reader never sees half a file

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.path is not None:
            terminalreporter.write_line(f"outcomes: {self.path}")


def register(config: Any) -> None:
    """Record this session (tests/conftest.py calls it; `-p _outcomes` does too, as a plugin)."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller records the session
        return
    if not config.pluginmanager.has_plugin("rmqchaos-outcomes"):
        config.pluginmanager.register(Recorder(list(config.invocation_params.args)), "rmqchaos-outcomes")


pytest_configure = register


def failure_rates(files: Iterable[Path]) -> dict[str, Any]:
    """Over the sessions in `files`: each test that failed at least once (failed or error) with how
    many times, and the sessions that did not end with a result (exit status other than 0 or 1:
    interrupted, an internal or usage error, no tests collected)."""
    sessions = [(Path(f), json.loads(Path(f).read_text())) for f in files]
    n = len(sessions)
    failed: dict[str, int] = {}
    seen: set[str] = set()
    for _, s in sessions:
        for nodeid, t in s["tests"].items():
            seen.add(nodeid)
            if t["outcome"] in BAD:
                failed[nodeid] = failed.get(nodeid, 0) + 1
    rows = sorted(failed.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"sessions": n, "tests": len(seen), "rows": [(nodeid, k, n) for nodeid, k in rows],
            "failures": sum(failed.values()),
            "failing_sessions": sum(1 for _, s in sessions if any(t["outcome"] in BAD for t in s["tests"].values())),
            "broken": [(str(f), s["exitstatus"]) for f, s in sessions if s["exitstatus"] not in (0, 1)]}


def format_rates(r: dict[str, Any]) -> list[str]:
    n = r["sessions"]
    lines = [f"{k}/{n}  {k / n:4.0%}  {nodeid}" for nodeid, k, _ in r["rows"]]
    lines += [f"session {f} ended with exit status {code} (not a test result)" for f, code in r["broken"]]
    lines.append(f"total: {len(r['rows'])} of {r['tests']} tests failed at least once in {n} session{'s' * (n != 1)} "
                 f"({r['failures']} failures; {r['failing_sessions']} of {n} had one)")
    return lines


def report(files: list[Path]) -> int:
    """Print the failure rates of `files`; 1 if any test failed or any session broke, else 0."""
    if not files:
        print("no session files to read")
        return 1
    r = failure_rates(files)
    print("\n".join(format_rates(r)))
    return 1 if r["rows"] or r["broken"] else 0


def totals(files: list[Path]) -> str:
    """Two lines over the sessions of one `make test` (scripts/test.sh's phases): the wall time of
    each, then each test's outcome counted once, in the plain closing form CI reads."""
    counts: dict[str, int] = {}
    walls = []
    for f in files:
        s = json.loads(Path(f).read_text())
        walls.append(f"{s['wall_s']:.0f} s")
        for t in s["tests"].values():
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    bad = sum(counts.get(k, 0) for k in BAD)
    skipped = f", {counts['skipped']} skipped" if counts.get("skipped") else ""
    return (f"sessions: {' + '.join(walls) or 'none'}\n"  # the last line alone, in the plain form CI reads
            f"total: {counts.get('passed', 0) + counts.get('xfailed', 0)} passed, {bad + counts.get('xpassed', 0)} failed{skipped}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--totals"]:
        print(totals([Path(a) for a in sys.argv[2:] if Path(a).is_file()]))
        sys.exit(0)
    if sys.argv[1:2] == ["--durations"]:  # the real tests' durations of session files: tests/durations.json
        d = {k: round(t["duration_s"]) for a in sys.argv[2:] for k, t in json.loads(Path(a).read_text())["tests"].items()
             if "fast" not in t["markers"]}
        print(json.dumps(dict(sorted(d.items())), indent=0))
        sys.exit(0)
    sys.exit(report([Path(a) for a in sys.argv[1:]]))
