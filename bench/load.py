"""One Locust load process through the benchmark cluster, measured: its throw-away run directory (a
scenario whose load is the benchmark's, paced or not) and the load's own acked rate and CPU."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench.measure import Sample, measure
from bench.rounds import TOPIC
from rmqchaos.machine import paths
from rmqchaos.errors import UserError

UNPACED = 200_000  # msg/s: above what one load process reaches here, so the load runs as fast as it can


def load_run_dir(base: Path, cluster_scenario: Path, i: int, messages: int, users: int, size: int,
                 rate: float = UNPACED):
    """A throw-away run directory whose scenario drives a Locust load through the cluster, at `rate`
    messages/s in total (UNPACED: as fast as it goes)."""
    import yaml

    from rmqchaos.run.rundir import RunDir
    from rmqchaos.spec import parse_scenario
    d = yaml.safe_load(cluster_scenario.read_text())
    d.update(name=f"bench{i}", checks={}, consumers=None,
             load={"topic": TOPIC, "users": users, "spawn_rate": 10000, "rate": rate, "duration": "300s",
                   "messages": messages, "message_size": size})
    text = yaml.safe_dump(d, sort_keys=False)
    return RunDir.create(base / f"r{i}", parse_scenario(text), text, mode="owned")


def run_locust(run, ledger: bool, timeout: float, workdir: Path, turns: float = 0.0) -> Sample:
    cmd = [sys.executable, "-m", "loadgen", str(run.path), "--ledger", "on" if ledger else "off"]
    if turns:
        cmd += ["--ledger-turns", str(turns)]
    env = dict(os.environ, RMQCHAOS_QUIET="1", PYTHONPATH=str(paths.REPO))
    out, wall, ru, rc = measure(cmd, env, timeout, workdir)
    if rc != 0:
        raise UserError(f"the Locust load process failed (exit {rc})", out.strip()[-300:])
    summ = json.loads((run.path / "load" / "summary.json").read_text())
    acked = summ["locust_requests"] - summ["locust_failures"]
    # rate over the load itself (start-up excluded on both sides: the same code path)
    return Sample("ledger" if ledger else "no-ledger", acked, summ["locust_requests"],
                  summ["end_s"] - summ["start_s"], ru.ru_utime + ru.ru_stime, ru.ru_stime, ru.ru_minflt)
