"""Remoting frame codec.

Frame = int32 length (of everything after it) | int32 header word (top byte: serialize type,
0 JSON / 1 ROCKETMQ; low 24 bits: header length) | header | body. Big-endian.
Source: rocketmq-remoting RemotingCommand.encode/decode, RocketMQSerializable.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

# RocketMQ's NettyDecoder rejects frames over com.rocketmq.remoting.frameMaxLength (16 MiB,
# counting the length field). We accept four times that, so that a broker whose topic table outgrew
# namesrv's frame (incident 002) can still be read whole, and refuse more so garbage cannot make us
# allocate gigabytes.
MAX_FRAME = 64 * 1024 * 1024

JSON_TYPE = 0
ROCKETMQ_TYPE = 1
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
LANGUAGE_PYTHON = "PYTHON"
# MQVersion.Version.V5_5_0.ordinal(); servers branch on it (e.g. standard JSON route bodies >= 401).
CLIENT_VERSION = 513

_LANG_CODES = {0: "JAVA", 1: "CPP", 2: "DOTNET", 3: "PYTHON", 4: "DELPHI", 5: "ERLANG", 6: "RUBY",
               7: "OTHER", 8: "HTTP", 9: "GO", 10: "PHP", 11: "OMS", 12: "RUST", 13: "NODE_JS"}


class FrameError(Exception):
    """A byte stream that is not a valid remoting frame."""


@dataclass
class Frame:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    version: int = CLIENT_VERSION
    language: str = LANGUAGE_PYTHON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    def body_json(self) -> Any:
        return loads_lenient(self.body)


def encode_frame(frame: Frame) -> bytes:
    header: dict[str, Any] = {
        "code": frame.code, "language": frame.language, "version": frame.version,
        "opaque": frame.opaque, "flag": frame.flag,
        "extFields": {k: str(v) for k, v in frame.ext.items()},
        "serializeTypeCurrentRPC": "JSON",
    }
    if frame.remark is not None:
        header["remark"] = frame.remark
    hdr = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(hdr) + len(frame.body), (JSON_TYPE << 24) | len(hdr)) + hdr + frame.body


def decode_frame(payload: bytes) -> Frame:
    """Decode one frame *without* its leading length field."""
    if len(payload) < 4:
        raise FrameError(f"frame of {len(payload)} bytes has no header word")
    (word,) = struct.unpack_from(">I", payload, 0)
    stype, hlen = word >> 24, word & 0xFFFFFF
    if 4 + hlen > len(payload):
        raise FrameError(f"header length {hlen} exceeds frame of {len(payload)} bytes")
    hdr, body = payload[4:4 + hlen], payload[4 + hlen:]
    if stype == JSON_TYPE:
        try:
            h = json.loads(hdr)
        except (ValueError, UnicodeDecodeError) as e:
            raise FrameError(f"bad JSON header: {e}") from None
        if not isinstance(h, dict) or "code" not in h:
            raise FrameError("JSON header without 'code'")
        return Frame(code=int(h["code"]), opaque=int(h.get("opaque", 0)), flag=int(h.get("flag", 0)),
                     remark=h.get("remark"), ext={str(k): str(v) for k, v in (h.get("extFields") or {}).items()},
                     body=body, version=int(h.get("version", 0)), language=str(h.get("language", "")))
    if stype == ROCKETMQ_TYPE:
        return _decode_rocketmq_header(hdr, body)
    raise FrameError(f"unknown serialize type {stype}")


def _decode_rocketmq_header(h: bytes, body: bytes) -> Frame:
    try:
        code, lang, version, opaque, flag = struct.unpack_from(">hBhii", h, 0)
        pos = 13
        (rlen,) = struct.unpack_from(">i", h, pos); pos += 4
        remark = None
        if rlen > 0:
            remark = h[pos:pos + rlen].decode(); pos += rlen
        (elen,) = struct.unpack_from(">i", h, pos); pos += 4
        ext: dict[str, str] = {}
        end = pos + max(elen, 0)
        while pos < end:
            (kl,) = struct.unpack_from(">h", h, pos); pos += 2
            k = h[pos:pos + kl].decode(); pos += kl
            (vl,) = struct.unpack_from(">i", h, pos); pos += 4
            ext[k] = h[pos:pos + vl].decode(); pos += vl
        if pos > len(h):
            raise FrameError("ROCKETMQ header truncated")
    except (struct.error, UnicodeDecodeError) as e:
        raise FrameError(f"bad ROCKETMQ header: {e}") from None
    return Frame(code=code, opaque=opaque, flag=flag, remark=remark, ext=ext, body=body,
                 version=version, language=_LANG_CODES.get(lang, str(lang)))


class FrameReader:
    """Incremental decoder: feed arbitrary chunks, get whole frames (split and merged reads)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        while len(self._buf) >= 4:
            (n,) = struct.unpack_from(">I", self._buf, 0)
            if n + 4 > self._max:
                raise FrameError(f"frame length {n} exceeds the {self._max}-byte limit")
            if len(self._buf) < 4 + n:
                break
            payload = bytes(self._buf[4:4 + n])
            del self._buf[:4 + n]
            out.append(decode_frame(payload))
        return out


def loads_lenient(data: bytes | str) -> Any:
    """Parse fastjson output, which writes integer map keys unquoted ({0:"127.0.0.1:10911"}).

    Namesrv's ClusterInfo is always written that way (DefaultRequestProcessor); we quote bare
    keys outside string literals, then use the standard parser.
    """
    s = data.decode() if isinstance(data, (bytes, bytearray)) else data
    out: list[str] = []
    i, n = 0, len(s)
    expect_key = False
    while i < n:
        c = s[i]
        if c == '"':
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            out.append(s[i:j + 1]); i = j + 1; expect_key = False
            continue
        if c in "{,":
            out.append(c); i += 1; expect_key = True
            continue
        if expect_key and (c.isdigit() or c == "-"):
            j = i + 1
            while j < n and s[j].isdigit():
                j += 1
            k = j
            while k < n and s[k].isspace():
                k += 1
            if k < n and s[k] == ":":
                out.append(f'"{s[i:j]}"'); i = j; expect_key = False
                continue
        if not c.isspace():
            expect_key = False
        out.append(c); i += 1
    return json.loads("".join(out))
