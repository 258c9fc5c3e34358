"""The benchmark commands run end to end against a real cluster and print their ratio line (tiny
sizes: this proves the commands work, it measures nothing worth quoting)."""
from __future__ import annotations

import re

from conftest import cli


def test_producer_and_ledger_benchmarks_print_their_ratios(cluster) -> None:
    rd = str(cluster.run.path)
    r = cli("bench", "producer", "--rounds", "1", "--messages", "1000", "--concurrency", "8", "--run-dir", rd,
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"^ratio acked_per_cpu=(\d+\.\d+) acked_rate=(\d+\.\d+)$", r.stdout, re.M)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, r.stdout
    r = cli("bench", "ledger", "--rounds", "1", "--messages", "1000", "--users", "4", "--run-dir", rd, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"^ledger_overhead=-?\d+\.\d+$", r.stdout.strip().splitlines()[-1]), r.stdout
