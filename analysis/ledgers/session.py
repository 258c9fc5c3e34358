"""This process's Spark session: on which master, with which JVM options and where Spark's own log
goes; one per process, kept until it exits (analysis/reconcile/reconcile.py runs on it)."""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from pyspark.sql import SparkSession


_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


#: ledgers smaller than this are analyzed by a driver JVM that JIT-compiles with C1 only: a small
#: analysis is over before C2's compilations pay for their CPU (a 20 MB run, cold process, 2 cores:
#: 28.2 and 27.8 s against 32.9 and 35.9 s with both tiers, interleaved); large ones keep C2
C1_ONLY_BELOW_BYTES = 256 << 20



def spark_session(master: str | None = None, log_file: Path | None = None, small: bool = False) -> SparkSession:
    """A Spark session on `master` (default local[*] or $RMQCHAOS_SPARK_MASTER), listening on loopback.
    With `log_file`, Spark's own log (its log4j profile notice, NativeCodeLoader, ...) goes there, not
    to the terminal (it applies when this process starts its first session, as does `small`: the
    driver's and the executors' JIT tier, C1_ONLY_BELOW_BYTES)."""
    master = master or os.environ.get("RMQCHAOS_SPARK_MASTER", "local[*]")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver listens on loopback only
    # the throughput collector: the job is batch work, where G1's concurrent marking and barriers only
    # cost; at 30M rows `analyze` took 66.5 s against 73.3 s with G1 (three interleaved pairs)
    gc = "-XX:+UseParallelGC"
    jit = " -XX:TieredStopAtLevel=1" if small else ""
    java_opts = f"-Djava.net.preferIPv4Stack=true {gc}{jit}"
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        conf = log_file.with_suffix(".log4j2.properties")
        conf.write_text(_LOG4J2.format(log=log_file))
        java_opts += f" -Dlog4j2.configurationFile=file:{conf}"
    b = (SparkSession.builder.appName("rmqchaos-analyze").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC")
         # 2 GiB: with local[*] the driver is the executor too; its hash aggregations then fit in
         # memory at ~1 GiB of journal per shuffle partition (at 1 GiB, 30M rows took ~5 % longer)
         .config("spark.driver.memory", os.environ.get("RMQCHAOS_SPARK_DRIVER_MEMORY", "2g"))
         .config("spark.driver.extraJavaOptions", java_opts)
         # a cluster's executors (local[*] runs in the driver): the same JIT tier, for the same reason
         .config("spark.executor.extraJavaOptions", gc + jit)
         # the key join's sides are co-partitioned, each partition from ~1 GiB of ledger: hashing
         # the smaller side beats sorting both (measured ~1.2x on the key table)
         .config("spark.sql.join.preferSortMergeJoin", "false")
         # no broadcast the planner picks from file sizes: zstd Parquet of regular ledgers is tiny on
         # disk (30M rows: 10M msgIds from ~3 MB) and the broadcast ran the 1 GiB driver out of
         # memory; the joins that should broadcast say so (F.broadcast, BROADCAST_MAX rows)
         .config("spark.sql.autoBroadcastJoinThreshold", "-1")
         .config("spark.sql.adaptive.autoBroadcastJoinThreshold", "-1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    # one session per process, kept until the process exits: the analyses of a matrix run in one
    # process (`rmqchaos run a.yaml b.yaml`, dag.test()) pay Spark's start-up (~10 s here) once. A
    # different master or driver memory stops it first: getOrCreate() would hand back the live one.
    key = (master, os.environ.get("RMQCHAOS_SPARK_DRIVER_MEMORY", "2g"))
    old = _KEPT.get("session")
    if old is not None and old.sparkContext._jsc is not None:  # not stopped by someone since
        if _KEPT.get("key") == key:
            if log_file is not None:
                log_file.parent.mkdir(parents=True, exist_ok=True)
                with open(log_file, "a") as f:
                    f.write(f"(the Spark session of this process, started for {_KEPT['log']}: its log is there)\n")
            return old
        old.stop()
    if log_file is None:
        spark = b.getOrCreate()
    else:  # the JVM inherits this process's stdout/stderr when it starts: give it the log file instead
        with _fds_to(log_file):
            spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not _KEPT:
        atexit.register(_stop_kept)
    _KEPT.update(session=spark, key=key, log=str(log_file))
    return spark


_KEPT: dict[str, Any] = {}  # the process's session, what it was made for, where its log went


def _stop_kept() -> None:
    if _KEPT.get("session") is not None:
        try:
            _KEPT["session"].stop()
        except Exception:  # noqa: BLE001 - at exit: the JVM may be gone already
            pass
    _KEPT.clear()


@contextlib.contextmanager
def _fds_to(log_file: Path) -> Iterator[None]:
    """Point fds 1 and 2 at `log_file` while a child process is started (it keeps them), then back."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (fd, *saved):
            os.close(x)


BROADCAST_MAX = 100_000  # rows up to which the small side of a join is broadcast
