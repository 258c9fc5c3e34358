"""A stored message record as RocketMQ 5.5.0 writes it into the commit log and sends it in a
transaction check-back's body (common/message/MessageDecoder.encode / decode):

  TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, QUEUEID 4, FLAG 4, QUEUEOFFSET 8, PHYSICALOFFSET 8, SYSFLAG 4,
  BORNTIMESTAMP 8, BORNHOST 8 (20 with sysflag bit 4, IPv6), STORETIMESTAMP 8, STOREHOST 8 (20 with
  bit 5), RECONSUMETIMES 4, PREPAREDTRANSACTIONOFFSET 8, BODYLENGTH 4, BODY, TOPICLENGTH 1 (2 with
  MESSAGE_MAGIC_CODE_V2), TOPIC, PROPERTIESLENGTH 2, PROPERTIES (`name\\x01value\\x02`…).

And Java's String.hashCode, which the index (cluster/stored/messages.py) and the hash queue selector
(SelectMessageQueueByHash, rmqclient/producer.py) both use."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

MAGIC_V1, MAGIC_V2, BLANK_MAGIC = -626843481, -626843477, -875286124


def java_hash(s: str) -> int:
    """java.lang.String.hashCode(): 31-polynomial over the UTF-16 code units, as a signed 32-bit int."""
    b, h = s.encode("utf-16-be"), 0
    for i in range(0, len(b), 2):
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def properties(raw: bytes) -> dict[str, str]:
    out = {}
    for kv in raw.decode("utf-8", errors="replace").split("\x02"):
        k, sep, v = kv.partition("\x01")
        if sep:
            out[k] = v
    return out


@dataclass
class Record:
    size: int
    queue_id: int
    queue_offset: int
    commit_offset: int
    store_ms: int
    topic: str
    props: dict[str, str]
    body: bytes

    @property
    def keys(self) -> list[str]:
        return [k for k in self.props.get("KEYS", "").split(" ") if k]


def decode(buf: Any, pos: int) -> Record | None:
    """The record at `pos` of `buf` (bytes or mmap), or None at a file's end (blank, zeros, torn)."""
    if pos + 8 > len(buf):
        return None
    size, magic = struct.unpack_from(">ii", buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2) or size <= 0 or pos + size > len(buf):
        return None
    _crc, qid, _flag, qoff, phy, sysflag, _born = struct.unpack_from(">iiiqqiq", buf, pos + 8)
    p = pos + 48 + (20 if sysflag & 0x10 else 8)
    (store_ms,) = struct.unpack_from(">q", buf, p)
    p += 8 + (20 if sysflag & 0x20 else 8) + 4 + 8
    (blen,) = struct.unpack_from(">i", buf, p)
    p += 4
    body = bytes(buf[p:p + blen])
    p += blen
    if magic == MAGIC_V2:
        (tlen,) = struct.unpack_from(">h", buf, p)
        p += 2
    else:
        tlen = buf[p]
        p += 1
    topic = bytes(buf[p:p + tlen]).decode("utf-8", errors="replace")
    p += tlen
    (plen,) = struct.unpack_from(">h", buf, p)
    props = properties(bytes(buf[p + 2:p + 2 + plen]))
    return Record(size, qid, qoff, phy, store_ms, topic, props, body)
