"""powerfs (cluster/substrate/powerfs.py, powerfs/): a real FUSE mount over a real directory, driven through its
control socket. After `abort` and `drop` a file reads exactly its synced bytes; an msync arrives as a
sync; the kernel's dirty pages never reach the layer after the abort; renames and files never synced
follow docs/powerfs.md; injected fsync/write errors hit matching files only; refusals are one line;
a mount whose maker was SIGKILLed is reaped. No JVM; needs root, /dev/fuse and the binary
scripts/setup.sh builds when Go is installed. Each test takes well under a second but the writeback
one (its 5 s tick)."""
from __future__ import annotations

import errno
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from cluster.substrate import powerfs
from cluster.substrate.powerfs import PowerFS
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcessLog, alive

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(not powerfs.BINARY.is_file(),
                       reason=f"{powerfs.BINARY} is not built (scripts/setup.sh builds it when Go is installed)"),
    pytest.mark.skipif(not powerfs.FUSE_DEV.exists(), reason="no /dev/fuse"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root"),
]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Path]:
    """A run directory (its processes.jsonl) with a real directory to pass through; nothing of ours
    may be left mounted or running under it afterwards."""
    (tmp_path / "real").mkdir()
    (tmp_path / "state.json").write_text("{}")  # a run directory's mark: reap_lost leaves its mounts alone
    yield tmp_path
    left = powerfs.reap_under(tmp_path)
    assert left == [], left


def mount(run: Path, **kw: object) -> PowerFS:
    return PowerFS.mount(run / "real", run / "mnt", run / "pfs.sock", ProcessLog(run / "processes.jsonl"), **kw)


def power_loss(p: PowerFS) -> dict:
    st = p.abort()
    assert st["ops_after_fence"] == 0
    ev = p.drop()
    p.unmount()
    return ev


def test_fsync_then_drop_restores_synced_bytes(run: Path) -> None:
    p = mount(run)
    f = p.mount_point / "commitlog"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"A" * 10000, 0)
    os.fsync(fd)
    os.pwrite(fd, b"B" * 100, 5000)  # a page written only in part
    os.pwrite(fd, b"C" * 5000, 9000)  # past the synced end: the file grows
    os.close(fd)  # close writes the cached pages back to the layer: unsynced, not durable
    st = p.stats()
    (s,) = st["files"]
    assert (s["path"], s["syncs"], s["synced_size"]) == ("commitlog", 1, 10000) and s["unsynced_bytes"] > 0
    ev = power_loss(p)
    (d,) = ev["files"]
    assert (d["path"], d["synced_size"], d["size_before"], d["syncs"]) == ("commitlog", 10000, 14000, 1)
    assert d["ranges"] == [[4096, 14000]] and d["bytes"] == 9904  # whole pages, as the kernel wrote them back
    assert d["last_sync_ms"] == s["last_sync_ms"]
    assert (run / "real" / "commitlog").read_bytes() == b"A" * 10000
    p = mount(run)  # and through a new mount, as a restarted broker reads it
    assert (p.mount_point / "commitlog").read_bytes() == b"A" * 10000
    p.unmount()


def test_with_an_expire_a_file_changed_long_enough_ago_is_written_back_and_a_newer_one_is_not(run: Path) -> None:
    """cluster.powerfs_expire: durable by age on the flusher's 5 s tick, as a kernel's writeback; 6 s."""
    p = mount(run, expire_s=1)
    old, new = p.mount_point / "brokerIdentity", p.mount_point / "config.json"
    old.write_bytes(b"brokerId=1")  # closed: the kernel sent its pages to the layer; never fsynced
    deadline = time.monotonic() + 12
    while p.stats()["totals"]["writebacks"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    new.write_bytes(b"{}")  # changed after the last tick: not durable yet
    st = p.stats()
    by = {f["path"]: f for f in st["files"]}
    assert by["brokerIdentity"]["writebacks"] == 1 and by["brokerIdentity"]["syncs"] == 0, by
    assert by["config.json"]["writebacks"] == 0 and by["config.json"]["unsynced_bytes"] == 2, by
    power_loss(p)
    assert (run / "real" / "brokerIdentity").read_bytes() == b"brokerId=1"
    assert (run / "real" / "config.json").read_bytes() == b""  # a file never synced drops to size 0


def test_mmap_msync_is_a_sync_and_unflushed_pages_drop(run: Path) -> None:
    p = mount(run)
    f = p.mount_point / "00000000000000000000"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 65536)  # a preallocated mapped file, as RocketMQ's
    os.fsync(fd)
    mm = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
    mm[0:4096] = b"M" * 4096
    mm.flush()  # msync(MS_SYNC): MappedByteBuffer.force
    assert p.stats()["files"][0]["syncs"] == 2
    mm[8192:12288] = b"N" * 4096
    mm[100:200] = b"P" * 100  # inside the page already flushed
    mm.close()
    os.close(fd)  # munmap + close: written back (no fsync), so the layer holds them, unsynced
    (s,) = p.stats()["files"]
    assert s["syncs"] == 2 and s["unsynced_bytes"] == 8192 and s["writes"] >= 1
    ev = power_loss(p)
    assert ev["files"][0]["ranges"] == [[0, 4096], [8192, 12288]]
    data = (run / "real" / f.name).read_bytes()
    assert len(data) == 65536 and data[:4096] == b"M" * 4096 and data[4096:] == bytes(65536 - 4096)


def test_abort_keeps_dirty_pages_from_the_layer(run: Path) -> None:
    """The issue's proof: pages dirtied through a shared mapping, not yet written back, never reach
    the layer once the connection is aborted, even when their writeback is forced."""
    p = mount(run)
    f = p.mount_point / "cq"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"A" * 8192, 0)
    os.fsync(fd)
    mm = mmap.mmap(fd, 8192, mmap.MAP_SHARED)
    mm[0:8192] = b"Z" * 8192  # dirty in the kernel's page cache only
    before = p.stats()["totals"]
    st = p.abort()
    assert st["serving"] is False and st["ops_after_fence"] == 0 and st["totals"] == before
    for force in (mm.flush, mm.close, lambda: os.fsync(fd), lambda: os.close(fd)):  # each would write back
        try:
            force()
        except OSError as e:
            assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), e
    time.sleep(0.2)
    after = p.stats()
    assert after["totals"] == before and after["ops_after_fence"] == 0
    assert (run / "real" / "cq").read_bytes() == b"A" * 8192
    assert p.drop()["files"] == []  # nothing unsynced ever arrived
    p.unmount()
    assert not any(m.mount_point == p.mount_point for m in powerfs.mounts())
    assert (run / "real" / "cq").read_bytes() == b"A" * 8192


def write(path: Path, data: bytes, sync: bool = False, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> None:
    fd = os.open(path, flags, 0o644)
    os.write(fd, data)
    if sync:
        os.fsync(fd)
    os.close(fd)


@pytest.mark.parametrize("auto_da_alloc", [True, False])
def test_renames_truncates_and_files_never_synced(run: Path, auto_da_alloc: bool) -> None:
    p = mount(run, auto_da_alloc=auto_da_alloc)
    m = p.mount_point
    write(m / "topics.json", b"old", sync=True)
    write(m / "topics.json.tmp", b"new")  # temp file + rename over the old one, no fsync
    os.rename(m / "topics.json.tmp", m / "topics.json")
    write(m / "offsets.json", b"v1", sync=True)
    write(m / "offsets.json", b"v2-longer")  # RocketMQ 5.5.0's MixAll.string2File: O_TRUNC, write, close
    write(m / "fresh", b"data")  # created, never synced
    write(m / "appended", b"x" * 100, sync=True)
    write(m / "appended", b"y" * 50, flags=os.O_WRONLY | os.O_APPEND)
    ev = power_loss(p)
    real = run / "real"
    assert sorted(os.listdir(real)) == ["appended", "fresh", "offsets.json", "topics.json"]  # entries are durable
    assert (real / "fresh").read_bytes() == b"" and (real / "appended").read_bytes() == b"x" * 100
    dropped = {f["path"] for f in ev["files"]}
    if auto_da_alloc:  # ext4's default: both replace patterns commit the new data
        assert (real / "topics.json").read_bytes() == b"new" and (real / "offsets.json").read_bytes() == b"v2-longer"
        assert dropped == {"appended", "fresh"}
    else:  # the data of a file never fsynced is gone, whatever its name
        assert (real / "topics.json").read_bytes() == b"" and (real / "offsets.json").read_bytes() == b"v1"
        assert dropped == {"appended", "fresh", "offsets.json", "topics.json"}


def test_fail_fsync_and_write_on_matching_files_only(run: Path) -> None:
    p = mount(run)
    (p.mount_point / "commitlog").mkdir()
    (p.mount_point / "config").mkdir()
    log, cfg = p.mount_point / "commitlog" / "0", p.mount_point / "config" / "topics.json"
    p.fail("fsync", "EIO", "commitlog/*")
    with pytest.raises(OSError) as e:
        write(log, b"m" * 100, sync=True)
    assert e.value.errno == errno.EIO
    write(cfg, b"{}", sync=True)  # not matched
    st = {f["path"]: f for f in p.stats()["files"]}
    assert st["commitlog/0"]["syncs"] == 0 and st["commitlog/0"]["unsynced_bytes"] == 100  # nothing made durable
    assert st["config/topics.json"]["syncs"] == 1
    assert [(f["path"], f["op"], f["errno"], f["count"]) for f in p.stats()["failures"]] == [
        ("commitlog/0", "fsync", "EIO", 1)]
    assert p.clear() == {"ok": True, "cleared": 1}
    write(log, b"m" * 100, sync=True)
    p.fail("write", "ENOSPC", "commitlog/*")  # with the writeback cache the write(2) succeeds; fsync reports it
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"n" * 100)
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == errno.ENOSPC
    os.close(fd)
    p.clear()
    p.fail("fsync", "EIO", "commitlog/*", until_ms=int(time.time() * 1000) - 1)  # a window already over
    write(log, b"o" * 10, sync=True)
    with pytest.raises(UserError, match="refused 'fail'.*not fsync or write"):
        p.fail("read", "EIO", "*")
    p.unmount()



def test_slow_holds_matching_fsyncs_and_one_cut_short_by_the_power_makes_nothing_durable(run: Path) -> None:
    p = mount(run)
    (p.mount_point / "commitlog").mkdir()
    log, other = p.mount_point / "commitlog" / "0", p.mount_point / "checkpoint"
    p.slow("fsync", 400, "commitlog/*")
    t0 = time.monotonic()
    write(log, b"a" * 100, sync=True)
    assert time.monotonic() - t0 >= 0.4  # held, then done: durable
    t0 = time.monotonic()
    write(other, b"c" * 10, sync=True)
    assert time.monotonic() - t0 < 0.4  # not matched
    (d,) = p.stats()["delays"]
    assert (d["path"], d["op"], d["count"], d["delay_ms"]) == ("commitlog/0", "fsync", 1, 400), d
    assert p.stats()["failures"] == []
    # the power goes while an fsync is held: it made nothing durable, and the drop takes its bytes
    p.clear()
    p.slow("fsync", 1500, "commitlog/*")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"b" * 50)
    answer: list[int] = []

    def held_fsync() -> None:
        try:
            os.fsync(fd)
            answer.append(0)
        except OSError as e:
            answer.append(e.errno or -1)
    t = threading.Thread(target=held_fsync)
    t.start()
    time.sleep(0.5)  # the fsync is held in the layer now
    ev = power_loss(p)
    t.join(10)
    assert answer and answer[0] != 0, answer  # never reported durable (EIO, or the connection's end)
    with pytest.raises(OSError):  # the connection is gone: close's writeback fails (ENOTCONN)
        os.close(fd)
    assert (run / "real" / "commitlog" / "0").read_bytes() == b"a" * 100, ev
    with pytest.raises(UserError, match="refused 'slow'.*not a number of ms"):
        p2 = mount(run)
        try:
            p2.slow("fsync", 0, "*")
        finally:
            p2.unmount()

def test_full_makes_statfs_read_full_as_rocketmq_computes_it_and_writes_still_succeed(run: Path) -> None:
    from rmqchaos.machine.diskstats import used_ratio

    def used_pct(path: Path) -> float:
        return 100.0 * used_ratio(path)
    p = mount(run)
    real = used_pct(p.mount_point)
    assert abs(real - used_pct(run / "real")) < 1.0  # passed through while no rule is in force
    assert p.full(95)["full_pct"] == 95 and p.stats()["full_pct"] == 95
    assert 94.9 <= used_pct(p.mount_point) <= 95.1
    write(p.mount_point / "f", b"x" * 4096, sync=True)  # only the figures changed: the write succeeds
    assert (run / "real" / "f").read_bytes() == b"x" * 4096
    p.full(0)
    assert abs(used_pct(p.mount_point) - real) < 1.0
    p.full(99)
    assert p.clear()["ok"] and abs(used_pct(p.mount_point) - real) < 1.0  # clear lifts it too
    with pytest.raises(UserError, match="refused 'full'.*not a whole number in 0..100"):
        p.command("full 101")
    p.unmount()


def test_refusals_are_one_line(run: Path, tmp_path_factory: pytest.TempPathFactory,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    log = ProcessLog(run / "processes.jsonl")
    with monkeypatch.context() as m:  # a host without FUSE: said before anything is started
        m.setattr(powerfs, "FUSE_DEV", run / "no-such-fuse")
        with pytest.raises(UserError, match=r"no-such-fuse is missing \(power loss needs FUSE\)"):
            PowerFS.mount(run / "real", run / "mnt", run / "pfs.sock", log)
    assert not (run / "pfs.sock").exists()  # nothing started
    assert not log.path.exists() or "powerfs" not in log.path.read_text()
    outside = tmp_path_factory.mktemp("elsewhere")
    with pytest.raises(UserError, match="refusing to mount powerfs at .*: outside the run directory"):
        PowerFS.mount(run / "real", outside / "mnt", run / "pfs.sock", log)
    with pytest.raises(UserError, match="is not built .*run scripts/setup.sh with Go installed"):
        PowerFS.mount(run / "real", run / "mnt", run / "pfs.sock", log, binary=run / "no-such-binary")
    p = mount(run)
    with pytest.raises(UserError, match="it is a mount point already"):
        PowerFS.mount(run / "real", run / "mnt", run / "pfs2.sock", log)
    p.unmount()
    assert not (run / "pfs2.sock").exists()


CHILD = """
import sys, time
from pathlib import Path
from cluster.substrate.powerfs import PowerFS
from rmqchaos.machine.procs import ProcessLog
run = Path(sys.argv[1])
p = PowerFS.mount(run / "real", run / "mnt", run / "pfs.sock", ProcessLog(run / "processes.jsonl"))
(p.mount_point / "f").write_bytes(b"x")
print(p.pid, p.start, flush=True)
time.sleep(60)
"""


def test_a_mount_outlives_its_killed_maker_and_is_reaped(run: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        pid, start = (int(x) for x in child.stdout.readline().split())  # type: ignore[union-attr]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert alive(pid, start) and [m.pid for m in powerfs.mounts() if m.mount_point == run / "mnt"] == [pid]
    done = powerfs.reap_run(run, ProcessLog(run / "processes.jsonl"))  # what the local backend's `down` calls
    assert len(done) == 1 and "unmounted" in done[0] and "aborted" not in done[0], done
    assert not alive(pid, start) and not any(m.pid == pid for m in powerfs.mounts())
    assert (run / "real" / "f").read_bytes() == b"x"


def test_a_mount_whose_server_died_is_reaped(run: Path) -> None:
    p = mount(run)
    os.kill(p.pid, signal.SIGKILL)
    p._proc.wait()  # type: ignore[union-attr]
    assert any(m.mount_point == p.mount_point for m in powerfs.mounts())  # a dead mount: ENOTCONN
    done = [d for d in powerfs.reap_lost() if str(p.mount_point) in d]
    assert len(done) == 1 and "its server is gone" in done[0] and "aborted" in done[0]
    assert not any(m.mount_point == p.mount_point for m in powerfs.mounts())
