"""The self-verifying message body: every message carries its own identity and checksum, so a
delivery can be attributed and checked from its body alone (docs/ledgers.md, "Message body").

    rmqc1|<crc>|<producer_id>|<seq>|<key>\\n<payload>

`crc` is the CRC-32 (zlib's, = java.util.zip.CRC32) of every byte after `rmqc1|<crc>|`, as 8 lower-case
hex digits, so it covers the identity and the payload. The payload (the load's random filler) makes
the body `size` bytes long; a header longer than `size` is sent whole. The Java consumer
(io.rmqchaos.Consumer) checks every delivery the same way and writes `body_key` / `body_ok`.
A body without the `rmqc1|` prefix is not ours (body_ok null); one with it whose checksum or header
does not check out is damaged (body_ok false).
"""
from __future__ import annotations

import zlib
from typing import NamedTuple

MAGIC = b"rmqc1|"
_CRC_END = len(MAGIC) + 9  # the checksum covers body[_CRC_END:]


def encode(key: str, producer_id: str, seq: int, filler: bytes, size: int) -> bytes:
    head = f"{producer_id}|{seq}|{key}\n".encode()
    rest = head + filler[: max(0, size - _CRC_END - len(head))]
    return MAGIC + b"%08x|" % zlib.crc32(rest) + rest


class Checked(NamedTuple):
    key: str | None  # the key the body names (None: unreadable)
    ok: bool | None  # True: intact; False: damaged; None: not a self-verifying body


def check(body: bytes) -> Checked:
    """The same rule as the Java consumer's (a test holds them together)."""
    if not body.startswith(MAGIC):
        return Checked(None, None)
    if len(body) < _CRC_END or body[_CRC_END - 1:_CRC_END] != b"|":
        return Checked(None, False)
    rest = body[_CRC_END:]
    nl = rest.find(b"\n")
    try:
        crc_ok = int(body[len(MAGIC):_CRC_END - 1], 16) == zlib.crc32(rest)
    except ValueError:  # not hex
        return Checked(None, False)
    fields = rest[:nl].decode(errors="replace").split("|", 2) if nl >= 0 else []
    key = fields[2] if len(fields) == 3 else None
    return Checked(key, crc_ok and key is not None)
