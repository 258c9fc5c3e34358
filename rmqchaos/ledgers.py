"""The ledgers: the contract between the load, the consumers and the analysis (docs/ledgers.md).

The record schemas below are the one source: the load builds its records from them, the Spark
schemas and the DuckDB reference are derived from them, and a test holds the Java consumer's
records to them.

Format: JSON Lines, one file per writing process, append-only.
- Crash safety: a record is one line; a crash can only tear the last line, which the reader detects
  (no trailing newline, or a NUL byte: `journal_tail`) and reports with file and byte offset — never
  drops silently.
- Durability and cost (bench ledger): every record is copied into a shared-memory spool of its
  writer before the call returns (an intent before its send), so a SIGKILLed producer leaves all of
  them, without a system call per record; the spool is appended to the journal every DRAIN_S and
  the journal fsync'd every FSYNC_S and on close (a machine crash loses at most that window); a
  dead writer's spool is appended by `recover_spool` (the seal calls it).
- Analysis: a closed journal is sealed into Parquet (rmqchaos/seal.py); people read the journals
  with `less` or `jq`.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from rmqchaos.procs import alive, starttime

try:  # the send ledger's lines in C, built by scripts/setup.sh from rmqchaos/native/send_lines.c
    from rmqchaos._send_lines import intent as c_intent, outcome as c_outcome
except ImportError:  # not built: the Python path alone, the same bytes
    c_intent = c_outcome = None

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

#: columns the seal adds to both sealed ledgers (rmqchaos/seal.py, docs/ledgers.md): the msgId as two
#: numbers when it has RocketMQ's form (32 uppercase hex digits; null otherwise), so that the analysis
#: compares msgIds inside its numeric per-key aggregations, exactly, instead of joining strings
SEALED_EXTRA = (("msg_hi", "long"), ("msg_lo", "long"))

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


class SendLines:
    """The send ledger's two lines of one attempt, as bytes, for one producer process: the line the
    writer would make of intent_record(...) / outcome_record(...), at a fraction of the CPU (the
    ledger's cost is per attempt, on the producer's hot path; bench ledger).

    Both lines are made in C (`c_intent`, `c_outcome`: about half the time of the Python paths in a
    tight loop), or in Python for a value the C encoder does not
    write (a string JSON must escape, an int beyond 64 bits): the intent line as one %-format of a
    template holding the process's constants (run id, producer id, policy); an outcome repeats its
    intent's fields, so it is made from the intent line by slicing, and only the answer is encoded,
    through orjson. tests/test_ledgers.py holds the bytes equal to json.dumps of the records, field
    order included, on both paths."""

    _INTENT_HEAD = b'{"rec":"intent",'
    _OUTCOME_HEAD = b'{"rec":"outcome",'
    _CUT = len(_INTENT_HEAD)

    def __init__(self, run_id: str, producer_id: str, policy: str) -> None:
        assert INTENT_KEYS[:4] == ("rec", "run_id", "producer_id", "attempt_id") and INTENT_KEYS[7] == "policy"
        # the constant parts around the values: up to "attempt_id": and after the topic
        self._head = (self._INTENT_HEAD + b'"run_id":' + orjson.dumps(run_id) + b',"producer_id":'
                      + orjson.dumps(producer_id) + b',"attempt_id":')
        self._policy = b',"policy":' + orjson.dumps(policy)
        self._template = (self._head.replace(b"%", b"%%") + b'%d,"key":%b,"attempt":%d,"topic":%b'
                          + self._policy.replace(b"%", b"%%") + b',"intended_ms":%d,"start_ms":%d}\n')

    def intent(self, attempt_id: int, key: str, attempt: int, topic: str, intended_ms: int, start_ms: int) -> bytes:
        return (c_intent is not None and c_intent(self._head, self._policy, attempt_id, key, attempt, topic,
                                                  intended_ms, start_ms)) or self.intent_py(
            attempt_id, key, attempt, topic, intended_ms, start_ms)

    def intent_py(self, attempt_id: int, key: str, attempt: int, topic: str, intended_ms: int, start_ms: int) -> bytes:
        """The intent line without C."""
        return self._template % (attempt_id, orjson.dumps(key), attempt, orjson.dumps(topic), intended_ms, start_ms)

    def outcome_of(self, intent: bytes, r: Any, app_ok: bool | None) -> bytes:
        """The outcome line of the attempt whose intent line is `intent`, from its answer `r` (an object
        with rmqclient's SendResult attributes: the ledger's msg_id is its uniq_key, offset_msg_id its
        msg_id)."""
        return (c_outcome is not None and c_outcome(intent, r, app_ok)) or self.outcome(
            intent, r.end_ms, r.outcome, r.status, r.code, r.remark, r.error, r.sent, r.uniq_key, r.msg_id, r.broker,
            r.queue_id, r.queue_offset, app_ok)

    @classmethod
    def outcome(cls, intent: bytes, end_ms: int | None, outcome: str | None, status: str | None, code: int | None,
                remark: str | None, error: str | None, sent: bool | None, msg_id: str | None,
                offset_msg_id: str | None, broker: str | None, queue_id: int | None, queue_offset: int | None,
                app_ok: bool | None) -> bytes:
        """The outcome line of the attempt whose intent line is `intent`."""
        answer = orjson.dumps({"end_ms": end_ms, "outcome": outcome, "status": status, "code": code, "remark": remark,
                               "error": error, "sent": sent, "msg_id": msg_id, "offset_msg_id": offset_msg_id,
                               "broker": broker, "queue_id": queue_id, "queue_offset": queue_offset, "app_ok": app_ok})
        # the intent's fields: between its head and its closing "}\n"
        return cls._OUTCOME_HEAD + intent[cls._CUT:-2] + b"," + answer[1:] + b"\n"


# ---------------------------------------------------------------- files

FSYNC_S = 1.0
DRAIN_S = 0.1  # the load's flusher drains each writer's spool into its journal this often
LEDGER_DIR = "ledgers"


def record_line(rec: dict[str, Any]) -> bytes:
    """A record's journal line. orjson: the same compact UTF-8 line as json.dumps(separators=(",", ":"),
    ensure_ascii=False), in a tenth of the CPU."""
    return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)


def send_ledger_path(run_dir: Path, producer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"send-{producer_id}.jsonl"


def receive_ledger_path(run_dir: Path, consumer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"receive-{consumer_id}.jsonl"


SPOOL_DIR = Path("/dev/shm")  # tmpfs: a spool's pages are reused, never written back
#: a spool's header: magic, the journal's size its first byte follows (`base`), the writer's pid and
#: kernel start time (a spool whose writer lives is never touched), the journal's device and inode
#: (a spool is never appended to another file of the same name), then the journal's path
_SPOOL_HEAD = struct.Struct("<8sQQQQQ")
_SPOOL_MAGIC = b"RMQSPOOL"
_SPOOL_DATA = 4096  # where its records start


def spool_paths(journal: Path) -> tuple[Path, Path]:
    """Where a writer of `journal` spools its records: on tmpfs (/dev/shm) when it is writable, else
    beside the journal (both are looked at when recovering)."""
    real = Path(os.path.realpath(journal))
    digest = hashlib.sha256(str(real).encode()).hexdigest()[:24]
    return SPOOL_DIR / f"rmqchaos-{digest}.spool", real.with_name(f".{real.name}.spool")


def _spool_head(f: Any) -> tuple[int, int, int, int, int, str] | None:
    """A spool's header (base, pid, start time, dev, inode, journal path) from its open file, or
    None when it is not a spool of ours."""
    head = f.read(_SPOOL_DATA)
    if len(head) < _SPOOL_DATA or head[:8] != _SPOOL_MAGIC:
        return None
    _, base, pid, start, dev, ino = _SPOOL_HEAD.unpack_from(head)
    return base, pid, start, dev, ino, os.fsdecode(head[_SPOOL_HEAD.size:].split(b"\0", 1)[0])


def recover_spool(journal: Path, wait: bool = True) -> int:
    """Append what a dead writer of `journal` left in its spool (records not yet drained into the
    journal, perhaps a torn last one) and remove the spool. Returns the bytes appended; 0 when there
    is no spool, nothing was left, or its writer still runs (never touched then). One recoverer at a
    time: `wait` for another one to finish, or leave the spool to it."""
    journal = Path(journal)
    added = 0
    for sp in spool_paths(journal):
        try:
            f = open(sp, "rb")
        except (FileNotFoundError, PermissionError):  # none, or another user's
            continue
        with f:
            head = _spool_head(f)
            if head is None:
                continue
            base, pid, start, dev, ino, _ = head
            if alive(pid, start):
                return 0
            try:  # new writers of a distributed load sweep at once; the seal may run beside them
                fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                continue
            if os.fstat(f.fileno()).st_nlink == 0:  # another recoverer finished it before our lock
                continue
            try:
                st: os.stat_result | None = os.stat(journal)
            except FileNotFoundError:
                st = None
            # its journal, unless that is gone: a journal only grows past a spool's base (a new file
            # of the same name, even on the same inode, is smaller)
            if st is not None and (st.st_dev, st.st_ino) == (dev, ino) and st.st_size >= base:
                body = f.read()
                end = body.find(b"\0")  # the spool is NUL after its last record (cleared when drained)
                end = len(body) if end < 0 else end
                # the journal may already hold some of them: the writer died between its write() and
                # clearing the spool
                skip = st.st_size - base
                if skip < end:
                    fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
                    try:
                        _write_all(fd, memoryview(body)[skip:end])
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    added += end - skip
            sp.unlink()  # under the lock: no writer makes a spool of this name before we are done
    return added


def _write_all(fd: int, data: bytes | memoryview) -> None:
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])


def sweep_spools() -> int:
    """Recover every spool on tmpfs whose writer is dead (its journal named in its header), and
    remove those whose journal is gone (a run directory deleted before its seal). Returns how many
    were handled. A new writer calls it: a dead one's spool does not outlive the next load."""
    n = 0
    for sp in SPOOL_DIR.glob("rmqchaos-*.spool"):
        try:
            with open(sp, "rb") as f:
                head = _spool_head(f)
        except OSError:  # gone meanwhile, or another user's
            continue
        if head is None or alive(head[1], head[2]):
            continue
        journal = Path(head[5])
        if spool_paths(journal)[0] != sp:  # not the name its journal's path gives: not ours to judge
            continue
        recover_spool(journal, wait=False)
        n += 1
    return n


class LedgerWriter:
    """Append-only JSONL journal owned by exactly one process (never shared between writers).

    A record is copied into a small shared-memory spool (`spool_paths`: a file on tmpfs, mapped),
    where the process's death cannot take it back, without a system call; `drain`, every DRAIN_S in
    the load, appends the spool to the journal with one write() and clears it for reuse; `fsync`,
    every FSYNC_S, makes the journal durable. Why (bench ledger, 4,000 msg/s): records copied
    straight into a mapping of the journal faulted in its new pages (+629 minor faults per 10k acked
    in 64 MiB mapping steps, +1,821 in 4 MiB ones), against +30 through the spool, whose pages are
    reused; in a tight loop 0.7 µs of kernel time per attempt against 0.2.
    A writer that dies leaves its last records in the spool: `recover_spool` (called by the seal and
    by the next writer of the same journal) appends them; a record whose copy the kill cut short
    becomes a torn last line (`journal_tail`). Only `fsync` may run in another thread."""

    #: the spool's size (allocated whole at start): a drain is due long before it fills (4,000 msg/s
    #: write 0.3 MB in DRAIN_S); a full spool is drained by the write that finds it full
    SPOOL = 4 << 20

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sweep_spools()  # dead writers' spools on tmpfs: a killed load's last records reach their journals
        recover_spool(self.path)  # this journal's, wherever it is, before ours replaces it
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self.fd).st_size:  # appending to an existing journal: after its last complete record
            tail = journal_tail(self.path)
            # cut what follows it: a dead writer's torn record (ours would continue its line and make
            # it malformed), NUL bytes a mapping writer of an earlier version left
            if tail.complete < tail.size:
                os.ftruncate(self.fd, tail.complete)
        st = os.fstat(self.fd)
        self._base = st.st_size  # the journal's size: where the spool's first byte goes
        shm, beside = spool_paths(self.path)
        spool = shm if os.access(SPOOL_DIR, os.W_OK) else beside
        sfd = os.open(spool, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = _SPOOL_DATA + self.SPOOL
            try:  # its pages now: a full tmpfs fails here, not as a SIGBUS on a write into the mapping
                os.posix_fallocate(sfd, 0, size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    os.close(self.fd)
                    os.unlink(spool)
                    raise
                os.ftruncate(sfd, size)
            self._map = mmap.mmap(sfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(sfd)
        self._spool = spool
        _SPOOL_HEAD.pack_into(self._map, 0, _SPOOL_MAGIC, self._base, os.getpid(), starttime(os.getpid()) or 0,
                              st.st_dev, st.st_ino)
        name = os.fsencode(os.path.realpath(self.path))[: _SPOOL_DATA - _SPOOL_HEAD.size - 1]
        self._map[_SPOOL_HEAD.size:_SPOOL_HEAD.size + len(name)] = name
        self._map.seek(_SPOOL_DATA)
        self._write = self._map.write  # its own position is the spool's end: a C call per record
        self._zeros = bytes(self.SPOOL)  # what a drain clears the spool with (calloc'd, never written)
        self._last_sync = time.monotonic()

    def write_through(self, line: bytes) -> None:
        """Append a record's line (SendLines, or `record_line`): in shared memory when this returns,
        so it survives our SIGKILL (an intent is written so before its send)."""
        try:
            self._write(line)  # all of it, or ValueError and nothing when it does not fit
        except ValueError:
            self.drain()
            if len(line) <= self.SPOOL:
                self._write(line)
            else:  # larger than the spool: straight to the journal
                self._append(line)
                self._set_base(self._base + len(line))

    def write_record(self, rec: dict[str, Any]) -> None:
        self.write_through(record_line(rec))

    @property
    def position(self) -> int:
        """The end of the records written so far (the journal's size once drained)."""
        return self._base + self._map.tell() - _SPOOL_DATA

    def _set_base(self, base: int) -> None:
        self._base = base
        struct.pack_into("<Q", self._map, 8, base)

    def _append(self, data: bytes | memoryview) -> None:
        """The journal grows by all of `data`, or (a failed write: disk full) not at all: its size
        stays the spool's base, which the next drain and a recovery count on."""
        try:
            _write_all(self.fd, data)
        except OSError:
            os.ftruncate(self.fd, self._base)
            raise

    def drain(self) -> None:
        """Append the spooled records to the journal (one write(); the page cache has them) and clear
        the spool. In the writing thread only."""
        end = self._map.tell()
        n = end - _SPOOL_DATA
        if n <= 0:
            return
        view = memoryview(self._map)
        try:
            self._append(view[_SPOOL_DATA:end])
            # the spool's first byte cleared before its new base is recorded: a recovery finds it
            # empty from here on, whether the base (8 bytes, not one store) and the rest got written
            view[_SPOOL_DATA] = 0
            self._set_base(self._base + n)
            view[_SPOOL_DATA + 1:end] = memoryview(self._zeros)[:n - 1]
        finally:
            view.release()
        self._map.seek(_SPOOL_DATA)

    def due(self) -> bool:
        """Whether the journal's last fsync is FSYNC_S old (a flusher drains often and then calls fsync)."""
        return time.monotonic() - self._last_sync >= FSYNC_S

    def fsync(self) -> None:
        """What was drained, to disk. Releases the GIL: a caller may run it in a thread while the
        producer goes on (the brokers keep this disk busy: a sync can take tens of ms)."""
        t = time.monotonic()
        os.fsync(self.fd)
        self._last_sync = t

    def sync(self) -> None:
        """Every record written so far, in the journal and on disk."""
        self.drain()
        self.fsync()

    def close(self) -> None:
        if self.fd >= 0:
            self.sync()
            self._map.close()
            os.unlink(self._spool)  # after the fsync: a kill before it leaves an empty spool behind
            os.close(self.fd)
            self.fd = -1


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


def ledger_files(run_dir: Path, kind: str) -> list[Path]:
    """kind: 'send' or 'receive'."""
    d = Path(run_dir) / LEDGER_DIR
    return sorted(d.glob(f"{kind}-*.jsonl")) if d.is_dir() else []


def check_run(run_dir: Path) -> Iterator[LedgerFile]:
    for kind in ("send", "receive"):
        for f in ledger_files(run_dir, kind):
            yield read_ledger(f)
