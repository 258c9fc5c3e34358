"""Sealing a journal into its Parquet copy (no JVM): what a crash, a torn tail, a malformed record
and a second seal do. The analysis through sealed ledgers is in test_analysis.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from rmqchaos.ledger.journal_read import journal_tail
from rmqchaos.ledger.journal_write import LedgerWriter
from rmqchaos.ledger.schema import RECEIVE_KEYS, SEALED_EXTRA, intent_record, send_ledger_path
from rmqchaos import progress
from rmqchaos.ledger import seal as seal_mod
from rmqchaos.ledger.seal import LedgerError, read_seal, seal, seal_closed, sealed_path

pytestmark = pytest.mark.fast


def _intents(path: Path, n: int) -> None:
    w = LedgerWriter(path)
    for i in range(n):
        w.write_record(intent_record("intent", "r1", "w0-1", i + 1, f"k{i}", 1, "T", "sync", 1000 + i, 1001 + i))
    w.close()


def _rows(p: Path) -> list[tuple]:
    return duckdb.connect().execute("SELECT key, attempt_id, intended_ms FROM read_parquet(?) ORDER BY attempt_id",
                                    [str(p)]).fetchall()


def test_seal_keeps_every_record_typed_and_is_idempotent(tmp_path: Path) -> None:
    j = send_ledger_path(tmp_path, "w0-1")
    _intents(j, 1000)
    s = seal(j)
    assert s.redone and s.records == 1000 and s.torn_offset is None and s.warning is None
    assert s.path == sealed_path(j) == j.with_suffix(".parquet")
    assert _rows(s.path)[:2] == [("k0", 1, 1000), ("k1", 2, 1001)]
    types = dict(duckdb.connect().execute("SELECT name, type FROM parquet_schema(?)", [str(s.path)]).fetchall()[1:])
    assert types["attempt_id"] == "INT64" and types["attempt"] == "INT32" and types["app_ok"] == "BOOLEAN"
    again = seal(j)  # current: not redone
    assert not again.redone and again.records == 1000 and os.path.getmtime(s.path) == os.path.getmtime(again.path)
    with open(j, "ab") as f:  # the journal grew after its seal (a restarted writer): sealed again
        f.write(b'{"rec":"intent","producer_id":"w0-1","attempt_id":1001,"key":"k1000"}\n')
    assert read_seal(j) is None
    third = seal(j)
    assert third.redone and third.records == 1001


def test_torn_tail_is_carried_by_the_sealed_file(tmp_path: Path) -> None:
    j = send_ledger_path(tmp_path, "w0-1")
    _intents(j, 50)
    size = j.stat().st_size
    with open(j, "ab") as f:
        f.write(b'{"rec":"intent","run_id":"r1","produc')
    s = seal(j)
    assert (s.records, s.torn_offset, s.torn_bytes) == (50, size, 37)
    assert s.warning == f"{j}: torn last record at byte {size} (crash mid-write); not counted"
    back = read_seal(j)  # the finding travels with the file, not with the process that sealed it
    assert back is not None and (back.torn_offset, back.torn_bytes, back.records) == (size, 37, 50)
    assert j.read_bytes()[size:] == b'{"rec":"intent","run_id":"r1","produc'  # the journal is never modified
    assert not list(tmp_path.rglob(".*"))  # no temporary file left behind


def test_crashed_writer_journal_seals_to_its_complete_records(tmp_path: Path) -> None:
    """A real writer process SIGKILLed while writing: its journal, with what its spool still held,
    seals to every complete record."""
    j = send_ledger_path(tmp_path, "w0-1")
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
            "from rmqchaos.ledger.journal_write import LedgerWriter\n"
            "from rmqchaos.ledger.schema import intent_record\n"
            "LedgerWriter.SPOOL = 1 << 20\n"  # drained every ~14k records (by the write that finds it full)
            f"w = LedgerWriter({str(j)!r})\n"
            "i = 0\n"
            "while i < 10_000_000:\n"
            "    i += 1\n"
            "    w.write_record(intent_record('intent', 'r1', 'w0-1', i, 'k%d' % i, 1, 'T', 'sync', i, i))\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while (not j.exists() or journal_tail(j).end < 200_000) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait()
    assert j.read_bytes().count(b"\n") > 1000
    s = seal(j)  # appends the spool's records first
    complete = j.read_bytes().count(b"\n")
    assert s.records == complete
    ids = [r[1] for r in _rows(s.path)]
    assert sorted(ids) == list(range(1, complete + 1))  # nothing dropped, nothing twice (rows in no set order)


@pytest.mark.parametrize("line, why", [
    (b'{"rec":"intent","key":\n', "not JSON"),
    (b'{"rec":"intent","producer_id":"w0-1","attempt_id":"seven","key":"k1"}\n', "a wrong type"),
    (b'{"rec":"outcome","producer_id":"w0-1","attempt_id":7,"outcome":"ok"}\n', "no key"),
    (b'{"rec":"retry","producer_id":"w0-1","attempt_id":7,"key":"k1"}\n', "no such record kind"),
    (b'[1, 2]\n', "not an object"),
])
def test_malformed_record_fails_with_file_and_offset_and_seals_nothing(tmp_path: Path, line: bytes, why: str) -> None:
    j = send_ledger_path(tmp_path, "w0-1")
    _intents(j, 100)
    cut = j.stat().st_size
    with open(j, "ab") as f:
        f.write(line)
        f.write(b'{"rec":"intent","producer_id":"w0-1","attempt_id":500,"key":"k500"}\n')
    with pytest.raises(LedgerError) as e:
        seal(j)
    assert str(e.value).startswith(f"{j}: malformed record at byte {cut}:"), why
    assert not sealed_path(j).exists() and not list(tmp_path.rglob(".*"))


def test_receive_journal_and_empty_journal(tmp_path: Path) -> None:
    r = tmp_path / "ledgers" / "receive-c0.jsonl"
    r.parent.mkdir()
    r.write_text('{"run_id":"r1","key":"k1","queue_offset":5,"body_ok":true,"extra":"ignored"}\n')
    s = seal(r)
    assert s.records == 1
    cols = [x[0] for x in duckdb.connect().execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(s.path)]).fetchall()]
    # the schema's columns, in its order (unknown fields are not kept), then the msgId's halves
    assert tuple(cols) == RECEIVE_KEYS + tuple(n for n, _ in SEALED_EXTRA)
    e = tmp_path / "ledgers" / "receive-c1.jsonl"
    e.touch()  # a consumer that never received anything
    assert seal(e).records == 0


def _bad(j: Path) -> None:
    _intents(j, 10)
    with open(j, "ab") as f:
        f.write(b'{"rec":"retry","producer_id":"w0-1","attempt_id":7,"key":"k1"}\n')


def test_seal_closed_reports_a_malformed_journal_or_raises_when_strict(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setattr(progress, "say", lines.append)
    good = [send_ledger_path(tmp_path, f"w{i}-1") for i in range(3)]
    for j in good:
        _intents(j, 100)
    bad = send_ledger_path(tmp_path, "w9-1")
    _bad(bad)
    done = seal_closed([good[0], bad, good[1], good[2]], "send")  # after the load: reported, the rest sealed
    assert [x.journal for x in done] == good and all(x.redone and x.records == 100 for x in done)
    assert lines[0].startswith(f"not sealed: {bad}: malformed record at byte ")
    assert lines[1].startswith("sealed 3 send ledger(s): 300 records, ") and " MB of JSON in " in lines[1]
    assert not sealed_path(bad).exists()
    lines.clear()
    assert [x.redone for x in seal_closed(good, "send")] == [False] * 3 and lines == []  # current: nothing to say
    with pytest.raises(LedgerError) as e:  # the analysis: the malformed journal fails it
        seal_closed([good[0], bad], "send", strict=True)
    assert str(e.value).startswith(f"{bad}: malformed record at byte ")
    assert seal_closed([], "send", strict=True) == []


def test_a_seal_uses_one_connection_and_closes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[duckdb.DuckDBPyConnection] = []
    connect = duckdb.connect

    def counted(*a: object, **k: object) -> duckdb.DuckDBPyConnection:
        opened.append(connect(*a, **k))  # type: ignore[arg-type]
        return opened[-1]

    monkeypatch.setattr(duckdb, "connect", counted)
    j = send_ledger_path(tmp_path, "w0-1")
    _intents(j, 10)
    for redone in (True, False):  # sealed, then current
        opened.clear()
        assert seal(j).redone is redone and len(opened) == 1
        with pytest.raises(duckdb.ConnectionException):
            opened[0].execute("SELECT 1")
    opened.clear()
    _bad(j)
    with pytest.raises(LedgerError):
        seal(j)
    assert len(opened) == 1
    with pytest.raises(duckdb.ConnectionException):
        opened[0].execute("SELECT 1")


@pytest.mark.parametrize("kernel", ["copy_file_range", "fails at once", "fails midway"])
def test_copy_prefix_copies_exactly_n_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = os.urandom((1 << 22) * 2 + 12345)
    src.write_bytes(data)
    real = os.copy_file_range
    calls = [0]

    def flaky(fi: int, fo: int, n: int) -> int:  # an unsupported filesystem: EXDEV, after some bytes or at once
        calls[0] += 1
        if kernel == "fails at once" or calls[0] > 1:
            raise OSError(18, "Invalid cross-device link")
        return real(fi, fo, min(n, 1000))

    if kernel != "copy_file_range":
        monkeypatch.setattr(os, "copy_file_range", flaky)
    for n in (0, 1, 999, 1000, 1001, (1 << 22) + 7, len(data) - 1, len(data)):
        calls[0] = 0
        seal_mod._copy_prefix(src, dst, n)
        assert dst.read_bytes() == data[:n], n
    calls[0] = 0
    seal_mod._copy_prefix(src, dst, len(data) + 10)  # a shorter source: all of it, then stop
    assert dst.read_bytes() == data


def test_sealed_msgid_halves_are_exact_for_rocketmqs_form_and_null_otherwise(tmp_path: Path) -> None:
    """msg_hi/msg_lo: a msgId of 32 uppercase hex digits as its two 64-bit halves minus 2^63 (one to one,
    so equal halves mean equal msgIds); any other form (lower case, another length, a batch's list,
    a sign, a space) null, so the analysis matches those by their text."""
    ids = ["7F0000010064AB12CD34EF5600000001", "FFFFFFFFFFFFFFFF0000000000000000", "00000000000000000000000000000000",
           "7f0000010064ab12cd34ef5600000001", "7F0000010064AB12CD34EF560000001", "7F0000010064AB12CD34EF56000000012",
           "7F0000010064AB12CD34EF5600000001,7F0000010064AB12CD34EF5600000002", " F0000010064AB12CD34EF5600000001",
           "-F0000010064AB12CD34EF5600000001", "0x000010064AB12CD34EF5600000001", None]
    r = tmp_path / "ledgers" / "receive-c0.jsonl"
    r.parent.mkdir()
    r.write_text("".join(json.dumps({"run_id": "r", "key": f"k{i}", "msg_id": m}) + "\n" for i, m in enumerate(ids)))
    rows = duckdb.connect().execute("SELECT msg_id, msg_hi, msg_lo FROM read_parquet(?)", [str(seal(r).path)]).fetchall()
    for m, hi, lo in rows:
        if m is not None and len(m) == 32 and all(c in "0123456789ABCDEF" for c in m):
            assert (hi, lo) == (int(m[:16], 16) - 2**63, int(m[16:], 16) - 2**63), m
        else:
            assert hi is None and lo is None, m
    assert sum(hi is not None for _, hi, _ in rows) == 3
