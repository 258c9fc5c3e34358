"""cluster/stored/messages.py's lookups on planted store files: a record the index does not name (a broker that
cut its log back and was sent it again does not index below its index's old end) is found in the
node's whole log; a key stored nowhere is found nowhere."""
from __future__ import annotations

import struct
from pathlib import Path

from cluster.stored.messages import ENTRY, INDEX_HEADER, SLOT, Store, index_hash
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


def dledger_log(path: Path, records: list[tuple[str, str, int]], indexes: list[int]) -> list[int]:
    """A DLedger replica's data file: each record (commit_log's layout) in an entry of its own with the
    48-byte header (magic 1, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize), its
    PHYSICALOFFSET the entry's pos + 48 as DLedgerCommitLog writes it; then magic -1. Returns each
    record's offset (pos + 48)."""
    tmp = path.parent / "plain"
    commit_log(tmp, records)
    plain = (tmp / "00000000000000000000").read_bytes()
    out, offsets, at = bytearray(), [], 0
    for index in indexes:
        size, = struct.unpack_from(">i", plain, at)
        rec = bytearray(plain[at:at + size])
        struct.pack_into(">q", rec, 28, len(out) + 48)  # PHYSICALOFFSET
        out += struct.pack(">iiqqqiiii", 1, 48 + size, index, 1, len(out), 0, 0, 0, size) + rec
        offsets.append(len(out) - size)
        at += size
    path.mkdir(parents=True, exist_ok=True)
    (path / "00000000000000000000").write_bytes(bytes(out) + struct.pack(">ii", -1, 0) + b"\0" * 4096)
    return offsets


def test_a_dledger_replicas_log_is_read_entry_by_entry_up_to_where_its_recovery_would_stop(tmp_path: Path) -> None:
    store = tmp_path / "broker-a-0" / "store"
    # three entries in sequence, then a stale one past a truncation (its index out of sequence)
    offsets = dledger_log(store / "dledger-n0" / "data", [("T", "k0", 0), ("T", "k1", 1), ("T", "k2", 2),
                                                          ("T", "stale", 3)], [0, 1, 2, 9])
    index_file(store / "index" / "20261129000000000", [("T#k0", offsets[0])], end_phy=offsets[0])
    conf = {"storePathRootDir": str(tmp_path / "gone.fs"), "storePathCommitLog": str(tmp_path / "gone.fs" / "commitlog"),
            "brokerName": "broker-a", "enableDLegerCommitLog": "true", "dLegerSelfId": "n0",
            "maxHashSlotNum": str(SLOTS), "maxIndexNum": str(ENTRIES)}
    s = Store({"broker-a-0": conf}, cluster_dir=tmp_path)  # the layer's mount is gone: the run's store
    try:
        assert s.nodes() == ["broker-a-0"]
        assert [x["commit_offset"] for x in s.find("T", "k0")] == [offsets[0]]  # through the index
        assert [x["commit_offset"] for x in s.find("T", "k2")] == [offsets[2]]  # the tail past it
        assert [r.topic for r in s.stores[0].scan(0)] == ["T", "T", "T"]
        assert s.find("T", "stale") == []  # past the log's end, as DLedger's recovery reads it
    finally:
        s.close()


def test_entries_past_a_truncated_dledger_log_are_found_but_in_no_log(tmp_path: Path) -> None:
    # a follower held k0..k3, then followed a leader whose log ended at index 2 with another entry 2,
    # at another position (entries of other sizes before it): truncated, its end index 2 in its
    # checkpoint and its index entry 2 naming the leader's entry; the bytes of its own k2 and k3 left
    store = tmp_path / "broker-a-1" / "store"
    base = store / "dledger-n1"
    offsets = dledger_log(base / "data", [("T", f"k{i}", i) for i in range(4)], [0, 1, 2, 3])
    pos = [o - 48 for o in offsets]
    index = b"".join(struct.pack(">iqiqq", 1, p, 0, i, 1) for i, p in enumerate([pos[0], pos[1], 7, pos[3]]))
    (base / "index").mkdir()
    (base / "index" / "00000000000000000000").write_bytes(index + b"\0" * 64)
    (base / "checkpoint").write_text("#props\ncommittedIndex=2\nendIndex=2\n")
    conf = {"storePathRootDir": str(store), "brokerName": "broker-a", "enableDLegerCommitLog": "true",
            "dLegerSelfId": "n1", "maxHashSlotNum": str(SLOTS), "maxIndexNum": str(ENTRIES)}
    cut = {"broker-a-1": [(pos[2], pos[3] + 2000)]}  # its log line: truncatePos, maxPos
    s = Store({"broker-a-1": conf}, truncated=cut)
    try:
        assert [(x["queue_offset"], x["in_log"]) for k in ("k0", "k1", "k2", "k3") for x in s.find("T", k)] == \
            [(0, True), (1, True), (2, False), (3, False)]
        (base / "checkpoint").write_text("")  # emptied by a power loss: the end is not known, k3's index names it
        s2 = Store({"broker-a-1": conf}, truncated=cut)
        assert [x["in_log"] for x in s2.find("T", "k2") + s2.find("T", "k3")] == [False, True]
        s2.close()
        s3 = Store({"broker-a-1": conf})  # no truncation in its logs: everything found is in its log
        assert [x["in_log"] for x in s3.find("T", "k2") + s3.find("T", "k3")] == [True, True]
        s3.close()
    finally:
        s.close()


def test_a_dledger_term_elected_twice_in_a_group_is_a_reused_term(tmp_path: Path) -> None:
    from analysis.judge.figures import value
    from analysis.evidence.log_marks import dledger_lines, dledger_terms, truncations
    d = tmp_path / "cluster"
    line = "2026-12-01 02:{} INFO StateMaintainer - [{}] [VOTE_RESULT] has been elected to be the leader in term {}\n"
    for node, rows in {"broker-a-0": [("44:56", "n0", 1)], "broker-a-1": [("45:30", "n1", 3), ("44:04", "n1", 1)],
                       "broker-b-0": [("44:05", "n0", 1), ("44:40", "n0", 2)]}.items():
        (d / node / "logs" / "rocketmqlogs").mkdir(parents=True)
        (d / node / "logs" / "rocketmqlogs" / "broker.log").write_text(
            "".join(line.format(t, who, term) for t, who, term in rows) + "other\n")
    (d / "namesrv" / "logs" / "rocketmqlogs").mkdir(parents=True)  # no election: left out
    # broker-a-0's term: 0 -> 1 at its first start (elected in the same second), then, its currterm
    # lost, from 0 into term 1 again
    (d / "broker-a-0" / "logs" / "rocketmqlogs" / "broker.log").write_text(
        "2026-12-01 02:44:04 INFO StateMaintainer - n0_[INCREASE_TERM] from 0 to 1\n"
        + line.format("44:04", "n0", 1) +
        "2026-12-01 02:44:55 INFO StateMaintainer - n0_[INCREASE_TERM] from 0 to 1\n" + line.format("44:56", "n0", 1))
    (d / "broker-a-1" / "logs" / "rocketmqlogs" / "broker_default.log").write_text(
        "2026-12-01 05:15:10 WARN EntryHandler-n1 - [TRUNCATE]leaderId=n0 index=5102 truncatePos=6735097 != "
        "maxPos=6761517, this is usually happened on the old leader\n")
    lines = dledger_lines(d)
    assert truncations(lines) == {"broker-a-1": [(6735097, 6761517)]}
    forgotten = dledger_terms(lines)["dledger_terms_forgotten"]
    assert value({"dledger_terms_forgotten": forgotten}, "dledger_terms_forgotten") == 1
    assert forgotten["broker-a-0"] == [1] and "broker-a-1" not in forgotten
    assert value({}, "dledger_terms_forgotten") is None
    el = dledger_terms(lines)["dledger_elections"]
    assert el == {"broker-a-0": [1, 1], "broker-a-1": [1, 3], "broker-b-0": [1, 2]}  # in time order
    groups = {"cluster": {"brokers": {n: {"brokerName": n[:8]} for n in el}}}
    # broker-a's term 1 elected three times (n1; n0 at its start and after its restart): one term reused
    assert value({"dledger_elections": el, **groups}, "dledger_terms_reused") == 1
    assert value({"dledger_elections": {"broker-b-0": [1, 2]}, **groups}, "dledger_terms_reused") == 0
    assert value(groups, "dledger_terms_reused") is None  # an analysis from before: not judged
