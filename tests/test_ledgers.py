"""The send ledger (no JVM): its lines byte for byte the schema's records, and its writer: the spool, the
drains, and the recovery of a dead writer's records."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqchaos.ledger.lines import SendLines
from rmqchaos.ledger.schema import OUTCOME_KEYS, intent_record, outcome_record

pytestmark = pytest.mark.fast

text = st.text(max_size=40)  # quotes, backslashes, %, control characters, any unicode
opt_text = st.none() | text
long_ = st.integers(min_value=-2**63, max_value=2**63 - 1)
opt_int = st.none() | st.integers(min_value=-2**31, max_value=2**31 - 1)


def _line(rec: dict) -> bytes:
    return (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


@settings(max_examples=300, deadline=None)
@given(run_id=text, producer=text, policy=text, aid=long_, key=text, attempt=st.integers(0, 2**31 - 1), topic=text,
       intended=long_, start=long_, end=st.none() | long_, outcome=opt_text, status=opt_text, code=opt_int,
       remark=opt_text, error=opt_text, sent=st.none() | st.booleans(), msg_id=opt_text, omid=opt_text,
       broker=opt_text, qid=opt_int, qoff=st.none() | long_, ok=st.none() | st.booleans())
def test_lines_equal_the_records_serialised(run_id, producer, policy, aid, key, attempt, topic, intended, start, end,
                                            outcome, status, code, remark, error, sent, msg_id, omid, broker, qid,
                                            qoff, ok) -> None:
    from rmqchaos.ledger.lines import c_intent
    lines = SendLines(run_id, producer, policy)
    intent = lines.intent(aid, key, attempt, topic, intended, start)
    base = (run_id, producer, aid, key, attempt, topic, policy, intended, start)
    assert intent == _line(intent_record("intent", *base))
    assert lines.intent_py(aid, key, attempt, topic, intended, start) == intent  # the path without C
    # C writes it, or declines a key or topic that JSON must escape
    assert c_intent(lines._head, lines._policy, aid, key, attempt, topic, intended, start) in (
        intent, *((None,) if {'"', "\\"} & set(key + topic) or min(key + topic + " ") < " "
                  or any(0xD800 <= ord(c) < 0xE000 for c in key + topic) else ()))
    answer = (end, outcome, status, code, remark, error, sent, msg_id, omid, broker, qid, qoff, ok)
    line = lines.outcome(intent, *answer)
    assert line == _line(outcome_record("outcome", *base, *answer))
    assert tuple(json.loads(line)) == OUTCOME_KEYS  # the schema's field order


hexid = st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32)
i32 = st.integers(min_value=-2**31, max_value=2**31 - 1)


@st.composite
def answers(draw) -> tuple:
    """(end, outcome, status, code, remark, error, sent, uniq_key, msg_id, broker, queue_id, queue_offset, app_ok):
    half of them the common answer (stored with SEND_OK and accepted) but for one field drawn from
    anything; the other half anything (text with quotes, backslashes, control characters, surrogates;
    ints beyond 64 bits; floats)."""
    big = st.integers(min_value=-2**70, max_value=2**70) | st.sampled_from([-2**63, 2**63 - 1, 2**63, -2**63 - 1])
    anything = (st.none() | big, st.sampled_from(["ok", "error", "timeout"]) | opt_text,
                st.sampled_from(["SEND_OK", "FLUSH_DISK_TIMEOUT"]) | opt_text, st.sampled_from([0, 10, False]) | opt_int,
                opt_text, opt_text, st.sampled_from([True, False, None, 1]), opt_text | hexid, opt_text | hexid,
                opt_text, opt_int | st.just(True), st.none() | big | st.just(False) | st.floats(allow_nan=False),
                st.sampled_from([True, False, None, 1]))
    if not draw(st.booleans()):
        return tuple(draw(x) for x in anything)
    common = [draw(long_), "ok", "SEND_OK", 0, None, None, True, draw(hexid), draw(hexid), draw(text), draw(i32),
              draw(long_), True]
    i = draw(st.integers(0, len(common)))  # len(common): none perturbed
    if i < len(common):
        common[i] = draw(anything[i])
    return tuple(common)


@settings(max_examples=600, deadline=None)
@given(answer=answers())
def test_outcome_of_an_answer_is_the_record_serialised_on_both_paths(answer: tuple) -> None:
    """The C encoder writes a line (or declines), and `outcome_of` gives the line the orjson path gives;
    where both encode the record, json.dumps of it gives the same bytes."""
    from types import SimpleNamespace

    from rmqchaos.ledger.lines import c_outcome
    lines = SendLines("r1", "w0-1", "sync")
    intent = lines.intent(7, "k7", 1, "T", 100, 101)
    r = SimpleNamespace(**dict(zip(("end_ms", "outcome", "status", "code", "remark", "error", "sent", "uniq_key",
                                    "msg_id", "broker", "queue_id", "queue_offset"), answer)))
    try:
        want = lines.outcome(intent, *answer)
    except TypeError:  # orjson refuses it (a lone surrogate, an int beyond 64 bits): so must the C path
        assert c_outcome(intent, r, answer[-1]) is None
        return
    assert c_outcome(intent, r, answer[-1]) in (None, want)
    assert lines.outcome_of(intent, r, answer[-1]) == want
    if not any(isinstance(v, float) for v in answer):  # json.dumps writes floats its own way
        assert want == _line(outcome_record("outcome", "r1", "w0-1", 7, "k7", 1, "T", "sync", 100, 101, *answer))


def test_the_c_encoder_is_built_and_writes_the_common_lines() -> None:
    """scripts/setup.sh builds it; an attempt of the load and a stored answer of the real producer go
    through it."""
    from rmqchaos.ledger.lines import c_intent, c_outcome
    from rmqclient.producer import SendResult
    assert c_outcome is not None and c_intent is not None, "rmqchaos/ledger/_send_lines*.so is missing: run scripts/setup.sh"
    lines = SendLines("r1", "w0-1", "sync")
    intent = c_intent(lines._head, lines._policy, 7, "rmqchaos-ab12cd-w0-4242-7", 1, "rmqchaos_T", 100, 101)
    assert intent == lines.intent_py(7, "rmqchaos-ab12cd-w0-4242-7", 1, "rmqchaos_T", 100, 101)
    r = SendResult(outcome="ok", topic="T", key="k7", start_ms=101, end_ms=105, status="SEND_OK", code=0,
                   msg_id="7F00000100002A9F0000000012345678", uniq_key="7F00000130394B2A1C0D00000000001A",
                   broker="broker-a", queue_id=3, queue_offset=42, sent=True)
    line = c_outcome(intent, r, True)
    assert line == lines.outcome(intent, 105, "ok", "SEND_OK", 0, None, None, True, r.uniq_key, r.msg_id, "broker-a",
                                 3, 42, True)
    assert c_outcome(intent, r, 1.5) is None and c_outcome(intent, r, "x\n") is None  # declined: orjson's


def test_writer_spools_its_records_and_drains_them_into_the_journal_exactly(tmp_path, monkeypatch) -> None:
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter, spool_paths
    from rmqchaos.ledger.lines import record_line
    f = tmp_path / "send-w0-1.jsonl"
    monkeypatch.setattr(LedgerWriter, "SPOOL", 4096)  # full, and drained by the write that finds it so, often
    w = LedgerWriter(f)
    [spool] = [p for p in spool_paths(f) if p.exists()]
    recs = [{"rec": "intent", "key": f"k{i}", "attempt_id": i, "x": "é" * (i % 50)} for i in range(500)]
    recs.insert(250, {"rec": "intent", "key": "big", "attempt_id": 250, "x": "y" * 5000})  # larger than the spool
    sizes = set()
    for r in recs:
        w.write_record(r)
        sizes.add(f.stat().st_size)
    assert len(sizes) > 10  # drained many times, by the writes that found the spool full
    assert f.stat().st_size < w.position  # the last records: in the spool, not yet in the journal
    w.drain()
    assert f.stat().st_size == w.position == sum(len(record_line(r)) for r in recs)
    assert read_ledger(f).records == recs  # readable while written, up to the last drain
    w.write_record({"rec": "intent", "key": "last", "attempt_id": 501})
    w.close()
    assert read_ledger(f).records[-1]["key"] == "last" and read_ledger(f).problem is None
    assert not spool.exists() and f.read_bytes().endswith(b"\n")
    w2 = LedgerWriter(f)  # another writer of the same journal appends after its records
    w2.write_record({"rec": "intent", "key": "again", "attempt_id": 502})
    w2.close()
    assert [r["key"] for r in read_ledger(f).records[-2:]] == ["last", "again"]


def _half_drained(f: Path, n: int, drained: int):  # noqa: ANN202
    """A writer of `f` with n records written, the first `drained` of them drained into the journal."""
    from rmqchaos.ledger.journal_write import LedgerWriter
    w = LedgerWriter(f)
    recs = [{"rec": "intent", "key": f"k{i}", "attempt_id": i} for i in range(n)]
    for r in recs[:drained]:
        w.write_record(r)
    w.drain()
    for r in recs[drained:]:
        w.write_record(r)
    return w, recs


def _kill(w) -> None:  # noqa: ANN001
    """As if `w`'s process were SIGKILLed now: its spool says a writer that no longer runs."""
    import struct
    struct.pack_into("<Q", w._map, 24, 1)  # a start time no live process has
    w._map.close()
    os.close(w.fd)


@pytest.mark.parametrize("at", ["spooled", "written", "first_byte_cleared", "base_torn", "base_recorded", "torn"])
def test_a_dead_writers_spool_is_recovered_once_whatever_step_the_kill_hit(tmp_path, at: str) -> None:
    """The spool's records reach the journal once each, whichever step of a drain the kill hit
    (write() into the journal, clear the spool's first byte, record the new base — 8 bytes, which a
    kill may tear —, clear the rest), and a record whose copy the kill cut short becomes a torn tail."""
    import struct
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import recover_spool, spool_paths
    from rmqchaos.ledger.lines import record_line
    f = tmp_path / "send-w0-1.jsonl"
    w, recs = _half_drained(f, 40, 10)
    assert recover_spool(f) == 0 and f.stat().st_size == sum(map(len, map(record_line, recs[:10])))  # it lives
    spooled = b"".join(map(record_line, recs[10:]))
    new_base = w._base + len(spooled)
    if at != "spooled" and at != "torn":  # the drain's steps, in its order, up to the kill
        os.write(w.fd, spooled)
    if at in ("first_byte_cleared", "base_torn", "base_recorded"):
        w._map[4096] = 0
    if at == "base_torn":
        w._map[8:12] = struct.pack("<Q", new_base)[:4]
    if at == "base_recorded":
        w._set_base(new_base)
    if at == "torn":
        w._write(b'{"rec":"intent","key":"k40","att')
    _kill(w)
    added = recover_spool(f)
    assert added == {"spooled": len(spooled), "torn": len(spooled) + 32}.get(at, 0)
    lf = read_ledger(f)
    assert lf.records == recs and not lf.corrupt  # every record once, in order
    assert (lf.torn_offset is not None) == (at == "torn")
    assert not any(p.exists() for p in spool_paths(f)) and recover_spool(f) == 0


def test_a_dead_writers_spool_is_never_appended_to_another_file_of_its_journals_name(tmp_path) -> None:
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter, recover_spool, spool_paths
    f = tmp_path / "send-w0-1.jsonl"
    w = LedgerWriter(f)
    for i in range(5):
        w.write_record({"rec": "intent", "key": f"k{i}", "attempt_id": i})
    w.drain()  # the spool's base: past the journal's five records
    w.write_record({"rec": "intent", "key": "k5", "attempt_id": 5})
    _kill(w)
    f.unlink()  # its run directory deleted, and a new journal made under the same name (ext4 may
    f.write_bytes(b'{"rec":"intent","key":"new","attempt_id":0}\n')  # give it the same inode: it is smaller)
    assert recover_spool(f) == 0 and not any(p.exists() for p in spool_paths(f))
    assert [r["key"] for r in read_ledger(f).records] == ["new"]


def test_a_spool_beside_the_journal_where_tmpfs_is_not_writable(tmp_path, monkeypatch) -> None:
    """No writable /dev/shm: the spool is a hidden file beside the journal, and the next writer of the
    journal recovers a dead one's (the sweep looks on tmpfs only)."""
    from rmqchaos.ledger import journal_write
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter, spool_paths
    monkeypatch.setattr(journal_write, "SPOOL_DIR", tmp_path / "no-such-tmpfs")
    f = tmp_path / "send-w0-1.jsonl"
    w = LedgerWriter(f)
    w.write_record({"rec": "intent", "key": "k0", "attempt_id": 0})
    beside = spool_paths(f)[1]
    assert beside == tmp_path / ".send-w0-1.jsonl.spool" and beside.exists()
    _kill(w)
    w2 = LedgerWriter(f)
    w2.write_record({"rec": "intent", "key": "k1", "attempt_id": 1})
    w2.close()
    assert [r["key"] for r in read_ledger(f).records] == ["k0", "k1"] and not beside.exists()


def test_a_failed_write_leaves_the_journal_as_it_was_and_the_records_spooled(tmp_path, monkeypatch) -> None:
    """A disk that fills mid-write(): the journal is cut back to what it held, the spool keeps the
    records, and the next drain writes them once."""
    import errno
    from rmqchaos.ledger import journal_write
    from rmqchaos.ledger.journal_read import read_ledger
    f = tmp_path / "send-w0-1.jsonl"
    w, recs = _half_drained(f, 20, 5)
    real_write = os.write

    def half_then_full(fd: int, data) -> int:  # noqa: ANN001
        if fd != w.fd:
            return real_write(fd, data)
        monkeypatch.setattr(journal_write.os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
        return real_write(fd, bytes(data[:len(data) // 2]))
    monkeypatch.setattr(journal_write.os, "write", half_then_full)
    with pytest.raises(OSError):
        w.drain()
    monkeypatch.setattr(journal_write.os, "write", real_write)
    assert [r["key"] for r in read_ledger(f).records] == [f"k{i}" for i in range(5)] and read_ledger(f).problem is None
    w.close()
    assert read_ledger(f).records == recs


def test_a_new_writer_cuts_a_dead_writers_torn_record_before_its_own(tmp_path) -> None:
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter
    f = tmp_path / "send-w0-1.jsonl"
    f.write_bytes(b'{"rec":"intent","key":"k0","attempt_id":0}\n{"rec":"intent","ke')
    w = LedgerWriter(f)
    w.write_record({"rec": "intent", "key": "k1", "attempt_id": 1})
    w.close()
    lf = read_ledger(f)
    assert [r["key"] for r in lf.records] == ["k0", "k1"] and lf.problem is None


def test_a_spool_another_process_recovers_is_left_to_it(tmp_path) -> None:
    """Two recoverers at once (the new writers of a distributed load sweep together): the one that
    holds the spool's lock appends it, the other leaves it alone — never both."""
    import fcntl
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter, recover_spool, spool_paths
    f = tmp_path / "send-w0-1.jsonl"
    w = LedgerWriter(f)
    w.write_record({"rec": "intent", "key": "k0", "attempt_id": 0})
    _kill(w)
    [sp] = [p for p in spool_paths(f) if p.exists()]
    with open(sp, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        assert recover_spool(f, wait=False) == 0 and sp.exists() and f.stat().st_size == 0  # a sweep's
    assert recover_spool(f) > 0 and not sp.exists()
    assert [r["key"] for r in read_ledger(f).records] == ["k0"]


def test_a_new_writer_sweeps_dead_writers_spools(tmp_path) -> None:
    """A killed load whose journals nobody sealed: the next writer recovers them, or removes the
    spool of one whose run directory is gone."""
    from rmqchaos.ledger.journal_read import read_ledger
    from rmqchaos.ledger.journal_write import LedgerWriter, spool_paths
    kept, gone = tmp_path / "a" / "send-w0-1.jsonl", tmp_path / "b" / "send-w0-2.jsonl"
    writers = [LedgerWriter(f) for f in (kept, gone)]  # both live while the other starts
    for w in writers:
        w.write_record({"rec": "intent", "key": w.path.name, "attempt_id": 1})
        _kill(w)
    gone.unlink()
    assert all(spool_paths(f)[0].exists() for f in (kept, gone))
    LedgerWriter(tmp_path / "c" / "send-w0-3.jsonl").close()
    assert not any(spool_paths(f)[0].exists() for f in (kept, gone))
    assert [r["key"] for r in read_ledger(kept).records] == ["send-w0-1.jsonl"]


@pytest.mark.parametrize("tail", [
    b'{"rec":"intent","ke',                       # cut before its newline
    b'{"rec":"in\0\0\0\0\0\0\0\0ey":"k9"}\n',        # a copy cut short: its end written, a hole inside
    b'\0\0\0\0\0\0\0\0\0\0":"k9"}\n',                 # the hole at its start
])
def test_torn_last_record_of_a_killed_writer(tmp_path, tail: bytes) -> None:
    from rmqchaos.ledger.journal_read import journal_tail, read_ledger
    f = tmp_path / "send-w0-1.jsonl"
    good = b'{"rec":"intent","key":"k1"}\n{"rec":"intent","key":"k2"}\n'
    f.write_bytes(good + tail + b"\0" * 5000)
    t = journal_tail(f)
    assert (t.complete, t.torn_offset, t.end, t.size) == (len(good), len(good), len(good) + len(tail), len(good) + len(tail) + 5000)
    lf = read_ledger(f)
    assert [r["key"] for r in lf.records] == ["k1", "k2"] and lf.torn_offset == len(good)
    f.write_bytes(b"\0" * 100)  # killed before its first record
    assert journal_tail(f).complete == 0 and read_ledger(f).records == []
