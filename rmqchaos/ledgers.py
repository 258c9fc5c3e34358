"""The ledgers: the contract between the load, the consumers and the analysis (docs/ledgers.md).

The record schemas below are the one source: the load builds its records from them, the Spark
schemas and the DuckDB reference are derived from them, and a test holds the Java consumer's
records to them.

Format: JSON Lines, one file per writing process, append-only.
- Crash safety: a record is one line; a crash can only tear the last line, which the reader detects
  (no trailing newline or unparsable) and reports with file and byte offset — never drops silently.
- Spark: uncompressed JSON Lines split across tasks and, read with the explicit schema of
  analysis/schemas.py, need no inference pass; people can read them with `less` or `jq`.
- Cost: intents go to the kernel (one write()) before their send, so a SIGKILLed producer still
  leaves them; outcomes are buffered and written at most every FLUSH_S; everything is fsync'd every
  FSYNC_S and on close (machine crashes lose at most that window; process crashes lose no intent).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

# ---------------------------------------------------------------- the schema (one source)
# Field types: "string" | "int" (32 bit) | "long" (64 bit) | "bool". Every field may be null.

#: the fields of a send attempt's `intent` record, in the order written
SEND_INTENT = (("rec", "string"), ("run_id", "string"), ("producer_id", "string"), ("attempt_id", "long"),
               ("key", "string"), ("attempt", "int"), ("topic", "string"), ("policy", "string"),
               ("intended_ms", "long"), ("start_ms", "long"))
#: the fields of its `outcome` record: the intent's, then the answer
SEND_OUTCOME = SEND_INTENT + (
    ("end_ms", "long"), ("outcome", "string"), ("status", "string"), ("code", "int"), ("remark", "string"),
    ("error", "string"), ("sent", "bool"), ("msg_id", "string"), ("offset_msg_id", "string"), ("broker", "string"),
    ("queue_id", "int"), ("queue_offset", "long"), ("app_ok", "bool"))
#: every field a send ledger line may carry (intent lines carry a prefix of them)
SEND_FIELDS = SEND_OUTCOME
#: one delivery, as io.rmqchaos.Consumer writes it
RECEIVE_FIELDS = (("run_id", "string"), ("key", "string"), ("msg_id", "string"), ("offset_msg_id", "string"),
                  ("topic", "string"), ("origin_topic", "string"), ("broker", "string"), ("queue_id", "int"),
                  ("queue_offset", "long"), ("reconsume_times", "int"), ("consumer_id", "string"),
                  ("batch_size", "int"), ("batch_index", "int"), ("store_ms", "long"), ("receive_ms", "long"),
                  # what the self-verifying body (rmqchaos/body.py) says: its key, and whether it checked out
                  ("body_key", "string"), ("body_ok", "bool"))

INTENT_KEYS = tuple(n for n, _ in SEND_INTENT)
OUTCOME_KEYS = tuple(n for n, _ in SEND_OUTCOME)
RECEIVE_KEYS = tuple(n for n, _ in RECEIVE_FIELDS)


def intent_record(*values: Any) -> dict[str, Any]:
    """An intent record from its values in INTENT_KEYS order (the writer cannot drift from the schema)."""
    if len(values) != len(INTENT_KEYS):
        raise TypeError(f"an intent has {len(INTENT_KEYS)} fields, got {len(values)}")
    return dict(zip(INTENT_KEYS, values))


def outcome_record(*values: Any) -> dict[str, Any]:
    """An outcome record from its values in OUTCOME_KEYS order."""
    if len(values) != len(OUTCOME_KEYS):
        raise TypeError(f"an outcome has {len(OUTCOME_KEYS)} fields, got {len(values)}")
    return dict(zip(OUTCOME_KEYS, values))


# ---------------------------------------------------------------- files

FLUSH_S = 0.2
FSYNC_S = 1.0
LEDGER_DIR = "ledgers"


def send_ledger_path(run_dir: Path, producer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"send-{producer_id}.jsonl"


def receive_ledger_path(run_dir: Path, consumer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"receive-{consumer_id}.jsonl"


class LedgerWriter:
    """Append-only JSONL file owned by exactly one process (never shared between writers)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending: list[bytes] = []
        self._last_flush = self._last_sync = time.monotonic()
        self.records = 0

    @staticmethod
    def _line(rec: dict[str, Any]) -> bytes:
        return (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode()

    def write_through(self, rec: dict[str, Any]) -> None:
        """Hand `rec` (and everything buffered before it) to the kernel now: survives our SIGKILL."""
        self._pending.append(self._line(rec))
        self.records += 1
        self._write()

    def append(self, rec: dict[str, Any]) -> None:
        """Buffer `rec`; written with the next write_through or tick, at most FLUSH_S later."""
        self._pending.append(self._line(rec))
        self.records += 1

    def _write(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        self._last_flush = time.monotonic()

    def tick(self) -> None:
        """Call often (a flusher greenlet does): bounded flush and fsync intervals."""
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_S:
            self._write()
        if now - self._last_sync >= FSYNC_S:
            os.fsync(self.fd)
            self._last_sync = now

    def sync(self) -> None:
        self._write()
        os.fsync(self.fd)
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if self.fd >= 0:
            self.sync()
            os.close(self.fd)
            self.fd = -1


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
    data = Path(path).read_bytes()
    off = 0
    while off < len(data):
        nl = data.find(b"\n", off)
        if nl < 0:  # no newline: the writer died mid-record
            lf.torn_offset, lf.torn_bytes = off, len(data) - off
            break
        line = data[off:nl]
        if line.strip():
            try:
                lf.records.append(json.loads(line))
            except ValueError:
                lf.corrupt.append(off)
        off = nl + 1
    return lf


def ledger_files(run_dir: Path, kind: str) -> list[Path]:
    """kind: 'send' or 'receive'."""
    d = Path(run_dir) / LEDGER_DIR
    return sorted(d.glob(f"{kind}-*.jsonl")) if d.is_dir() else []


def check_run(run_dir: Path) -> Iterator[LedgerFile]:
    for kind in ("send", "receive"):
        for f in ledger_files(run_dir, kind):
            yield read_ledger(f)
