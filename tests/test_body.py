"""The self-verifying body and the store decoder's pure parts (no JVM): the real consumer and the real
store files are exercised in test_analysis.py and test_chaos.py."""
from __future__ import annotations

import struct

import pytest

from cluster.stored.messages import index_hash
from rmqclient.record import MAGIC_V1, decode, java_hash, properties
from rmqchaos.ledger import body

pytestmark = pytest.mark.fast


def test_body_fills_the_size_names_its_key_and_catches_any_flipped_byte() -> None:
    b = body.encode("pre-abc123-w0-77-5", "w0-77", 5, b"f" * 2000, 1024)
    assert len(b) == 1024 and b.startswith(b"rmqc1|")
    assert body.check(b) == ("pre-abc123-w0-77-5", True)
    for i in range(15, len(b), 97):  # every byte after the checksum field is covered
        bad = bytearray(b)
        bad[i] ^= 0x01
        assert body.check(bytes(bad)).ok is False, i
    assert body.check(b[:600]).ok is False  # a cut tail
    assert body.check(b[:600] + b"\0" * 424).ok is False  # a zeroed tail, as after a cut commit
    assert body.check(b"plain payload") == (None, None)  # not ours: no verdict
    assert body.check(b"rmqc1|zzzzzzzz|w|1|k\n") == (None, False)
    long_key = "k" * 80
    assert body.check(body.encode(long_key, "w1-2", 1, b"", 16)) == (long_key, True)  # header longer than size


def test_java_string_hash_as_the_broker_index_computes_it() -> None:
    # values of Java's "...".hashCode(), then IndexFile.indexKeyHashMethod (abs; MIN_VALUE -> 0)
    assert index_hash("") == 0
    assert index_hash("a") == 97
    assert index_hash("hello") == 99162322
    assert index_hash("polygenelubricants") == 0 and java_hash("polygenelubricants") == -2**31  # Integer.MIN_VALUE
    assert index_hash("T#k1") == abs(((((ord("T") * 31 + ord("#")) * 31 + ord("k")) * 31 + ord("1")) + 2**31) % 2**32 - 2**31)


def test_commit_log_record_decodes_topic_keys_and_place() -> None:
    props = "KEYS\x01k-1\x02UNIQ_KEY\x01U1\x02"
    bd, topic = b"payload", b"T_X"
    rec = (struct.pack(">iiiiiqqiq", 0, MAGIC_V1, 0, 3, 0, 41, 9000, 0, 1) + b"\x7f\0\0\x01" + struct.pack(">i", 5)
           + struct.pack(">q", 1_700_000_000_000) + b"\x7f\0\0\x01" + struct.pack(">i", 10911)
           + struct.pack(">iq", 0, 0) + struct.pack(">i", len(bd)) + bd + bytes([len(topic)]) + topic
           + struct.pack(">h", len(props)) + props.encode())
    rec = struct.pack(">i", len(rec)) + rec[4:]
    r = decode(rec + b"\0" * 64, 0)
    assert r is not None and (r.topic, r.keys, r.queue_id, r.queue_offset, r.commit_offset, r.store_ms, r.body) == \
        ("T_X", ["k-1"], 3, 41, 9000, 1_700_000_000_000, bd)
    assert decode(rec + b"\0" * 64, len(rec)) is None  # zeros: the end of the written part
    assert properties(b"A\x01x\x02B\x01y\x02") == {"A": "x", "B": "y"}
