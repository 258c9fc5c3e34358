"""Disk noise as faults, with real programs (redis-server, fio) and the real kernel counters: each
kind measurably raises the device's writes and flushes against a quiet baseline taken in the same
test, stops on time and leaves no process and no noise data behind. No JVM: the scheduler runs the
faults on a hand-started load clock. Bad settings: one line when the scenario loads."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from chaos.kinds.es_like_noise import MB, EsLikeParams, es_intent, job_file, shares
from chaos.kinds.redis_noise import redis_intent
from chaos.intent import intent, measure
from chaos.scheduler import FaultScheduler
from cluster import get_backend
from conftest import cli
from pipeline.runs import create_run, load_scenario
from rmqchaos.machine import diskstats
from rmqchaos.machine.procs import alive
from rmqchaos.spec import SpecError


def scenario(tmp_path: Path, *faults: dict, duration: str = "30s") -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "noise", "load": {"duration": duration}, "faults": list(faults)}))
    return f


def first_error(f: Path) -> str:
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    return e.value.lines[0]


# ---------------------------------------------------------------- settings (pure logic)

@pytest.mark.fast
@pytest.mark.parametrize("fault, expect", [
    ({"kind": "disk_noise", "at": "0s"}, "unknown fault kind 'disk_noise'; known: blkio_throttle, cleanup_retry_topics, clock, consumer_clock, consumer_kill, disk_error, disk_full, disk_slow, es_like_noise"),
    ({"kind": "redis_noise", "at": "0s", "rate": -5}, "faults[0].rate: "),
    ({"kind": "redis_noise", "at": "0s", "instances": 0}, "faults[0].instances: "),
    ({"kind": "redis_noise", "at": "0s", "base_port": 9876}, "include the cluster's port(s) 9876"),
    ({"kind": "es_like_noise", "at": "0s", "profile": "mysql"}, "faults[0].profile: unknown key for a es_like_noise"),
    ({"kind": "es_like_noise", "at": "0s", "target": "broker-a"}, "acts on the cluster, not on a node: drop target"),
    ({"kind": "es_like_noise", "at": "40s"}, "the fault starts at 40s, after the load's duration 30s"),
    ({"kind": "es_like_noise", "at": "0s", "budget_mb": 0}, "faults[0].budget_mb: "),
    ({"kind": "es_like_noise", "at": "0s", "instances": 16, "budget_mb": 7},
     "budget_mb 7 is too small for 16 instance(s): each job's share must hold one write, and those shares come to 20 MB"),
    ({"kind": "blkio_throttle", "at": "0s", "target": "broker-a"}, "set at least one of write_mb_s"),
    ({"kind": "blkio_throttle", "at": "0s", "target": "broker-a", "write_mb_s": -1}, "faults[0].write_mb_s: "),
])
def test_bad_noise_settings_are_errors_when_the_scenario_loads(tmp_path: Path, fault: dict, expect: str) -> None:
    line = first_error(scenario(tmp_path, fault))
    assert line.startswith(f"{tmp_path / 's.yaml'}:") and expect in line, line


@pytest.mark.fast
def test_a_missing_program_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    f = scenario(tmp_path, {"kind": "es_like_noise", "at": "0s"})
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # python, no fio
    r = cli("validate", str(f), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "es_like_noise fault needs fio on PATH: apt-get install fio" in lines[0], r.stderr


@pytest.mark.fast
def test_es_like_job_file_has_the_three_jobs_and_caps() -> None:
    text = job_file(EsLikeParams(merge_mb_s=50, burst_mb=16, burst_every=3), "/d", 40)
    assert "runtime=40\n" in text and "size=256m\n" in text and "directory=/d\n" in text
    assert "time_based" not in text  # a job ends at its runtime or at its byte budget, whichever is first
    translog, merge, refresh = (text.split(f"[{j}]")[1].split("\n\n")[0] for j in ("translog", "merge", "refresh"))
    assert "bs=4k" in translog and "fdatasync=1" in translog and "rate_iops=200" in translog
    assert "direct=1" in merge and "iodepth=16" in merge and "rate=50000000\n" in merge  # bytes/s: MB = 10^6
    assert "thinktime=3000000" in refresh and "thinktime_blocks=128" in refresh and "fsync=128" in refresh


def job(text: str, name: str) -> dict[str, str]:
    body = text.split(f"[{name}]\n")[1].split("\n\n")[0]
    return dict(x.split("=", 1) for x in body.splitlines())


@pytest.mark.fast
def test_es_like_merges_are_capped_by_default_and_uncapped_only_when_asked() -> None:
    p = EsLikeParams()
    assert (p.merge_mb_s, p.budget_mb, p.translog_iops) == (20, 6000, 200)
    assert job(job_file(p, "/d", 70), "merge")["rate"] == "20000000"  # 20 MB/s, as Elasticsearch's old throttle
    assert "rate" not in job(job_file(EsLikeParams(merge_mb_s=0), "/d", 70), "merge")


@pytest.mark.fast
@pytest.mark.parametrize("kw", [{}, {"instances": 1, "budget_mb": 100}, {"instances": 2, "budget_mb": 150},
                                {"merge_mb_s": 0}, {"instances": 16, "budget_mb": 400, "translog_kb": 1024},
                                {"burst_mb": 1, "burst_every": 10, "budget_mb": 50000}])
def test_es_like_byte_budget_is_split_into_every_jobs_io_size_and_never_exceeded(kw: dict) -> None:
    p = EsLikeParams(**kw)
    sizes = {j: int(job(job_file(p, "/d", 70), j)["io_size"]) for j in ("translog", "merge", "refresh")}
    assert sizes == shares(p)
    # whole blocks, and the instances together stay within the budget (at least one block per job)
    blocks = {"translog": p.translog_kb * 1024, "merge": 1 << 20, "refresh": 128 << 10}
    assert all(sizes[j] % blocks[j] == 0 and sizes[j] >= blocks[j] for j in sizes)
    assert 0.9 * p.budget_mb * MB <= p.instances * sum(sizes.values()) <= p.budget_mb * MB
    if p.merge_mb_s and p.budget_mb / p.instances >= 60:  # whole blocks: the proportion shows on larger shares  # in proportion to the asked MB/s: at their rates all spend their shares together
        t = [sizes["merge"] / (p.merge_mb_s * MB), sizes["refresh"] / (p.burst_mb * (1 << 20) / p.burst_every)]
        assert abs(t[0] - t[1]) <= 0.02 * max(t), (sizes, t)


@pytest.mark.fast
def test_intent_is_the_worst_measure_against_its_ask() -> None:
    ms = [measure("SET/s", "redis 16379", 200, 190.0), measure("SET/s", "redis 16380", 200, 12.1),
          measure("SET/s", "redis 16381", 200, 201.3)]
    it = intent(ms, "Redis noise", of="instances")
    assert it == {"measures": ms, "reached": 0.06, "short": True,
                  "words": "Redis noise reached 6 % of its 200 SET/s (worst of 3 instances: redis 16380)"}
    assert ms[1] == {"what": "SET/s", "where": "redis 16380", "asked": 200.0, "achieved": 12.1}
    one = intent([measure("MB/s", "es-0 merge", 20, 19.5)], "es-like noise", note="its budget ended it")
    assert one["reached"] == 0.975 and one["short"] is False
    assert one["words"] == "es-like noise reached 98 % of its 20 MB/s (es-0 merge); its budget ended it"
    assert intent([measure("MB/s", "x", 16.777, 0.01)], "n")["words"] == "n reached 0.1 % of its 16.8 MB/s (x)"
    assert intent([measure("SET/s", "x", 200, 160)], "n")["short"] is False  # 0.8: not short
    assert intent([measure("SET/s", "x", 200, 159.9)], "n")["short"] is True
    assert intent([], "n") == {"measures": [], "reached": None, "short": False,
                               "words": "n: no intended rate to compare with"}


@pytest.mark.fast
def test_redis_intent_counts_each_driver_over_its_active_time() -> None:
    """The shared-host run's drivers: 378 SETs in ~32.8 s against 200 SET/s, though its slots were due."""
    drv = {"instances": {str(16379 + i): {"sets": 378, "skipped": 6174, "slots": 6552, "seconds": 32.76}
                         for i in range(8)}}
    drv["instances"]["16380"]["sets"] = 6400
    it = redis_intent(200, drv, {str(16379 + i): {"set_calls": 378} for i in range(8)}, 40)
    assert len(it["measures"]) == 8 and it["short"] is True and it["reached"] == 0.058
    assert it["words"] == "Redis noise reached 6 % of its 200 SET/s (worst of 8 instances: redis 16379)"
    # a driver that left no record: the server's own count of SETs over the occurrence
    it = redis_intent(100, None, {"17379": {"set_calls": 900}, "17380": {"error": "ConnectionRefusedError"}}, 10)
    assert [m["achieved"] for m in it["measures"]] == [90.0, 0.0] and it["short"] is True


@pytest.mark.fast
def test_the_redis_driver_reports_an_instance_s_clients_as_one() -> None:
    """Four clients share an instance's rate: their counts add up, its active time is the longest
    client's, and a client's connection error is kept."""
    from chaos.redis_driver import combine
    clients = [{"sets": 490, "errors": 0, "skipped": 10, "slots": 500, "seconds": 9.9, "max_reply_ms": 3.1}
               for _ in range(3)] + [{"error": "ConnectionRefusedError: refused", "sets": 0, "seconds": 0.0}]
    out = combine(clients)
    assert out == {"connections": 4, "sets": 1470, "errors": 0, "skipped": 30, "slots": 1500, "seconds": 9.9,
                   "sets_per_s": 148.48, "max_reply_ms": 3.1, "error": "ConnectionRefusedError: refused"}


@pytest.mark.fast
def test_es_intent_rates_per_job_and_a_spent_budget_counts_as_reached() -> None:
    p = EsLikeParams(instances=2, burst_mb=8, burst_every=1)
    full = {"translog": {"fsyncs": 1200, "write_mb": 4.9, "seconds": 6.0},
            "merge": {"fsyncs": 0, "write_mb": 119.0, "seconds": 6.0},
            "refresh": {"fsyncs": 6, "write_mb": 50.3, "seconds": 6.0}}
    spent = {**full, "merge": {"fsyncs": 0, "write_mb": 40.0, "seconds": 2.0, "budget_spent": True}}
    it = es_intent(p, {"0": {"jobs": full}, "1": {"jobs": spent}})
    assert [m["where"] for m in it["measures"]] == ["es-0 translog", "es-0 refresh", "es-0 merge",
                                                    "es-1 translog", "es-1 refresh", "es-1 merge"]
    assert [m["what"] for m in it["measures"][:3]] == ["fsyncs/s", "MB/s", "MB/s"]
    assert it["measures"][5]["achieved"] == 20.0 and it["short"] is False  # 40 MB in its 2 s: its rate
    assert it["words"].startswith("es-like noise reached 99 % of its 20 MB/s (worst of 6 jobs: es-0 merge)")
    assert it["words"].endswith("; its byte budget (6000 MB) ended es-1 merge after 2.0 s")
    # refresh: 3 bursts of 8 MiB due 1 s apart, the budget spent 2.1 s in: 8.4 MB/s, not 12
    quick = {**full, "refresh": {"fsyncs": 3, "write_mb": 25.17, "seconds": 2.1, "budget_spent": True}}
    it = es_intent(p, {"0": {"jobs": quick}})
    assert [m["achieved"] for m in it["measures"] if m["where"] == "es-0 refresh"] == [8.39]
    # fio left no result: nothing shown to have run
    it = es_intent(p, {"0": {"jobs": full}, "1": {"jobs": None}})
    assert it["reached"] == 0 and it["short"] is True and it["words"].startswith("es-like noise reached 0 % ")


# ---------------------------------------------------------------- the real programs

def run_noise(tmp_path: Path, fault: dict, seconds: float) -> tuple[dict, diskstats.Counters, float, Path]:
    """A quiet baseline of `seconds` on the run's disk, then the fault for `seconds` on a load clock."""
    f = scenario(tmp_path, {"id": "noise", "at": "0s", "duration": f"{seconds}s", **fault})
    run = create_run(f, tmp_path / "run")
    dev = diskstats.device_of(run.path)
    os.sync()  # what earlier tests left dirty is written now, not during the baseline
    time.sleep(1)
    b0, t0 = diskstats.read(dev), time.monotonic()
    time.sleep(seconds)
    quiet, quiet_s = diskstats.read(dev).minus(b0), time.monotonic() - t0
    c = get_backend(run)
    sched = FaultScheduler(run, c, run.scenario().faults)
    run.load_dir.mkdir()
    run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
    try:
        sched.start()
        sched.join(seconds + 90)
        assert not sched.is_alive()
        sched.check()
    finally:
        sched.stop()
        c.down()
    ev = next(e for e in run.timeline() if e["kind"] == "fault")
    assert ev["outcome"] == "ok", ev
    # on time: it ran for its duration (start-up and stop add a little)
    assert seconds - 0.5 <= (ev["end_ms"] - ev["start_ms"]) / 1000 <= seconds + 15, ev
    for p in run.processes.starts():  # nothing left running
        assert not alive(p.pid, p.starttime), p
    return ev["params"]["evidence"], quiet, quiet_s, run.path


def assert_louder(ev: dict, quiet: diskstats.Counters, quiet_s: float, writes: float, flushes: float) -> None:
    d = ev["disk"]
    per_s = lambda n, s: n / s  # noqa: E731
    assert per_s(d["writes"], d["seconds"]) > writes * max(1.0, per_s(quiet.writes, quiet_s)), (d, quiet)
    assert per_s(d["flushes"], d["seconds"]) > flushes * max(1.0, per_s(quiet.flushes, quiet_s)), (d, quiet)


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_redis_noise_fsyncs_every_write_and_stops_on_time(tmp_path: Path) -> None:
    ev, quiet, quiet_s, run = run_noise(tmp_path, {"kind": "redis_noise", "instances": 3, "base_port": 17379,
                                                   "rate": 100}, 6)
    drv = ev["driver"]["instances"]
    assert set(drv) == {"17379", "17380", "17381"} and all(r["errors"] == 0 for r in drv.values()), drv
    assert all(r["connections"] == 4 and r["slots"] >= r["sets"] for r in drv.values()), drv  # 4 clients each
    assert 0 < ev["sets"] <= 3 * 100 * 6 * 1.05, ev  # the set rate, bounded (how near it came: the intent)
    assert all(s["commands"] >= drv[p]["sets"] for p, s in ev["redis"].items()), ev["redis"]
    assert all(s["set_calls"] == drv[p]["sets"] for p, s in ev["redis"].items()), ev["redis"]
    it = ev["intent"]  # 100 SET/s each: a quiet host reaches it, a starved one says how near it came
    assert len(it["measures"]) == 3 and it["short"] is (it["reached"] < 0.8), it
    assert it["reached"] == min(round(m["achieved"] / m["asked"], 3) for m in it["measures"]), it
    assert_louder(ev, quiet, quiet_s, writes=2, flushes=3)  # one fsync per SET: ~300 flushes/s
    assert not list((run / "noise").rglob("appendonlydir"))  # its data deleted, its logs kept
    assert list((run / "noise").rglob("redis.log"))


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_es_like_noise_writes_merges_and_fsyncs_and_stops_on_time(tmp_path: Path) -> None:
    ev, quiet, quiet_s, run = run_noise(tmp_path, {"kind": "es_like_noise", "instances": 2, "file_mb": 64,
                                                   "merge_mb_s": 40, "burst_mb": 8, "burst_every": "1s"}, 6)
    assert ev["instances"] == 2
    for inst in ev["fio"].values():
        jobs = inst["jobs"]
        assert set(jobs) == {"translog", "merge", "refresh"}, inst
        assert jobs["translog"]["fsyncs"] > 0 and jobs["merge"]["write_mb"] > 0 and jobs["refresh"]["write_mb"] > 0
    assert ev["write_mb"] > 2 * 40 * 6 * 0.5  # the merges alone: two instances at up to 40 MB/s
    merges = [m for m in ev["intent"]["measures"] if m["where"].endswith("merge")]
    assert [m["asked"] for m in merges] == [40.0, 40.0] and all(m["achieved"] <= 40 * 1.1 for m in merges), merges
    assert_louder(ev, quiet, quiet_s, writes=3, flushes=3)
    data = [p for p in (run / "noise").rglob("*") if p.is_file() and p.suffix not in (".fio", ".json", ".log")]
    assert data == []  # fio's files deleted, the job files and results kept


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_es_like_noise_stops_writing_at_its_byte_budget_and_says_so(tmp_path: Path) -> None:
    """150 MB for 2 instances (75 MB each, ~29 MB/s asked each): fio's own io_size ends every job after
    ~2.6 s of a 6 s occurrence. fio stops at whole blocks of its io_size: no slack beyond 1 MB."""
    budget = 150
    ev, *_ = run_noise(tmp_path, {"kind": "es_like_noise", "instances": 2, "file_mb": 64, "burst_mb": 8,
                                  "burst_every": "1s", "budget_mb": budget}, 6)
    assert ev["budget_mb"] == budget and ev["write_mb"] <= budget + 1, ev
    jobs = [j for inst in ev["fio"].values() for j in inst["jobs"].values()]
    assert all(j["write_mb"] <= j["budget_mb"] + 0.01 for j in jobs), jobs
    assert ev["write_mb"] >= 0.9 * budget and all(j["budget_spent"] for j in jobs), jobs  # it was spent
    it = ev["intent"]
    assert list(ev)[0] == "intent" and len(it["measures"]) == 6, it  # 2 instances x 3 jobs with a rate
    assert {m["where"] for m in it["measures"]} == {f"es-{i} {j}" for i in (0, 1)
                                                   for j in ("translog", "merge", "refresh")}
    assert f"its byte budget ({budget} MB) ended" in it["words"], it
    assert it["reached"] == min(round(m["achieved"] / m["asked"], 3) for m in it["measures"]), it


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_a_starved_redis_driver_is_reported_short_of_its_rate(tmp_path: Path) -> None:
    """20,000 SET/s on one instance from one client, each SET its own fsync and round trip: one driver
    thread cannot come near it, and the evidence must say by how much."""
    ev, *_ = run_noise(tmp_path, {"kind": "redis_noise", "instances": 1, "base_port": 17479, "rate": 20000,
                                  "connections": 1}, 4)
    it = ev["intent"]
    assert it["short"] is True and it["reached"] < 0.8, it
    (m,) = it["measures"]
    assert (m["what"], m["where"], m["asked"]) == ("SET/s", "redis 17479", 20000.0), m
    assert m["achieved"] == ev["driver"]["instances"]["17479"]["sets_per_s"], (m, ev["driver"])
    pct = f"{it['reached'] * 100:.0f}" if it["reached"] >= 0.01 else f"{it['reached'] * 100:.1f}"
    assert it["words"] == f"Redis noise reached {pct} % of its 20000 SET/s (redis 17479)", it


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_disk_sampler_writes_a_record_a_second_on_the_run_clock(tmp_path: Path) -> None:
    out = tmp_path / "metrics" / "disk.jsonl"
    s = diskstats.sampler(tmp_path, out)
    assert s is not None
    t0 = time.time() * 1000
    with open(tmp_path / "w.bin", "wb") as fh:  # some writes and fsyncs for it to see
        for _ in range(20):
            fh.write(b"x" * 65536)
            fh.flush()
            os.fsync(fh.fileno())
            time.sleep(0.1)
    time.sleep(0.6)
    s.close()
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert 2 <= len(recs) <= 3, recs
    assert set(recs[0]) == {"ts_ms", "device", "write_mb_s", "writes_s", "flushes_s", "await_ms", "util"}
    assert all(t0 < r["ts_ms"] < time.time() * 1000 for r in recs)
    assert sum(r["flushes_s"] for r in recs) >= 10 and sum(r["write_mb_s"] for r in recs) > 0.5, recs


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_a_memory_cap_can_be_raised_as_the_page_cache_allowance_follows_the_node(tmp_path: Path) -> None:
    """The mechanism under page_cache_limit's tick: a cgroup with page cache, capped with a small
    allowance, then raised (memory+swap first: the kernel refuses memory above it), then lifted."""
    from cluster.local.cgroups import PREFIX, Cgroup, remove_empty_parents
    from rmqchaos.machine.procs import spawn
    cg = Cgroup(f"{PREFIX}/test-memcap-{os.getpid()}/broker-a")
    cg.create()
    mib = 1 << 20
    try:  # 64 MiB of page cache charged to the cgroup, by a writer inside it
        spawn(["dd", "if=/dev/zero", f"of={tmp_path / 'f.bin'}", "bs=1M", "count=64"], join=cg.procs_files(),
              stderr=subprocess.DEVNULL).wait(30)
        os.sync()  # clean pages: reclaim takes them at once
        assert cg.file_cache() > 48 * mib
        low = cg.cap_memory(page_cache=8 * mib)
        assert cg.file_cache() <= 16 * mib  # reclaimed down to about the allowance
        high = cg.cap_memory(page_cache=32 * mib)
        assert high > low
        mem = cg._mem()
        assert int((mem / "memory.limit_in_bytes").read_text()) == high
        assert int((mem / "memory.memsw.limit_in_bytes").read_text()) == high
        assert cg.cap_memory(page_cache=8 * mib) < high  # and lowered again
        cg.clear_memory_limit()
        assert int((mem / "memory.limit_in_bytes").read_text()) > 1 << 40
    finally:
        cg.remove()
        remove_empty_parents(cg.rel)


@pytest.mark.alone  # measures the disk against a quiet baseline: nothing beside it in make test
def test_blkio_throttle_caps_a_cgroups_direct_writes_exactly_and_lifts(tmp_path: Path) -> None:
    """The mechanism under `blkio_throttle`: a writer in a node's cgroup, capped at 20 MB/s, then not."""
    from cluster.local.cgroups import PREFIX, Cgroup, remove_empty_parents
    from rmqchaos.machine.procs import spawn
    cg = Cgroup(f"{PREFIX}/test-blkio-{os.getpid()}/broker-a")
    cg.create()
    dev = diskstats.device_of(tmp_path)

    def mb_s() -> float:  # 2 s of 1 MiB O_DIRECT writes from inside the cgroup
        p = spawn(["dd", "if=/dev/zero", f"of={tmp_path / 'dd.bin'}", "bs=1M", "count=200", "oflag=direct"],
                  join=cg.procs_files(), stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        p.send_signal(signal.SIGUSR1)  # dd prints its progress: bytes and rate so far
        time.sleep(0.3)
        p.kill()
        err = p.communicate()[1]
        copied = [x for x in err.splitlines() if "copied" in x][0]
        return int(copied.split()[0]) / 1e6 / float(copied.split(",")[2].split()[0])

    try:
        cg.throttle_io(dev.majmin, {"write_bps": 20_000_000})
        assert cg.io_throttle(dev.majmin) == {"write_bps": 20_000_000}
        capped = mb_s()
        cg.throttle_io(dev.majmin, {})
        assert cg.io_throttle(dev.majmin) == {}
        free = mb_s()
    finally:
        cg.remove()
        remove_empty_parents(cg.rel)
    assert 15 <= capped <= 24, capped  # the cap, as the kernel enforces it
    assert free > 2 * capped, (capped, free)  # and lifted
