"""The cost of powerfs, by hand (docs/powerfs.md): sequential 1 KiB appends into a preallocated
shared mapping, msync every 16 KiB (RocketMQ's flushCommitLogLeastPages=4), on a plain directory and
through the layer, side by side; then the same with write(2) appends and fsync.

    .venv/bin/python scripts/powerfs_speed.py [MiB per pass, default 64] [--no-writeback]
"""
from __future__ import annotations

import mmap
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cluster.substrate.powerfs import PowerFS  # noqa: E402
from rmqchaos.machine.procs import ProcessLog  # noqa: E402

REC, SYNC_EVERY = 1024, 16 * 1024


def mapped(d: Path, size: int) -> float:
    f = d / "mapped"
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, size)
    os.fsync(fd)
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED)
    rec = b"m" * REC
    t0 = time.perf_counter()
    for off in range(0, size, REC):
        mm[off:off + REC] = rec
        if (off + REC) % SYNC_EVERY == 0:
            mm.flush()  # msync(MS_SYNC), as MappedByteBuffer.force
    dt = time.perf_counter() - t0
    mm.close()
    os.close(fd)
    f.unlink()
    return dt


def written(d: Path, size: int) -> float:
    f = d / "written"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    rec = b"w" * REC
    t0 = time.perf_counter()
    for off in range(0, size, REC):
        os.write(fd, rec)
        if (off + REC) % SYNC_EVERY == 0:
            os.fsync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    f.unlink()
    return dt


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    size = int(args[0]) * 1024 * 1024 if args else 64 * 1024 * 1024
    writeback = "--no-writeback" not in sys.argv
    with tempfile.TemporaryDirectory(prefix="pfs-speed-", dir="/tmp") as tmp:
        run = Path(tmp)
        plain, real = run / "plain", run / "real"
        plain.mkdir()
        real.mkdir()
        p = PowerFS.mount(real, run / "mnt", run / "pfs.sock", ProcessLog(run / "processes.jsonl"),
                          writeback=writeback)
        try:
            for name, fn in (("mmap + msync", mapped), ("write + fsync", written)):
                a = min(fn(plain, size) for _ in range(3))
                b = min(fn(p.mount_point, size) for _ in range(3))
                mb = size / 1024 / 1024
                print(f"{name:14s} plain {mb / a:7.1f} MiB/s  powerfs {mb / b:7.1f} MiB/s  ratio {a / b:.2f}"
                      f"  (writeback cache {'on' if writeback else 'off'}, best of 3, {mb:.0f} MiB, 1 KiB records,"
                      f" sync every {SYNC_EVERY // 1024} KiB)")
        finally:
            p.unmount()


if __name__ == "__main__":
    main()
