"""`rmqchaos bench analyze`: seal + Spark `analyze` against the DuckDB reference classification on
synthetic ledgers with planted classes, per size, on local[*] and a Spark standalone cluster."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rmqchaos.progress import say


def _driver_peak_mib() -> float | None:
    """The Spark driver JVM's peak resident memory so far (VmHWM), in MiB."""
    from pyspark import SparkContext
    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None) if gw is not None else None
    try:
        with open(f"/proc/{proc.pid}/status") as f:  # type: ignore[union-attr]
            return next(int(x.split()[1]) / 1024 for x in f if x.startswith("VmHWM:"))
    except (AttributeError, OSError, StopIteration):
        return None


def cmd_bench_analyze(a: argparse.Namespace) -> int:
    """Synthetic ledgers with planted classes, per size: DuckDB's reference classification reading the
    JSON Lines journals, against seal (JSON → Parquet, rmqchaos/ledger/seal.py) + Spark `analyze` reading the
    sealed copies, side by side; then (--standalone) the same seal + analyze with a Spark standalone
    cluster of 1 master and 2 workers of 1 core that the benchmark starts and stops."""
    from analysis.ledgers import duckdb_ref, synthetic
    from analysis.ledgers import spark_cluster
    from analysis.reconcile.keys import key_table
    from analysis.reconcile.reconcile import analyze_ledgers
    from analysis.ledgers.sealed import read_receive, read_send, seal_all
    from analysis.ledgers.session import spark_session
    from rmqchaos.ledger.seal import sealed_path

    keys = ("keys", "ok", "lost", "duplicated", "recovered", "failed", "indeterminate", "unexpected",
            "acked", "acked_weak", "attempts", "duplicate_deliveries")
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="rmqchaos-bench-analyze-"))
    master = None
    if a.standalone:
        say("starting a Spark standalone cluster: 1 master, 2 workers of 1 core")
        master = spark_cluster.up(workers=2, cores=1, memory_mb=a.worker_memory_mb, port=a.cluster_port,
                                  webui_port=a.cluster_webui_port)["master"]

    def unseal(files: list[Path]) -> None:
        for f in files:
            sealed_path(f).unlink(missing_ok=True)

    def timed_analyze(spark: Any, send: list[Path], recv: list[Path]) -> tuple[float, float, dict[str, Any]]:
        """(seal s, analyze s, result) from unsealed journals."""
        unseal(send + recv)
        t = time.monotonic()
        seal_all(send + recv, [])
        t_seal = time.monotonic() - t
        t = time.monotonic()
        res = analyze_ledgers(spark, send, recv, [])
        return t_seal, time.monotonic() - t, res

    results: list[tuple[int, float, float | None, bool]] = []
    log = base / "spark.log"  # Spark's and its JVM's own lines, not the benchmark's output
    spark = spark_session(a.master, log_file=log)
    try:
        print(f"analysis benchmark: seal + Spark {spark.version} analyze ({spark.sparkContext.master}"
              + (f"; and {master}: 2 workers x 1 core" if master else "") + ") vs DuckDB on the JSON journals, "
              "same machine, same files, one size at a time")
        warm: tuple[list[Path], list[Path]] | None = None
        if a.warmup:  # uncounted: the first Spark job in a JVM runs interpreted until the JIT catches up
            d = base / "warmup"
            say(f"warm-up on {a.warmup} keys (not counted)")
            synthetic.write(d, a.warmup)
            warm = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            duckdb_ref.classify(*warm)
            analyze_ledgers(spark, *warm, [])
        for n in a.rows:
            d = base / f"n{n}"
            say(f"writing synthetic ledgers for {n} keys")
            synthetic.write(d, n)
            # the generator's writes reach the disk now, not while one engine or the other is timed
            os.sync()
            send, recv = sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))
            rows = _count_lines(send + recv)
            truth = synthetic.truth(n)
            t = time.monotonic()
            ref = duckdb_ref.classify(send, recv)
            t_duck = time.monotonic() - t
            t_seal, t_an, res = timed_analyze(spark, send, recv)
            t = time.monotonic()  # classification only, on the sealed copies: attempts, keys, class counts
            key_table(read_send(spark, send, []), read_receive(spark, recv, [])).groupBy("class").count().collect()
            t_cls = time.monotonic() - t

            def agrees(r: dict[str, Any]) -> bool:
                return all(r["counts"][k] == ref[k] == truth[k] for k in keys) and \
                    r["duplicates_by_cause"] == ref["duplicates_by_cause"] == truth["duplicates_by_cause"] and \
                    sorted(r["answers"], key=str) == sorted(truth["answers"], key=str)  # Spark's alone (not DuckDB's)
            agree = agrees(res)
            total = t_seal + t_an
            peak = _driver_peak_mib()
            print(f"rows {rows:>11,}: duckdb {t_duck:6.1f}s ({rows / t_duck:>9,.0f} rows/s) | local[*]: seal "
                  f"{t_seal:5.1f}s + analyze {t_an:6.1f}s = {total:6.1f}s ({total / rows * 1e6:5.2f} µs/row, "
                  f"spark_vs_duckdb {t_duck / total:.3f}), "
                  f"classify only {t_cls:5.1f}s | driver peak RSS "
                  + (f"{peak:,.0f} MiB" if peak else "?") + f" | agree={str(agree).lower()}")
            t_sa = None
            if master:
                spark.stop()
                spark = spark_session(master, log_file=log)
                if warm:  # new executors: their first job, uncounted, also waits until they are up
                    analyze_ledgers(spark, *warm, [])
                s_seal, s_an, s_res = timed_analyze(spark, send, recv)
                t_sa = s_seal + s_an
                agree = agree and agrees(s_res)
                print(f"{'':17s}  standalone (2 x 1 core): seal {s_seal:5.1f}s + analyze {s_an:6.1f}s = {t_sa:6.1f}s "
                      f"({t_sa / rows * 1e6:5.2f} µs/row, standalone_vs_duckdb {t_duck / t_sa:.3f}) "
                      f"| agree={str(agrees(s_res)).lower()}")
                spark.stop()
                spark = spark_session(a.master, log_file=log)
            results.append((rows, t_duck / total, t_duck / t_sa if t_sa else None, agree))
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
        if master:
            spark_cluster.down()
        if not a.keep:  # its own temp dir goes whole (an interrupted run leaves GBs of ledgers)
            shutil.rmtree(base if not a.dir else base / "warmup", ignore_errors=True)
    rows, ratio, sa_ratio, agree = results[-1]
    print(f"spark_vs_duckdb={ratio:.3f} " + (f"standalone_vs_duckdb={sa_ratio:.3f} " if sa_ratio else "")
          + f"rows={rows} agree={str(all(r[3] for r in results)).lower()}")
    return 0 if all(r[3] for r in results) else 1


def _count_lines(files: list[Path]) -> int:
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b""))
    return n
