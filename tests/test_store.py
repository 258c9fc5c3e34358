"""cluster/store.py's lookups on planted store files: a record the index does not name (a broker that
cut its log back and was sent it again does not index below its index's old end) is found in the
node's whole log; a key stored nowhere is found nowhere."""
from __future__ import annotations

import struct
from pathlib import Path

from cluster.store import ENTRY, INDEX_HEADER, SLOT, Store, index_hash
from tests.test_failover import commit_log

SLOTS, ENTRIES = 8, 8


def index_file(path: Path, entries: list[tuple[str, int]], end_phy: int) -> None:
    """An IndexFile (its 40-byte header, SLOTS slots, ENTRIES entries) naming `entries` (query, offset)."""
    slots = [0] * SLOTS
    body = bytearray(ENTRY)  # entry 0 is never used: IndexHeader.indexCount starts at 1
    for n, (query, phy) in enumerate(entries, start=1):
        h = index_hash(query)
        body += struct.pack(">iqii", h, phy, 0, slots[h % SLOTS])
        slots[h % SLOTS] = n
    head = struct.pack(">qqqqii", 0, 0, 0, end_phy, SLOTS, len(entries) + 1)
    data = head + b"".join(struct.pack(">i", x) for x in slots) + bytes(body)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + b"\0" * (INDEX_HEADER + SLOTS * SLOT + ENTRIES * ENTRY - len(data)))


def test_a_record_below_a_stale_index_end_is_found_in_the_whole_log(tmp_path: Path) -> None:
    store = tmp_path / "broker-a-0" / "store"
    commit_log(store / "commitlog", [("T", "k1", 0), ("T", "k2", 1)])
    log = (store / "commitlog" / "00000000000000000000").read_bytes()
    second = struct.unpack_from(">i", log, 0)[0]  # k2's record starts where k1's ends
    # the index from before the cut: an entry for a record that was at k2's offset then, and an end
    # past both records, so neither the index nor the tail past its end names k1 or k2
    index_file(store / "index" / "20261129000000000", [("T#gone", second)], end_phy=len(log))
    s = Store({"broker-a-0": {"storePathRootDir": str(store), "brokerName": "broker-a",
                              "maxHashSlotNum": str(SLOTS), "maxIndexNum": str(ENTRIES)}})
    try:
        assert [x["commit_offset"] for x in s.find("T", "k2")] == [second]
        assert [(x["node"], x["queue_offset"]) for x in s.find("T", "k1")] == [("broker-a-0", 0)]
        assert s.find("T", "gone") == [] and s.find("T", "never") == []  # the stale entry's record is k2's now
    finally:
        s.close()
