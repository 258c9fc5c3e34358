"""The send ledger's fast line encoder (no JVM): byte for byte the line of the schema's records."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqchaos.ledgers import OUTCOME_KEYS, SendLines, intent_record, outcome_record

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
    lines = SendLines(run_id, producer, policy)
    intent = lines.intent(aid, key, attempt, topic, intended, start)
    base = (run_id, producer, aid, key, attempt, topic, policy, intended, start)
    assert intent == _line(intent_record("intent", *base))
    answer = (end, outcome, status, code, remark, error, sent, msg_id, omid, broker, qid, qoff, ok)
    line = lines.outcome(intent, *answer)
    assert line == _line(outcome_record("outcome", *base, *answer))
    assert tuple(json.loads(line)) == OUTCOME_KEYS  # the schema's field order


def test_writer_leaves_exactly_its_records_and_a_killed_one_only_nul_padding(tmp_path, monkeypatch) -> None:
    from rmqchaos.ledgers import LedgerWriter, journal_tail, read_ledger
    f = tmp_path / "send-w0-1.jsonl"
    monkeypatch.setattr(LedgerWriter, "CHUNK", 4096)  # grow (remap) many times
    w = LedgerWriter(f)
    recs = [{"rec": "intent", "key": f"k{i}", "attempt_id": i, "x": "é" * (i % 50)} for i in range(500)]
    sizes = set()
    for r in recs:
        w.write_record(r)
        sizes.add(f.stat().st_size)
    assert len(sizes) > 10 and all(x % 4096 == 0 for x in sizes)  # grown chunk by chunk
    assert f.stat().st_size > w.position  # before close: the last chunk, NUL-padded
    assert journal_tail(f).complete == w.position and journal_tail(f).torn_offset is None
    assert read_ledger(f).records == recs  # readable while written, up to the last record
    w.close()
    assert f.stat().st_size == journal_tail(f).complete and f.read_bytes().endswith(b"\n")
    assert read_ledger(f).records == recs and read_ledger(f).problem is None


@pytest.mark.parametrize("tail", [
    b'{"rec":"intent","ke',                       # cut before its newline
    b'{"rec":"in\0\0\0\0\0\0\0\0ey":"k9"}\n',        # a copy cut short: its end written, a hole inside
    b'\0\0\0\0\0\0\0\0\0\0":"k9"}\n',                 # the hole at its start
])
def test_torn_last_record_of_a_killed_writer(tmp_path, tail: bytes) -> None:
    from rmqchaos.ledgers import journal_tail, read_ledger
    f = tmp_path / "send-w0-1.jsonl"
    good = b'{"rec":"intent","key":"k1"}\n{"rec":"intent","key":"k2"}\n'
    f.write_bytes(good + tail + b"\0" * 5000)
    t = journal_tail(f)
    assert (t.complete, t.torn_offset, t.end, t.size) == (len(good), len(good), len(good) + len(tail), len(good) + len(tail) + 5000)
    lf = read_ledger(f)
    assert [r["key"] for r in lf.records] == ["k1", "k2"] and lf.torn_offset == len(good)
    f.write_bytes(b"\0" * 100)  # killed before its first record
    assert journal_tail(f).complete == 0 and read_ledger(f).records == []
