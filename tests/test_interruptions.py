"""The platform itself under fault injection: `rmqchaos run` SIGKILLed or interrupted (SIGINT) in
each stage, then `cluster down --all` and `analyze`, as a person cleaning up would. Nothing may be
left running, the ledgers stay parsable, and no key may be called lost that the run could not
verify (a consumer that was stopped with the platform is not RocketMQ losing messages)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import RMQCHAOS, REPO, cli, scenario_dict, write_scenario
from helpers import assert_nothing_left
from rmqchaos.ledger.journal_read import check_run, journal_tail


def _state(out: Path) -> dict:
    try:
        return json.loads((out / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _stage_running(name: str) -> Callable[[Path], bool]:
    return lambda out: (_state(out).get("stages", {}).get(name) or {}).get("status") == "running"


def _sending(out: Path) -> bool:
    """The load is on and the send ledger has some hundreds of records."""
    return _stage_running("load")(out) and any(journal_tail(f).end > 100_000 for f in (out / "ledgers").glob("send-*.jsonl"))


LONG = pytest.mark.long  # `make test-long`: the SIGINT at up and the load's SIGKILL cover those paths in `make test`
CASES = [  # (signal, the moment it is sent, what analyze may then say)
    (signal.SIGINT, "up", _stage_running("up")),
    (signal.SIGKILL, "load", _sending),
    pytest.param(signal.SIGINT, "load", _sending, marks=LONG),
    pytest.param(signal.SIGKILL, "drain", _stage_running("drain"), marks=LONG),
    pytest.param(signal.SIGKILL, "analyze", _stage_running("analyze"), marks=LONG),
]


@pytest.mark.parametrize("sig, when, ready", CASES,
                         ids=[f"{c.values[0].name}-{c.values[1]}" if hasattr(c, "values") else f"{c[0].name}-{c[1]}"
                              for c in CASES])
def test_interrupted_run_leaves_nothing_and_claims_no_unverified_loss(tmp_path: Path, sig: signal.Signals,
                                                                      when: str, ready: Callable[[Path], bool],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # the load-stage cases are signalled ~1 s into the load; the later ones wait for it to end: 10 s
    late = when in ("drain", "analyze")
    d = scenario_dict(f"int-{when}", 26876, [26911, 26921],
                      load={"topic": "T_INT", "users": 4, "rate": 200, "duration": "10s" if late else "25s"},
                      consumers={"settle": "5s" if late else "8s"})
    f = write_scenario(tmp_path / "s.yaml", d)
    out = tmp_path / "run"
    p = subprocess.Popen([*RMQCHAOS, "run", str(f), "--out", str(out)], cwd=REPO, env=os.environ.copy(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not ready(out):
            assert p.poll() is None, f"run ended before {when}: {p.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, f"never reached {when}"
            time.sleep(0.1)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if sig == signal.SIGINT:
        assert p.returncode == 130, err[-2000:]
        assert "Traceback" not in err and err.rstrip().splitlines()[-1].startswith("rmqchaos: interrupted"), err[-2000:]
        assert err.count("rmqchaos: interrupted") == 1
    else:
        assert p.returncode == -signal.SIGKILL

    r = cli("cluster", "down", "--all")
    assert r.returncode == 0, r.stderr
    assert_nothing_left(out)

    for lf in check_run(out):  # every ledger parses; a writer killed mid-line leaves at most a torn tail
        assert not lf.corrupt, lf.problem
    if when == "up":
        assert not (out / "ledgers").exists()
        return
    from cli.main import main  # `rmqchaos analyze`, in this process: on the Spark session it keeps (conftest.kept_spark)
    capsys.readouterr()  # only what analyze prints
    assert main(["analyze", str(out)]) == 0
    printed = capsys.readouterr().out
    summ = json.loads((out / "analysis" / "summary.json").read_text())
    c = summ["counts"]
    killed = "drain" if when == "drain" else "load"  # the stage the signal hit (up and analyze: not asked)
    if when == "analyze":  # load and drain had finished: the verdict stands on complete ledgers
        assert summ["complete"] is True and c["undelivered_at_stop"] == 0
        assert json.loads((out / "state.json").read_text())["stages"]["analyze"]["status"] == "ok"
    else:
        assert summ["complete"] is False and summ["incomplete_reasons"], summ["incomplete_reasons"]
        assert printed.startswith("INCOMPLETE RUN: loss not verified: "), printed[:300]
        assert c["lost"] == 0, c  # the consumers were stopped with the platform: never "lost"
        stages = json.loads((out / "state.json").read_text())["stages"]
        assert stages[killed]["status"] in ("running", "interrupted"), stages  # killed: still "running" on disk
    assert c["keys"] > 0 and c["keys"] == sum(c[k] for k in ("ok", "lost", "duplicated", "recovered", "failed",
                                                             "indeterminate", "undelivered_at_stop"))
    rep = cli("stage", "report", str(out))
    assert rep.returncode == 0, rep.stderr
    if when != "analyze":
        assert rep.stdout.startswith("INCOMPLETE RUN: loss not verified:")
        assert f"stage {killed}" in rep.stdout and ("killed" in rep.stdout or "interrupted" in rep.stdout)
