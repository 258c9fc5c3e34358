"""The application side of a transactional load (load.transaction, issue 50): what it decides for each
half message, when, and what it answers the broker's check-backs, each decision recorded in the
transaction ledger (rmqchaos/ledger/schema.py TXN_FIELDS) as it is made.

The decision for a key is drawn from the mix by the key's own hash, so a run's mix does not depend
on timing, and the same key gets the same decision in a re-run."""
from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import gevent

from rmqchaos.ledger.journal_write import LedgerWriter
from rmqchaos.spec import Transaction


def drawn(spec: Transaction, key: str) -> str:
    """commit, rollback or unknown for `key`, in the mix's shares (the key's CRC-32 as the draw)."""
    x = zlib.crc32(key.encode()) / 2 ** 32
    return "commit" if x < spec.commit else "rollback" if x < spec.commit + spec.rollback else "unknown"


class TransactionApp:
    """`decisions` is the application's database: it survives a crash (`crash`), as the local
    transactions it records do; `pending` (halves answered, not yet ended) does not."""

    def __init__(self, spec: Transaction, run_id: str, producer_id: str, ledger: Path | None,
                 key_prefix: str = "") -> None:
        self.spec, self.run_id, self.producer_id = spec, run_id, producer_id
        self.key_prefix = key_prefix  # this process's keys start with it (loadgen/context.py key_base)
        self.decisions: dict[str, str] = {}
        self.pending: set[str] = set()  # halves stored and answered, their end not made yet
        # keys left to a check-back not answered commit or rollback yet: ended unknown, abandoned, or
        # answered unknown while still being decided
        self.open: set[str] = set()
        self.generation = 0  # crashes so far: an end begun before one is abandoned
        self.writer = LedgerWriter(ledger) if ledger is not None else None

    def _record(self, key: str | None, source: str, decision: str | None, answer: str, error: str | None) -> None:
        if self.writer is not None:
            self.writer.write_record({"run_id": self.run_id, "producer_id": self.producer_id, "key": key,
                                      "source": source, "decision": decision, "answer": answer,
                                      "decided_ms": int(time.time() * 1000), "error": error})

    def end(self, producer: Any, topic: str, res: Any) -> str | None:
        """After a stored half message `res`: wait `end_after`, decide, end it (oneway). Returns the
        decision; None when the application crashed meanwhile (no decision, no end: abandoned)."""
        key, gen = res.key or "", self.generation
        self.pending.add(key)
        if self.spec.end_after > 0:
            gevent.sleep(self.spec.end_after)
        if gen != self.generation:
            return None
        self.pending.discard(key)
        d = drawn(self.spec, key)
        self.decisions[key] = d
        if d == "unknown":
            self.open.add(key)
        err = producer.end(topic, res, d)
        self._record(res.key, "app", d, d, err)
        return d

    def crash(self) -> int:
        """The application died: every half not yet ended is abandoned, left to the broker's check-back.
        Returns how many."""
        self.generation += 1
        abandoned = len(self.pending)
        self.open |= self.pending
        self.pending.clear()
        return abandoned

    def decide(self, key: str | None, uniq_key: str | None) -> str:
        """The answer to a check-back for `key`: its decision, an unknown one resolved as the spec says;
        a key of this process still being decided, unknown; one it has no decision for (its half
        message failed, or the application died before deciding), rollback, as an application whose
        database holds no such transaction answers; another process's key, unknown."""
        if self.spec.check_after > 0:  # each check-back is answered in its own greenlet
            gevent.sleep(self.spec.check_after)
        k = key or ""
        d = self.decisions.get(k)
        if d is not None:
            answer = self.spec.unknown_resolves_to if d == "unknown" else d
        elif k in self.pending:
            # still being decided: the broker re-appended the half to ask and will ask about that copy
            # again, whatever the application's own end does (the copy is another half): stay for it
            answer = "unknown"
            self.open.add(k)
        elif not (self.key_prefix and k.startswith(self.key_prefix)):
            answer = "unknown"
        else:
            answer = "rollback"
        if answer != "unknown":
            self.open.discard(k)
        self._record(key, "check", d, answer, None)
        return answer

    def linger(self) -> int:
        """After the load: wait until every key ended unknown was asked about, at most spec.linger.
        Returns how many were never asked."""
        t_end = time.monotonic() + self.spec.linger
        while self.open and time.monotonic() < t_end:
            gevent.sleep(0.2)
        return len(self.open)

    def drain(self) -> None:
        if self.writer is not None:
            self.writer.drain()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
