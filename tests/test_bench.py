"""The benchmark commands run end to end against a real cluster and print their ratio line (tiny
sizes: this proves the commands work, it measures nothing worth quoting)."""
from __future__ import annotations

import re

import pytest

from conftest import cli


@pytest.mark.long  # benchmarks are commands (docs/benchmarks.md); make test-long runs them end to end
def test_producer_and_ledger_benchmarks_print_their_ratios(cluster) -> None:
    rd = str(cluster.run.path)
    r = cli("bench", "producer", "--rounds", "1", "--messages", "1000", "--concurrency", "8", "--run-dir", rd,
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"^ratio acked_per_cpu=(\d+\.\d+) acked_rate=(\d+\.\d+)$", r.stdout, re.M)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, r.stdout
    for mode in ("ordered", "transactional"):  # the client's own API on the Java side (io.rmqchaos.SendBench)
        r = cli("bench", "producer", "--mode", mode, "--rounds", "1", "--messages", "1000", "--concurrency", "8",
                "--run-dir", rd, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"producer benchmark ({mode})" in r.stdout and "io.rmqchaos.SendBench" in r.stdout, r.stdout
        assert re.search(r"^ratio acked_per_cpu=(\d+\.\d+) acked_rate=(\d+\.\d+)$", r.stdout, re.M), r.stdout
    r = cli("bench", "ledger", "--rounds", "1", "--messages", "1000", "--users", "4", "--run-dir", rd, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"^ledger_overhead=-?\d+\.\d+$", r.stdout.strip().splitlines()[-1]), r.stdout
    assert re.search(r"^seal after the load: \d+\.\d+ CPU-s per 10k acked \(2,000 records", r.stdout, re.M), r.stdout  # intent + outcome
    r = cli("bench", "ledger", "--alternate", "0.5", "--rounds", "1", "--messages", "3000", "--users", "4",
            "--rate", "1000", "--run-dir", rd, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    counts = re.findall(r"^ledger (?:on |off): +(\d+) accepted in its turns +\d+\.\d+ CPU-s per 10k", r.stdout, re.M)
    assert len(counts) == 2 and all(int(n) > 0 for n in counts), r.stdout  # both kinds of turn counted
    assert re.search(r"^ledger_overhead=-?\d+\.\d+$", r.stdout.strip().splitlines()[-1]), r.stdout


@pytest.mark.long  # the analysis it times is tested in tests/test_analysis.py
def test_analyze_benchmark_seals_agrees_with_the_planted_truth_and_prints_its_ratio(tmp_path) -> None:
    """Small and local only (the standalone variant's cluster is tested in test_analysis.py)."""
    r = cli("bench", "analyze", "--rows", "20000", "--warmup", "0", "--no-standalone", "--dir", str(tmp_path),
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"^rows +[\d,]+: duckdb .* local\[\*\]: seal +\d+\.\d+s \+ analyze .* µs/row, spark_vs_duckdb \d\.\d{3}\), .* "
                     r"driver peak RSS [\d,]+ MiB \| agree=true$", r.stdout, re.M), r.stdout
    assert re.search(r"^spark_vs_duckdb=\d+\.\d+ rows=\d+ agree=true$", r.stdout.strip().splitlines()[-1]), r.stdout
    assert "WARN" not in r.stdout + r.stderr  # Spark's own lines go to its log in --dir
    assert (tmp_path / "spark.log").is_file() and not (tmp_path / "n20000").exists()


@pytest.mark.fast
def test_powerfs_benchmark_cluster_is_two_brokers_alike_the_layer_alternating_abba(tmp_path) -> None:
    import argparse

    from bench.powerfs import cluster_scenario, layered_broker
    from conftest import REPO, scenario_dict, write_scenario
    from rmqchaos.errors import UserError
    a = argparse.Namespace(flush="ASYNC_FLUSH", rate=3000.0, size=512)
    d, names = cluster_scenario(REPO / "scenarios" / "power-loss-async.yaml", a)  # ASYNC and SYNC there
    assert names == ["broker-a", "broker-b"] and d["faults"] == [] and d["consumers"] == {"instances": []}
    assert [b["config"]["flushDiskType"] for b in d["cluster"]["brokers"]] == ["ASYNC_FLUSH", "ASYNC_FLUSH"]
    assert d["cluster"]["powerfs"] == [] and "signature" not in d
    assert (d["load"]["rate"], d["load"]["message_size"], d["load"]["users"]) == (3000.0, 512, 60)
    assert [layered_broker(names, r) for r in range(6)] == ["broker-a", "broker-b", "broker-b", "broker-a",
                                                            "broker-a", "broker-b"]
    one = write_scenario(tmp_path / "one.yaml", scenario_dict("one", 32076, [32111]))
    with pytest.raises(UserError, match="needs exactly two broker groups of one node each"):
        cluster_scenario(one, a)
    r = cli("bench", "powerfs", "--scenario", str(one), timeout=60)  # refused before anything starts
    assert r.returncode == 1 and "needs exactly two broker groups" in r.stderr and r.stdout == "", r.stderr


@pytest.mark.fast
@pytest.mark.parametrize("args, expect", [(["--rate", "0"], "argument --rate: 0: a rate is messages/s above 0"),
                                          (["--duration", "0.5s"], "argument --duration: 0.5s: expected 1 to 3600 seconds"),
                                          (["--rounds", "x"], "argument --rounds: x: expected a whole number from 1 to 20"),
                                          (["--duration", "soon"], "argument --duration: soon: expected 1 to 3600 seconds"),
                                          (["--flush", "NEVER"], "argument --flush: invalid choice: 'NEVER'")])
def test_powerfs_benchmark_bad_values_are_one_line(args: list[str], expect: str) -> None:
    r = cli("bench", "powerfs", *args, timeout=60)
    assert r.returncode == 2 and expect in r.stderr.strip().splitlines()[-1], r.stderr


@pytest.mark.long  # the suite's budget; the benchmark's cluster and arguments are checked in the fast tier above
def test_powerfs_benchmark_measures_a_layered_and_a_plain_broker_side_by_side(tmp_path, monkeypatch) -> None:
    """One round, a few seconds at a low rate (ports 32076, 32111/32121): both brokers acked and
    both were measured (the layer's side with its powerfs server); no speed ratio is asserted."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from conftest import REPO, write_scenario
    from helpers import assert_nothing_left
    f = write_scenario(tmp_path / "pf.yaml", {
        "extends": str(REPO / "scenarios" / "power-loss-async.yaml"), "name": "bench-pf",
        "cluster": {"namesrv": {"port": 32076}, "stop_timeout": "3s", "ready_timeout": "90s",
                    "brokers": [{"name": "broker-a", "port": 32111}, {"name": "broker-b", "port": 32121}]}})
    short = tempfile.mkdtemp(prefix="pf", dir="/tmp")  # a mount's control socket path must fit in 107 bytes
    monkeypatch.setenv("RMQCHAOS_RUNS", short)
    r = cli("bench", "powerfs", "--scenario", str(f), "--rounds", "1", "--rate", "200", "--duration", "4",
            "--warmup", "2", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {m[0]: m for m in re.findall(r"^(layer|plain) +(\d+)/(\d+) +(\d+) +(\d+\.\d+) +(\d+\.\d+) +\S+$", r.stdout, re.M)}
    assert set(rows) == {"layer", "plain"}, r.stdout
    for side, acked, attempts, rate, cpu, server in rows.values():
        assert int(acked) > 0 and int(attempts) >= int(acked) and float(cpu) > 0, r.stdout
        assert (float(server) > 0) == (side == "layer"), r.stdout  # the server's CPU is the layer's side's
    assert re.search(r"^per-round ratios \(layer/plain\) acked_rate: \d+\.\d\d; acked_per_cpu: \d+\.\d\d$", r.stdout, re.M)
    assert re.search(r"^ratio acked_per_cpu=\d+\.\d\d acked_rate=\d+\.\d\d ", r.stdout.strip().splitlines()[-1]), r.stdout
    runs = list(Path(os.environ["RMQCHAOS_RUNS"]).iterdir())
    assert len(runs) == 1 and (runs[0] / "bench" / "measured" / "ledgers").is_dir(), runs
    assert_nothing_left(runs[0])
    assert str(runs[0]) not in Path("/proc/self/mountinfo").read_text()  # its mount is gone
    shutil.rmtree(short)
