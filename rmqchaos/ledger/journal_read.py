"""What a journal holds when read back: where its complete records end (a torn last record, the
writer killed mid-record, detected and placed by byte offset, never dropped silently), and every
complete record of a ledger file with its torn or corrupt ones."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rmqchaos.ledger.schema import ledger_files


@dataclass(frozen=True)
class Tail:
    """Where a journal's records end. `complete`: the end of its last complete record; `end`: the
    end of what was written (`complete` unless a record is torn); after `end`, up to the file's
    size, only NUL bytes (never written) of a writer of an earlier version that did not close."""
    complete: int
    end: int
    size: int

    @property
    def torn_offset(self) -> int | None:
        return self.complete if self.end > self.complete else None


def journal_tail(f: Path) -> Tail:
    """Where `f`'s complete records end. A torn last record — the writer killed mid-record — is the
    last line if it lacks its newline or holds a NUL byte (a copy cut short, by a writer of an earlier
    version: it wrote through a mapping of the journal)."""
    size = os.path.getsize(f)
    with open(f, "rb") as fh:
        end = size  # strip the never-written NUL bytes after the last record
        while end > 0:
            start = max(0, end - (1 << 20))
            fh.seek(start)
            data = fh.read(end - start).rstrip(b"\0")
            if data:
                end = start + len(data)
                break
            end = start
        if end == 0:
            return Tail(0, 0, size)
        win = 1 << 16
        while True:  # the last line: from the newline before the last byte written
            start = max(0, end - win)
            fh.seek(start)
            data = fh.read(end - start)
            nl = data.rfind(b"\n", 0, len(data) - 1)
            if nl >= 0 or start == 0:
                break
            win *= 4
    last = data[nl + 1:]
    whole = last.endswith(b"\n") and b"\0" not in last
    return Tail(end if whole else start + nl + 1, end, size)


@dataclass
class LedgerFile:
    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    torn_offset: int | None = None  # byte offset of a torn last record (crash mid-write)
    torn_bytes: int = 0
    corrupt: list[int] = field(default_factory=list)  # offsets of unparsable complete lines

    @property
    def problem(self) -> str | None:
        if self.corrupt:
            return f"{self.path}: {len(self.corrupt)} unparsable record(s), first at byte {self.corrupt[0]}"
        if self.torn_offset is not None:
            return f"{self.path}: torn last record at byte {self.torn_offset} ({self.torn_bytes} bytes, crash mid-write)"
        return None


def read_ledger(path: Path) -> LedgerFile:
    """Every complete record of one ledger file, and where a torn or corrupt record sits."""
    lf = LedgerFile(Path(path))
    t = journal_tail(lf.path)
    with open(lf.path, "rb") as fh:
        data = fh.read(t.complete)
    if t.torn_offset is not None:
        lf.torn_offset, lf.torn_bytes = t.torn_offset, t.end - t.complete
    off = 0
    while off < len(data):
        nl = data.find(b"\n", off)
        line = data[off:nl]
        if line.strip():
            try:
                lf.records.append(json.loads(line))
            except ValueError:
                lf.corrupt.append(off)
        off = nl + 1
    return lf


def check_run(run_dir: Path) -> Iterator[LedgerFile]:
    for kind in ("send", "receive"):
        for f in ledger_files(run_dir, kind):
            yield read_ledger(f)
