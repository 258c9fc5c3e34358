"""The ledgers: the contract between the load, the consumers and the analysis (docs/ledgers.md).

The record schemas below are the one source: the load builds its records from them, the Spark
schemas and the DuckDB reference are derived from them, and a test holds the Java consumer's
records to them. This module answers what a ledger holds and where a run's ledgers are; how a
record becomes its journal line is rmqchaos/ledger/lines.py, how a journal is written (the spool)
rmqchaos/ledger/journal_write.py, how it is read back (torn tails) rmqchaos/ledger/journal_read.py.

Format: JSON Lines, one file per writing process, append-only.
- Crash safety: a record is one line; a crash can only tear the last line, which the reader detects
  (no trailing newline, or a NUL byte: `journal_tail`) and reports with file and byte offset — never
  drops silently.
- Durability and cost (bench ledger): every record is copied into a shared-memory spool of its
  writer before the call returns (an intent before its send), so a SIGKILLed producer leaves all of
  them, without a system call per record; the spool is appended to the journal every DRAIN_S and
  the journal fsync'd every FSYNC_S and on close (a machine crash loses at most that window); a
  dead writer's spool is appended by `recover_spool` (the seal calls it).
- Analysis: a closed journal is sealed into Parquet (rmqchaos/ledger/seal.py); people read the journals
  with `less` or `jq`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- the schema (one source)
# Field types: "string" | "int" (32 bit) | "long" (64 bit) | "bool". Every field may be null.

#: the fields of a send attempt's `intent` record, in the order written
SEND_INTENT = (("rec", "string"), ("run_id", "string"), ("producer_id", "string"), ("attempt_id", "long"),
               ("key", "string"), ("attempt", "int"), ("topic", "string"), ("policy", "string"),
               ("intended_ms", "long"), ("start_ms", "long"))
#: the fields of its `outcome` record: the intent's, then the answer
SEND_OUTCOME = SEND_INTENT + (
    ("end_ms", "long"), ("outcome", "string"), ("status", "string"), ("code", "int"), ("remark", "string"),
    ("error", "string"), ("sent", "bool"), ("msg_id", "string"), ("offset_msg_id", "string"), ("broker", "string"),
    ("queue_id", "int"), ("queue_offset", "long"), ("app_ok", "bool"))
#: every field a send ledger line may carry (intent lines carry a prefix of them)
SEND_FIELDS = SEND_OUTCOME
#: one delivery, as io.rmqchaos.Consumer writes it
RECEIVE_FIELDS = (("run_id", "string"), ("key", "string"), ("msg_id", "string"), ("offset_msg_id", "string"),
                  ("topic", "string"), ("origin_topic", "string"), ("broker", "string"), ("queue_id", "int"),
                  ("queue_offset", "long"), ("reconsume_times", "int"), ("consumer_id", "string"),
                  ("batch_size", "int"), ("batch_index", "int"), ("store_ms", "long"), ("receive_ms", "long"),
                  # what the self-verifying body (rmqchaos/ledger/body.py) says: its key, and whether it checked out
                  ("body_key", "string"), ("body_ok", "bool"),
                  # the node (ip:port) whose pull fetched this delivery; null when the client did not say
                  ("served_by", "string"),
                  # POP, through the proxy (io.rmqchaos.GrpcConsumer; null from the remoting consumer): the
                  # proxy's delivery count (1 the first time) and receipt handle; `ack` ok | error (see
                  # ack_error) | skipped (not acked on purpose) | null (the client acked itself: PushConsumer)
                  # answered at ack_ms; `change` the changeInvisibleDuration's answer when one came first
                  ("delivery_attempt", "int"), ("receipt_handle", "string"), ("ack", "string"), ("ack_ms", "long"),
                  ("ack_error", "string"), ("change", "string"))

#: a transactional load's decisions (issue 50), one record per decision the application made or
#: answered: `source` app (its own end of a half message, at `decided_ms`) or check (its answer to the
#: broker's check-back); `decision` what the application had decided for the key by then (commit,
#: rollback, unknown; null: nothing, e.g. a producer that restarted), `answer` what it sent, `error`
#: why the END_TRANSACTION could not be written
TXN_FIELDS = (("run_id", "string"), ("producer_id", "string"), ("key", "string"), ("source", "string"),
              ("decision", "string"), ("answer", "string"), ("decided_ms", "long"), ("error", "string"))

#: columns the seal adds to both sealed ledgers (rmqchaos/ledger/seal.py, docs/ledgers.md): the msgId as two
#: numbers when it has RocketMQ's form (32 uppercase hex digits; null otherwise), so that the analysis
#: compares msgIds inside its numeric per-key aggregations, exactly, instead of joining strings
SEALED_EXTRA = (("msg_hi", "long"), ("msg_lo", "long"))

#: an ordered load's keys (issue 50): `<sharding key><ORDER_SEP><its sequence number, from 1>`, the one
#: place a message's sharding key and its place in it are recorded (both ledgers carry the key); the
#: separator appears in no other key (load.key_prefix and producer ids cannot hold it)
ORDER_SEP = "~"


def shard_of(key: str | None) -> tuple[str, int] | None:
    """(sharding key, sequence number) of an ordered load's key; None for any other key."""
    if not key or ORDER_SEP not in key:
        return None
    stream, _, seq = key.rpartition(ORDER_SEP)
    return (stream, int(seq)) if seq.isdigit() and stream else None


#: a timer load's keys (issue 51): `<key><DUE_SEP><the ms since the epoch it is due at>`, the one place
#: a message's intended delivery time is recorded (both ledgers carry the key, so a delivery is judged
#: early or late without a join); the separator appears in no other key
DUE_SEP = "@"


def due_of(key: str | None) -> int | None:
    """The time (ms) a timer load's message is due at; None for any other key."""
    if not key or DUE_SEP not in key:
        return None
    _, _, due = key.rpartition(DUE_SEP)
    return int(due) if due.isdigit() else None


INTENT_KEYS = tuple(n for n, _ in SEND_INTENT)
OUTCOME_KEYS = tuple(n for n, _ in SEND_OUTCOME)
RECEIVE_KEYS = tuple(n for n, _ in RECEIVE_FIELDS)


def intent_record(*values: Any) -> dict[str, Any]:
    """An intent record from its values in INTENT_KEYS order (the writer cannot drift from the schema)."""
    if len(values) != len(INTENT_KEYS):
        raise TypeError(f"an intent has {len(INTENT_KEYS)} fields, got {len(values)}")
    return dict(zip(INTENT_KEYS, values))


def outcome_record(*values: Any) -> dict[str, Any]:
    """An outcome record from its values in OUTCOME_KEYS order."""
    if len(values) != len(OUTCOME_KEYS):
        raise TypeError(f"an outcome has {len(OUTCOME_KEYS)} fields, got {len(values)}")
    return dict(zip(OUTCOME_KEYS, values))


# ---------------------------------------------------------------- files

LEDGER_DIR = "ledgers"


def send_ledger_path(run_dir: Path, producer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"send-{producer_id}.jsonl"


def txn_ledger_path(run_dir: Path, producer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"txn-{producer_id}.jsonl"


def receive_ledger_path(run_dir: Path, consumer_id: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"receive-{consumer_id}.jsonl"


def ledger_files(run_dir: Path, kind: str) -> list[Path]:
    """kind: 'send' or 'receive'."""
    d = Path(run_dir) / LEDGER_DIR
    return sorted(d.glob(f"{kind}-*.jsonl")) if d.is_dir() else []
