"""Remoting frame codec (pure logic): round trips, split/merged reads, bad frames, fastjson keys."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from rmqclient.frame import Frame, FrameError, FrameReader, decode_frame, encode_frame, loads_lenient

frames = st.builds(
    Frame, code=st.integers(0, 32767), opaque=st.integers(0, 2**31 - 1), flag=st.integers(0, 3),
    remark=st.none() | st.text(max_size=40),
    ext=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=5),
    body=st.binary(max_size=300))


pytestmark = pytest.mark.fast


@settings(max_examples=200, deadline=None)
@given(st.lists(frames, min_size=1, max_size=6), st.data())
def test_any_split_of_a_stream_decodes_to_the_same_frames(fs: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(f) for f in fs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    r, got, prev = FrameReader(), [], 0
    for c in [*cuts, len(stream)]:
        got += r.feed(stream[prev:c])
        prev = c
    assert [(g.code, g.opaque, g.flag, g.remark, g.ext, g.body) for g in got] == \
           [(f.code, f.opaque, f.flag, f.remark, f.ext, f.body) for f in fs]


def test_oversized_length_is_refused_before_buffering() -> None:
    with pytest.raises(FrameError, match="exceeds"):
        FrameReader(max_frame=1024).feed(struct.pack(">I", 10**9) + b"x" * 10)


@pytest.mark.parametrize("payload", [b"", b"\x00\x00", struct.pack(">I", 100) + b"{}", struct.pack(">I", 2) + b"{}",
                                     struct.pack(">I", (7 << 24) | 2) + b"{}", struct.pack(">I", (1 << 24) | 3) + b"abc"])
def test_garbage_frames_raise_frame_error(payload: bytes) -> None:
    with pytest.raises(FrameError):
        decode_frame(payload)


def test_rocketmq_binary_header_decodes() -> None:
    ext = struct.pack(">h", 1) + b"k" + struct.pack(">i", 2) + b"vv"
    hdr = struct.pack(">hBhii", 0, 0, 513, 7, 1) + struct.pack(">i", 2) + b"ok" + struct.pack(">i", len(ext)) + ext
    f = decode_frame(struct.pack(">I", (1 << 24) | len(hdr)) + hdr + b"body")
    assert (f.code, f.opaque, f.remark, f.ext, f.body, f.language, f.is_response) == \
           (0, 7, "ok", {"k": "vv"}, b"body", "JAVA", True)


def test_fastjson_unquoted_integer_keys_parse() -> None:
    raw = b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10916"},' \
          b'"brokerName":"broker-a","cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]},"s":"{1:2,3}"}'
    d = loads_lenient(raw)
    assert d["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10916"}
    assert d["s"] == "{1:2,3}"
