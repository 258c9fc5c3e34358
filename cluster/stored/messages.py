"""Find a message in a broker's store files by topic and key, offline (docs/broker-evidence.md,
"Where a key is stored"): the run's `cluster/<node>/store/` is read as RocketMQ 5.5.0 wrote it, with
the cluster up (the files are shared mappings: what the broker wrote is what we read) or long gone.

- `index/<timestamp>`: IndexFile (store/index/IndexFile.java, IndexHeader.java). A 40-byte header
  (beginTimestamp 8, endTimestamp 8, beginPhyOffset 8, endPhyOffset 8, hashSlotCount 4, indexCount 4),
  `maxHashSlotNum` 4-byte slots holding the newest entry number of their chain, then 20-byte entries
  (keyHash 4, phyOffset 8, timeDiff 4, prevIndex 4). A key is indexed as `<topic>#<key>` for each
  KEYS key and for UNIQ_KEY (IndexService.buildIndex); its hash is Java's String.hashCode made
  non-negative (IndexFile.indexKeyHashMethod), its slot that hash modulo maxHashSlotNum.
- `commitlog/<20-digit start offset>`: the records (common/message/MessageDecoder.decode):
  TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, QUEUEID 4, FLAG 4, QUEUEOFFSET 8, PHYSICALOFFSET 8, SYSFLAG 4,
  BORNTIMESTAMP 8, BORNHOST 8 (20 with sysflag bit 4, IPv6), STORETIMESTAMP 8, STOREHOST 8 (20 with
  bit 5), RECONSUMETIMES 4, PREPAREDTRANSACTIONOFFSET 8, BODYLENGTH 4, BODY, TOPICLENGTH 1 (2 with
  MESSAGE_MAGIC_CODE_V2), TOPIC, PROPERTIESLENGTH 2, PROPERTIES (`name\\x01value\\x02`…). A file ends
  with a BLANK_MAGIC_CODE record or zeros.
- A DLedger replica's log, `dledger-<selfId>/data/<20-digit start offset>` (DLedger 0.3.2, which
  5.5.0 ships): entries of a 48-byte header (magic 4 = 1, size 4 (the whole entry), index 8, term 8,
  pos 8 (its own offset), channel 4, chainCrc 4, bodyCrc 4, bodySize 4; DLedgerEntryCoder) followed by
  one record as above; a file ends with magic -1 or zeros. The record's PHYSICALOFFSET, and what the
  index holds, is `pos + 48` (DLedgerCommitLog's append hook), so index lookups read it as they read a
  commit log; a scan walks the entries, stopping where DLedger's own recovery would (an unknown magic,
  a size of 0, a pos that is not the entry's offset, an index out of sequence).

A DLedger follower that follows a new leader with a shorter log truncates its own
(DLedgerMmapFileStore.truncate): it moves its write position back and leaves the bytes past it, with
their index entries, until it writes over them. So every copy found says whether it is in the node's
log (`in_log`): outside every range the replica's own log lines say it truncated, or written there
again since (the replica's index file names that entry's position for its index, and the index is
at most the replica's end index, `dledger-<id>/checkpoint` endIndex). What is past the end is in no
log now (DLedger's recovery would read it again after a restart, as the scan above does).

The index answers with candidate commit-log offsets (hash collisions included); each candidate is
decoded and kept only if its topic and KEYS match. Records past the newest index entry (dispatched
after the last index write, or never: a broker killed before its reput) are found by decoding that
tail of the commit log. So a lookup costs a few reads per key, not a pass over the store.

The index can also miss records below its end: a broker that cut its log back (a deposed master made
a slave of its successor) and was sent the log again does not index what it now holds below its
index's old end (5.5.0 IndexService.buildIndex skips a record whose offset is below endPhyOffset).
So a key found on a node neither way is looked for in that node's whole log, read once (offsets
only) and kept for the session: an absence is never the index's word alone.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from rmqchaos.ledger import body as msgbody
from rmqclient.record import Record, decode, java_hash

INDEX_HEADER, SLOT, ENTRY = 40, 4, 20
DLEDGER_HEADER, DLEDGER_MAGIC, DLEDGER_BLANK = 48, 1, -1  # DLedgerEntry.BODY_OFFSET, MAGIC; MmapFileList.BLANK_MAGIC_CODE
DLEDGER_INDEX_UNIT = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE
DEFAULT_SLOTS, DEFAULT_INDEX = 5_000_000, 5_000_000 * 4  # MessageStoreConfig.maxHashSlotNum / maxIndexNum


def index_hash(s: str) -> int:
    """A key's hash in the index: Java's String.hashCode made non-negative (IndexFile.indexKeyHashMethod)."""
    h = java_hash(s)
    return 0 if h == -(1 << 31) else abs(h)


@dataclass
class NodeStore:
    """One broker node's store: its commit log files and index files, mapped read-only."""
    node: str
    broker: str
    root: Path
    commitlog: Path
    slots: int = DEFAULT_SLOTS
    index_num: int = DEFAULT_INDEX
    dledger: bool = False  # `commitlog` is a DLedger replica's data directory (entries, the module's note)
    truncated: list[tuple[int, int]] = field(default_factory=list)  # DLedger: (truncatePos, maxPos) it cut
    _maps: dict[Path, mmap.mmap] = field(default_factory=dict)

    def _map(self, f: Path) -> mmap.mmap | None:
        if f not in self._maps:
            try:
                with open(f, "rb") as fh:
                    self._maps[f] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # an empty file cannot be mapped
                return None
        return self._maps[f]

    def close(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()

    # listed once per lookup session (like the tail below), not once per key
    @cached_property
    def commit_files(self) -> list[tuple[int, Path]]:
        return _by_start(self.commitlog)

    @cached_property
    def dledger_end(self) -> int | None:
        """A DLedger replica's last entry index as it last wrote it down (`checkpoint`'s endIndex, every
        3 s and at shutdown: DLedgerMmapFileStore.persistCheckPoint); None: not DLedger, or no such
        file (written without an fsync, a power loss leaves it empty)."""
        if not self.dledger:
            return None
        try:
            for line in (self.commitlog.parent / "checkpoint").read_text().splitlines():
                k, _, v = line.partition("=")
                if k.strip() == "endIndex":
                    return int(v.strip())
        except (OSError, ValueError):
            pass
        return None

    @cached_property
    def dledger_index_files(self) -> list[tuple[int, Path]]:
        return _by_start(self.commitlog.parent / "index")  # DLedger's own: 32 bytes an entry, by entry index

    def _at(self, files: list[tuple[int, Path]], off: int) -> tuple[mmap.mmap, int] | None:
        """The mapped file of a list named by start offset that holds absolute offset `off`, and the
        offset within it; None before the first file or for an empty one."""
        for start, f in reversed(files):
            if start <= off:
                m = self._map(f)
                return (m, off - start) if m is not None else None
        return None

    def _read(self, files: list[tuple[int, Path]], off: int, n: int) -> bytes | None:
        """`n` bytes at absolute offset `off` of a file list named by start offset; None past its end."""
        at = self._at(files, off)
        return at[0][at[1]:at[1] + n] if at is not None and at[1] + n <= len(at[0]) else None

    def in_log(self, phy: int) -> bool:
        """Whether the record at `phy` is in the node's log. A commit log: always (a cut-back one is
        written over: analysis/replication/failover.py cut_back). A DLedger replica: unless the entry lies in a range
        the replica said it truncated (`truncated`, DLedgerMmapFileStore.truncate: it moves its write
        position only, the entries past it keep their bytes and their index entries until written over)
        and it was not written there again since: the replica's own index file names another position
        for the entry's index, or the index is above the replica's end index (its checkpoint)."""
        pos = phy - DLEDGER_HEADER
        if not self.dledger or not any(a <= pos < b for a, b in self.truncated):
            return True
        head = self._read(self.commit_files, pos, DLEDGER_HEADER)
        if head is None:
            return False
        index = struct.unpack_from(">q", head, 8)[0]
        end = self.dledger_end
        if end is not None and index > end:
            return False
        idx = self._read(self.dledger_index_files, index * DLEDGER_INDEX_UNIT, DLEDGER_INDEX_UNIT)
        # an index entry: magic 4, pos 8, size 4, index 8, term 8 (DLedgerEntryCoder.encodeIndex)
        return idx is not None and struct.unpack_from(">q", idx, 4)[0] == pos

    @cached_property
    def index_files(self) -> list[Path]:
        d = self.root / "index"
        want = INDEX_HEADER + self.slots * SLOT + self.index_num * ENTRY
        return sorted(f for f in d.iterdir() if f.is_file() and f.stat().st_size == want) if d.is_dir() else []

    def record_at(self, phy: int) -> Record | None:
        at = self._at(self.commit_files, phy)
        return decode(*at) if at is not None else None

    def indexed_until(self) -> int:
        """The commit-log offset of the newest indexed record (-1: nothing indexed)."""
        end = -1
        for f in self.index_files:
            m = self._map(f)
            if m is not None:
                count, = struct.unpack_from(">i", m, 36)
                if count > 1:
                    end = max(end, struct.unpack_from(">q", m, 24)[0])
        return end

    def index_candidates(self, query: str) -> Iterator[int]:
        h = index_hash(query)
        for f in self.index_files:
            m = self._map(f)
            if m is None:
                continue
            count, = struct.unpack_from(">i", m, 36)
            n, = struct.unpack_from(">i", m, INDEX_HEADER + (h % self.slots) * SLOT)
            seen = 0
            while 0 < n <= count and seen <= count:  # the chain, newest first
                kh, phy, _td, prev = struct.unpack_from(">iqii", m, INDEX_HEADER + self.slots * SLOT + n * ENTRY)
                if kh == h:
                    yield phy
                if prev == n:
                    break
                n, seen = prev, seen + 1

    def scan(self, start: int) -> Iterator[Record]:
        """Every record from commit-log offset `start` (or the first file) to the end of the log."""
        if self.dledger:
            yield from self._scan_entries(start)
            return
        for fstart, f in self.commit_files:
            m = self._map(f)
            if m is None or fstart + len(m) <= start:
                continue
            pos = max(0, start - fstart)
            while True:
                r = decode(m, pos)
                if r is None:
                    break
                yield r
                pos += r.size

    def _scan_entries(self, start: int) -> Iterator[Record]:
        """A DLedger log's records from the entry whose record starts at `start` (its body offset)."""
        start = max(0, start - DLEDGER_HEADER)
        last_index: int | None = None
        for fstart, f in self.commit_files:
            m = self._map(f)
            if m is None or fstart + len(m) <= start:
                continue
            pos = max(0, start - fstart)
            while pos + DLEDGER_HEADER <= len(m):
                magic, size, index, _term, at = struct.unpack_from(">iiqqq", m, pos)
                if magic == DLEDGER_BLANK:
                    break  # the file's end: the log goes on in the next file
                if magic != DLEDGER_MAGIC or size <= DLEDGER_HEADER or at != fstart + pos or \
                        (last_index is not None and index != last_index + 1):
                    return  # the log's end (DLedgerMmapFileStore.recover's rules)
                r = decode(m, pos + DLEDGER_HEADER)
                if r is None:
                    return
                yield r
                last_index, pos = index, pos + size


def _by_start(d: Path) -> list[tuple[int, Path]]:
    """A directory's files named by their start offset (20 digits), in order; none if it is not there."""
    return sorted((int(f.name), f) for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else []


class Store:
    """Every broker node's store of a run (masters and slaves), looked up by (topic, key)."""

    def __init__(self, brokers: dict[str, dict[str, str]], cluster_dir: Path | None = None,
                 truncated: dict[str, list[tuple[int, int]]] | None = None) -> None:
        """brokers: node -> its broker.conf (RunDir.broker_configs()). A store path that is not there
        (a run directory copied elsewhere) falls back to `cluster_dir/<node>/store`. truncated: node ->
        the (truncatePos, maxPos) ranges its DLedger log cut, from its own log lines (`NodeStore.in_log`)."""
        self.stores = []
        for node, conf in sorted(brokers.items()):
            # a DLedger replica's log is DLedger's own (DLedgerCommitLog: storePathDLedgerCommitLog, by
            # default <root>/dledger-<selfId>/data), not storePathCommitLog
            dledger = str(conf.get("enableDLegerCommitLog")).lower() == "true"
            sub = Path(f"dledger-{conf.get('dLegerSelfId')}") / "data" if dledger else Path("commitlog")
            root = Path(conf.get("storePathRootDir") or os.path.expanduser("~/store"))
            commitlog = Path((conf.get("storePathDLedgerCommitLog") if dledger else conf.get("storePathCommitLog"))
                             or root / sub)
            if not commitlog.is_dir() and cluster_dir is not None and (cluster_dir / node / "store").is_dir():
                root = cluster_dir / node / "store"
                commitlog = root / sub
            self.stores.append(NodeStore(node, conf.get("brokerName", node), root, commitlog,
                                         int(conf.get("maxHashSlotNum", DEFAULT_SLOTS)),
                                         int(conf.get("maxIndexNum", DEFAULT_INDEX)), dledger,
                                         (truncated or {}).get(node, [])))
        self._tails: dict[str, dict[tuple[str, str], list[Record]]] = {}
        self._whole: dict[str, dict[tuple[str, str], list[int]]] = {}

    def nodes(self) -> list[str]:
        return [s.node for s in self.stores if s.commit_files]

    def method(self) -> str:
        return "index" if any(s.index_files for s in self.stores) else "scan"

    def _tail(self, s: NodeStore) -> dict[tuple[str, str], list[Record]]:
        """(topic, key) -> records past the newest index entry (all records when nothing is indexed)."""
        if s.node not in self._tails:
            t: dict[tuple[str, str], list[Record]] = {}
            for r in s.scan(max(0, s.indexed_until())):
                for k in r.keys:
                    t.setdefault((r.topic, k), []).append(r)
            self._tails[s.node] = t
        return self._tails[s.node]

    def _whole_log(self, s: NodeStore) -> dict[tuple[str, str], list[int]]:
        """(topic, key) -> the commit-log offset of every record of the node's log (read once)."""
        if s.node not in self._whole:
            w: dict[tuple[str, str], list[int]] = {}
            for r in s.scan(0):
                for k in r.keys:
                    w.setdefault((r.topic, k), []).append(r.commit_offset)
            self._whole[s.node] = w
        return self._whole[s.node]

    def find(self, topic: str, key: str) -> list[dict[str, Any]]:
        """Every stored copy of `key` sent to `topic`, on every node, with where it is; `in_log` false:
        bytes past a DLedger replica's truncated log (`NodeStore.in_log`), in no log."""
        out = []
        for s in self.stores:
            found: dict[int, Record] = {}
            for phy in s.index_candidates(f"{topic}#{key}"):
                r = s.record_at(phy)
                if r is not None and r.topic == topic and key in r.keys:
                    found[r.commit_offset] = r
            for r in self._tail(s).get((topic, key), []):
                found[r.commit_offset] = r
            if not found:  # neither the index nor the tail: the whole log (see the module's note)
                for off in self._whole_log(s).get((topic, key), []):
                    r = s.record_at(off)
                    if r is not None:
                        found[off] = r
            for r in sorted(found.values(), key=lambda r: r.commit_offset):
                checked = msgbody.check(r.body)
                out.append({"node": s.node, "broker": s.broker, "topic": r.topic, "queue_id": r.queue_id,
                            "queue_offset": r.queue_offset, "commit_offset": r.commit_offset,
                            "store_ms": r.store_ms, "msg_id": r.props.get("UNIQ_KEY"), "body_ok": checked.ok,
                            "in_log": s.in_log(r.commit_offset)})
        return out

    def close(self) -> None:
        for s in self.stores:
            s.close()
