"""Sealing: a closed ledger journal (JSON Lines) → its columnar copy (Parquet), the only form the
analysis reads (docs/ledgers.md "Sealed ledgers").

`ledgers/send-w0-123.jsonl` seals to `ledgers/send-w0-123.parquet`: every field of the schema
(rmqchaos/ledger/schema.py) as a typed column, plus what the seal found in the journal, kept in the
Parquet file's key-value metadata: the journal's size, and a torn last record (offset, bytes) when
its writer died mid-write (the records sealed are the file's row count). A journal that holds a malformed record is not
sealed: the seal fails with the file and the record's byte offset.

DuckDB parses the JSON (multi-threaded, ~1M rows/s on this 2-core machine, against ~0.3M for
Spark's JSON reader); the journal itself is never modified. Sealing is idempotent: a sealed copy
whose recorded journal size and mtime equal the journal's is current and is not redone (a journal
that grew after its seal, e.g. a consumer restarted, is sealed again).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqchaos.errors import UserError
from rmqchaos.ledger.journal_read import journal_tail
from rmqchaos.ledger.journal_write import recover_spool
from rmqchaos.ledger.schema import RECEIVE_FIELDS, SEALED_EXTRA, SEND_FIELDS, TXN_FIELDS

if TYPE_CHECKING:  # imported where used: sealing is the only DuckDB user here
    import duckdb

#: a send record without these cannot be classified; `rec` is one of SEND_RECS
SEND_REQUIRED = ("rec", "key", "producer_id", "attempt_id")
SEND_RECS = ("intent", "outcome")

_DUCK = {"string": "VARCHAR", "int": "INTEGER", "long": "BIGINT", "bool": "BOOLEAN"}
#: the sealed layout's version (KV metadata rmqchaos_sealed): a copy of another version is sealed again
SEALED_VERSION = "2"
# SEALED_EXTRA: a canonical msgId's 128 bits as two signed halves (value - 2^63, a bijection), else null
_MSG_HALVES = {"msg_hi": "((x >> 64)::HUGEINT - 9223372036854775808)::BIGINT",
               "msg_lo": "((x & 18446744073709551615::UHUGEINT)::HUGEINT - 9223372036854775808)::BIGINT"}
assert tuple(_MSG_HALVES) == tuple(n for n, _ in SEALED_EXTRA)
# the journal's columns, then the halves of `x`: the msgId as a 128-bit number when it is canonical
_SEALED_SELECT = ("SELECT * EXCLUDE (x), " + ", ".join(f"{e} AS {n}" for n, e in _MSG_HALVES.items())
                  + " FROM (SELECT *, CASE WHEN regexp_full_match(msg_id, '[0-9A-F]{32}') "
                  "THEN ('0x' || msg_id)::UHUGEINT END AS x FROM j)")


class LedgerError(UserError):
    """A ledger that cannot be analyzed as it is (malformed record): names the file and byte offset."""


@dataclass(frozen=True)
class Sealed:
    journal: Path
    path: Path  # the Parquet file
    records: int
    torn_offset: int | None  # byte offset of a torn last record (not sealed), else None
    torn_bytes: int
    seconds: float  # what this seal took (0.0 and redone=False when it was already current)
    redone: bool

    @property
    def warning(self) -> str | None:
        if self.torn_offset is None:
            return None
        return f"{self.journal}: torn last record at byte {self.torn_offset} (crash mid-write); not counted"


def sealed_path(journal: Path) -> Path:
    return Path(journal).with_suffix(".parquet")


def kind_of(journal: Path) -> str:
    """'send', 'receive' or 'txn', from the journal's name (send-*.jsonl, receive-*.jsonl, txn-*.jsonl)."""
    k = Path(journal).name.split("-", 1)[0]
    if k not in ("send", "receive", "txn"):
        raise ValueError(f"not a ledger journal: {journal}")
    return k


def _fields(kind: str) -> tuple[tuple[str, str], ...]:
    return {"send": SEND_FIELDS, "receive": RECEIVE_FIELDS, "txn": TXN_FIELDS}[kind]


def read_seal(journal: Path) -> Sealed | None:
    """The sealed copy's findings if it is current (sealed from the journal as it is now), else None."""
    import duckdb
    with duckdb.connect() as con:
        return _current(con, Path(journal))


def _current(con: duckdb.DuckDBPyConnection, journal: Path) -> Sealed | None:
    """read_seal() on an open DuckDB connection (seal() checks and seals on one)."""
    import duckdb
    pq = sealed_path(journal)
    if not pq.is_file():
        return None
    try:
        meta = dict(con.execute("SELECT key::VARCHAR, value::VARCHAR FROM parquet_kv_metadata(?)",
                                [str(pq)]).fetchall())
        row = con.execute("SELECT sum(num_rows) FROM parquet_file_metadata(?)", [str(pq)]).fetchone()
    except duckdb.Error:  # not a whole Parquet file (seal() renames only finished ones): seal again
        return None
    st = journal.stat()
    if (meta.get("rmqchaos_sealed") != SEALED_VERSION or meta.get("journal_bytes") != str(st.st_size)
            or meta.get("journal_mtime_ns") != str(st.st_mtime_ns)):
        return None
    torn = meta.get("torn_offset") or None
    return Sealed(journal, pq, int(row[0] or 0) if row else 0, int(torn) if torn else None,
                  int(meta.get("torn_bytes") or 0), 0.0, False)


def seal(journal: Path, threads: int | None = None) -> Sealed:
    """Seal one closed journal (idempotent). Raises LedgerError on a malformed record."""
    import duckdb
    journal = Path(journal)
    recover_spool(journal)  # a dead writer's last records, still in its spool: the journal's now
    with duckdb.connect() as con:  # one connection for the currency check and the seal, closed on every path
        current = _current(con, journal)
        if current is not None:
            return current
        return _seal(con, journal, threads)


def _seal(con: duckdb.DuckDBPyConnection, journal: Path, threads: int | None) -> Sealed:
    import duckdb
    t0 = time.monotonic()
    kind = kind_of(journal)
    fields = _fields(kind)
    st = journal.stat()
    size = st.st_size
    tail = journal_tail(journal)
    torn = tail.torn_offset
    src, tmp_src = journal, None
    out = sealed_path(journal)
    tmp = out.with_name(f".{out.name}.tmp")
    con.execute(f"SET threads = {threads or os.cpu_count() or 1}")
    # rows in the order the threads finish, not the journal's (the analysis only aggregates; each
    # record carries its own times): 8 journals of 30M records sealed in 26.7/27.9 s against 31.6/30.2 s
    con.execute("SET preserve_insertion_order = false")
    cols = "{" + ", ".join(f"'{n}': '{_DUCK[t]}'" for n, t in fields) + "}"
    try:
        if tail.complete < size:  # a writer that did not close: parse the complete records only (rare path)
            tmp_src = journal.with_name(f".{journal.name}.complete")
            _copy_prefix(journal, tmp_src, tail.complete)
            src = tmp_src
        con.execute(f"CREATE TEMP VIEW j AS SELECT * FROM read_json('{_sql_str(src)}', "
                    f"format = 'newline_delimited', columns = {cols}, maximum_object_size = 1048576)")
        torn_bytes = tail.end - tail.complete
        meta = {"rmqchaos_sealed": SEALED_VERSION, "journal": journal.name, "journal_bytes": str(size),
                "journal_mtime_ns": str(st.st_mtime_ns), "torn_offset": "" if torn is None else str(torn),
                "torn_bytes": str(torn_bytes), "unwritten_bytes": str(size - tail.end)}
        # zstd level 1: ~13 % less seal time than the default level 3 here, files ~15 % larger
        con.execute(f"COPY ({_SEALED_SELECT if kind != 'txn' else 'SELECT * FROM j'}) "  # a txn record has no msgId
                    f"TO '{_sql_str(tmp)}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1, "
                    f"KV_METADATA {_kv(meta)})")
        # the record-level rules JSON types cannot express, checked on the columns just written
        invalid = f"count(*) FILTER (WHERE {_invalid()})" if kind == "send" else "0"
        row = con.execute(f"SELECT {invalid}, count(*) FROM read_parquet(?)", [str(tmp)]).fetchone()
        assert row is not None
        if row[0]:
            raise _malformed(journal, fields, tail.complete, f"{row[0]} record(s) without an id or of no known kind")
        records = int(row[1])
        os.replace(tmp, out)
    except (duckdb.InvalidInputException, duckdb.ConversionException) as e:  # what a bad record raises
        raise _malformed(journal, fields, tail.complete, str(e).splitlines()[0]) from None
    finally:
        for f in (tmp, tmp_src):
            if f is not None:
                f.unlink(missing_ok=True)
    return Sealed(journal, out, records, torn, torn_bytes, time.monotonic() - t0, True)


def _invalid() -> str:
    return " OR ".join([f"{c} IS NULL" for c in SEND_REQUIRED] +
                       ["rec NOT IN (" + ", ".join(f"'{r}'" for r in SEND_RECS) + ")"])


def _sql_str(p: Path) -> str:
    return str(p).replace("'", "''")


def _kv(meta: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}: '{v.replace(chr(39), chr(39) * 2)}'" for k, v in meta.items()) + "}"


def _copy_prefix(src: Path, dst: Path, n: int) -> None:
    """Write the first `n` bytes of `src` to a new `dst`: never more (a live writer may still append)."""
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        fdi, fdo = fi.fileno(), fo.fileno()
        try:  # in the kernel, no copy through user space
            while n > 0:
                k = os.copy_file_range(fdi, fdo, n)
                if k == 0:  # end of `src`
                    return
                n -= k
        except OSError:  # a filesystem or kernel without it (EXDEV, EINVAL, ENOSYS, ...): the loop below
            pass  # goes on from the offsets the kernel left (a failed call copies nothing)
        while n > 0:
            chunk = os.read(fdi, min(n, 1 << 22))
            if not chunk:
                return
            n -= len(chunk)
            view = memoryview(chunk)
            while view:  # os.write may write less than asked
                view = view[os.write(fdo, view):]


def _malformed(journal: Path, fields: tuple[tuple[str, str], ...], complete: int, why: str) -> LedgerError:
    off = first_bad_offset(journal, fields, SEND_REQUIRED if kind_of(journal) == "send" else (),
                           {"rec": SEND_RECS} if kind_of(journal) == "send" else None, stop=complete)
    if off is not None:
        return LedgerError(f"{journal}: malformed record at byte {off}",
                           "a ledger must be complete JSON lines of the documented schema (docs/ledgers.md); "
                           "fix or remove the record and analyze again")
    return LedgerError(f"{journal}: malformed record ({why})",
                       "a ledger must be complete JSON lines of the documented schema (docs/ledgers.md)")


# ---------------------------------------------------------------- the journal, line by line (rare path)

_INT_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}


def _fits(v: Any, t: str) -> bool:
    """Whether `v` is a value of schema type `t` (null always is; any JSON value reads as a string)."""
    if v is None or t == "string":
        return True
    if t in _INT_RANGE:
        lo, hi = _INT_RANGE[t]
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
    return isinstance(v, bool)


def first_bad_offset(f: Path, fields: tuple[tuple[str, str], ...], required: tuple[str, ...] = (),
                     allowed: dict[str, tuple[str, ...]] | None = None, stop: int | None = None) -> int | None:
    """Offset of the first complete line before `stop` (the end of the complete records) that is not a JSON object
    whose fields have the schema's types, whose `required` fields are set and whose fields named in
    `allowed` hold one of the allowed values, or None."""
    off = 0
    with open(f, "rb") as fh:
        for line in fh:
            if stop is not None and off >= stop:
                return None
            if line.strip():
                try:
                    rec = json.loads(line)
                except ValueError:
                    return off
                if (not isinstance(rec, dict) or any(rec.get(k) is None for k in required)
                        or not all(_fits(rec.get(n), t) for n, t in fields)
                        or any(rec.get(k) not in v for k, v in (allowed or {}).items())):
                    return off
            off += len(line)
    return None


def seal_closed(journals: list[Path], what: str, strict: bool = False) -> list[Sealed]:
    """Seal `journals` (a closed writer's, or one a crashed writer left unsealed), two at a time, and
    say what the re-done seals cost; the Sealed of each, in the journals' order.

    strict (the analysis): a malformed record raises its LedgerError (the first, in the journals'
    order). Otherwise (after the load) it is reported, not raised, and that journal is left out: it
    stays as it is and `analyze` fails on it with the same line."""
    from rmqchaos.progress import say
    if not journals:
        return []
    done: list[Sealed] = []
    t0 = time.monotonic()
    # DuckDB parses each journal on every core; two journals at once cover a slow file's tail
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for fut in [pool.submit(seal, j) for j in journals]:
            try:
                done.append(fut.result())
            except LedgerError as e:
                if strict:
                    raise
                say(f"not sealed: {e}")
    new = [x for x in done if x.redone]
    if new:
        say(f"sealed {len(new)} {what} ledger(s): {sum(x.records for x in new):,} records, "
            f"{sum(x.journal.stat().st_size for x in new) / 1e6:.1f} MB of JSON in {time.monotonic() - t0:.2f}s")
    return done
