"""Synthetic ledgers with a known truth, written fast by DuckDB (tests and `bench analyze` only).

Key i gets a fate from i % 100:
  0-89 ok | 90 lost (SEND_OK) | 91 lost (FLUSH_DISK_TIMEOUT: acked weak) |
  92 duplicated: timeout, resent to the same topic and stored twice (producer_resend) |
  93 duplicated: timeout, resent to the backup topic, both stored (backup_topic) |
  94 duplicated: redelivered through %RETRY% (consumer_retry) |
  95 duplicated: the same copy delivered twice (consumer_repull) |
  96 recovered: timed out yet stored and delivered once | 97 failed: [TIMEOUT_CLEAN_QUEUE] busy |
  98 indeterminate: intent without outcome | 99 indeterminate: timeout, never delivered
plus n // 1000 deliveries of keys never attempted (unexpected); the even ones carry the msgId of a
sent message (a damaged copy found by msgId only: `msgid_only`), the odd ones a msgId never sent.
Every delivery of an attempted key carries its self-verifying body's verdict: for i % 1000 == 0 the
KEYS property is missing but the body names the key (`properties_damaged`, still attributed), for
i % 1000 == 1 the body fails its checksum (`body_damaged`); the unexpected ones have no such body.

Each line has the shape the platform writes: an intent only the intent's fields (SendLines), an
outcome and a delivery every field, nulls included. Until 2026-11-26 intents carried the outcome's 13
fields as nulls too, which made the send journals ~30 % larger than the writer's and DuckDB's
reference (which parses them) slower: `bench analyze` at 30M rows measured 0.304 on those, 0.270 and
0.294 on these.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rmqchaos.ledger.schema import INTENT_KEYS, OUTCOME_KEYS


# msgIds in RocketMQ's form (32 uppercase hex digits), a fresh one per attempt: attempt a of key i,
# and the ones never sent (unexpected deliveries that carry no sent message's msgId)
_SENT_ID = "printf('7F0000010064%08X%012X', {a}, i)"
_UNSENT_ID = "printf('7F0000020064%08X%012X', 0, i)"
# one JSON text per row, written as is: a one-column CSV without quoting (JSON text holds no raw
# newline or control character, so nothing needs it)
_LINES = "FORMAT CSV, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01'"


def _pairs(keys: tuple[str, ...]) -> str:
    return ", ".join(f"'{k}', {k}" for k in keys)


def _fates(n: int) -> dict[int, int]:
    """How many of the keys 0..n-1 have each fate i % 100."""
    return {m: len(range(m, n, 100)) for m in range(100)}


def truth(n: int) -> dict[str, Any]:
    per = _fates(n)
    ok = sum(per[m] for m in range(90))
    dup_keys = per[92] + per[93] + per[94] + per[95]
    return {"keys": n, "ok": ok, "lost": per[90] + per[91], "duplicated": dup_keys, "recovered": per[96],
            "failed": per[97], "indeterminate": per[98] + per[99], "unexpected": n // 1000,
            "acked": ok + per[90] + per[91] + dup_keys, "acked_weak": per[91], "acked_weak_lost": per[91],
            "attempts": n + per[92] + per[93], "duplicate_deliveries": dup_keys,
            "corrupted_deliveries": len(range(0, n // 1000, 2)) + len(range(0, n, 1000)) + len(range(1, n, 1000)),
            "corrupted_by_kind": {"properties_damaged": len(range(0, n, 1000)), "body_damaged": len(range(1, n, 1000)),
                                  "msgid_only": len(range(0, n // 1000, 2))},
            "duplicates_by_cause": {"consumer_retry": per[94], "backup_topic": per[93], "producer_resend": per[92],
                                    "consumer_repull": per[95], "transaction_recommit": 0, "timer_reput": 0,
                                    "unexplained": 0},
            "answers": answers(n)}


def answers(n: int) -> list[dict[str, Any]]:
    """analyze's `answers` for write(n): every attempt by its answer, the stored ones, and the first answer of
    each duplicated key. A lost key's msgId delivered under an unexpected key (even i < n // 1000) was stored."""
    per = _fates(n)
    send_ok = sum(per[m] for m in range(90)) + per[90] + per[92] + per[93] + per[94] + per[95]
    rows = [{"answer": "SEND_OK", "attempts": send_ok, "stored": send_ok - per[90] + len(range(90, n // 1000, 100)),
             "dup_keys_first_answer": per[94] + per[95], "dup_keys_first_stored": per[94] + per[95]},
            {"answer": "timeout", "attempts": per[92] + per[93] + per[96] + per[99],
             "stored": per[92] + per[93] + per[96],
             "dup_keys_first_answer": per[92] + per[93], "dup_keys_first_stored": per[92] + per[93]},
            {"answer": "FLUSH_DISK_TIMEOUT", "attempts": per[91], "stored": 0,
             "dup_keys_first_answer": 0, "dup_keys_first_stored": 0},
            {"answer": "[TIMEOUT_CLEAN_QUEUE]", "attempts": per[97], "stored": 0,
             "dup_keys_first_answer": 0, "dup_keys_first_stored": 0}]
    return [r for r in rows if r["attempts"]]


def write(run_ledgers: Path, n: int, files: int = 4, run_id: str = "synthetic") -> None:
    """Write send-w<j>.jsonl and receive-c<j>.jsonl (j < files) into `run_ledgers`."""
    import duckdb
    run_ledgers.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    t0 = 1_800_000_000_000
    con.execute(f"""
    CREATE TEMP VIEW k AS SELECT i, i % 100 AS m, 'k' || i AS key, i % {files} AS f,
        {t0} + i // 10 AS t FROM range({n}) r(i);
    CREATE TEMP VIEW a AS
      SELECT i, m, key, f, t, 1 AS attempt, 'T' AS topic FROM k
      UNION ALL SELECT i, m, key, f, t + 1000, 2, CASE WHEN m = 93 THEN 'T_bak' ELSE 'T' END FROM k WHERE m IN (92, 93);
    CREATE TEMP VIEW o AS SELECT *,
        CASE WHEN attempt = 2 OR m < 92 OR m IN (94, 95) THEN 'ok' WHEN m = 97 THEN 'error' ELSE 'timeout' END AS outcome,
        CASE WHEN attempt = 1 AND m = 91 THEN 'FLUSH_DISK_TIMEOUT'
             WHEN attempt = 2 OR m < 92 OR m IN (94, 95) THEN 'SEND_OK' END AS status,
        CASE WHEN attempt = 1 AND m = 91 THEN 10 WHEN m = 97 THEN 2
             WHEN attempt = 2 OR m < 92 OR m IN (94, 95) THEN 0 END AS code,
        CASE WHEN m = 97 THEN '[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 201ms, size of queue: 7' END AS remark
      FROM a;
    """)
    for j in range(files):
        pid = f"w{j}-1"
        # each line as the load writes it (rmqchaos/ledger/lines.py SendLines): an intent carries the
        # intent's fields only, an outcome all of them, nulls included
        con.execute(f"""COPY (
          SELECT CASE WHEN sub = 0 THEN json_object({_pairs(INTENT_KEYS)}) ELSE json_object({_pairs(OUTCOME_KEYS)})
                 END::VARCHAR AS line FROM (
            SELECT 'intent' AS rec, '{run_id}' AS run_id, '{pid}' AS producer_id, i * 2 + attempt AS attempt_id, key,
                   attempt, topic, 'resend_to_backup_topic' AS policy, t AS intended_ms, t AS start_ms,
                   NULL::BIGINT AS end_ms, NULL AS outcome, NULL AS status, NULL::INT AS code, NULL AS remark,
                   NULL AS error, NULL::BOOLEAN AS sent, NULL AS msg_id, NULL AS offset_msg_id, NULL AS broker,
                   NULL::INT AS queue_id, NULL::BIGINT AS queue_offset, NULL::BOOLEAN AS app_ok, i AS ord, 0 AS sub
              FROM o WHERE f = {j}
            UNION ALL
            SELECT 'outcome', '{run_id}', '{pid}', i * 2 + attempt, key, attempt, topic, 'resend_to_backup_topic', t, t,
                   t + 5, outcome, status, code, remark,
                   CASE WHEN outcome = 'timeout' THEN 'no response within 3s' END, true, {_SENT_ID.format(a='attempt')}, NULL,
                   CASE WHEN outcome = 'ok' THEN 'broker-' || (i % 2) END, i % 4,
                   CASE WHEN outcome = 'ok' THEN i * 2 + attempt END, outcome = 'ok' AND status = 'SEND_OK', i, 1
              FROM o WHERE f = {j} AND m <> 98)
          ORDER BY ord, attempt_id, sub) TO '{run_ledgers}/send-w{j}-1.jsonl' ({_LINES})""")
        con.execute(f"""COPY (
          WITH d AS (
            SELECT key, i, 'T' AS topic, 'T' AS origin_topic, i * 2 + 1 AS off, 0 AS rt, 1 AS att FROM k
              WHERE f = {j} AND (m < 90 OR m IN (92, 93, 94, 95, 96))
            UNION ALL SELECT key, i, 'T', 'T', i * 2 + 2, 0, 2 FROM k WHERE f = {j} AND m = 92
            UNION ALL SELECT key, i, 'T_bak', 'T_bak', i * 2 + 2, 0, 2 FROM k WHERE f = {j} AND m = 93
            UNION ALL SELECT key, i, '%RETRY%g', 'T', i * 2 + 9, 1, 1 FROM k WHERE f = {j} AND m = 94
            UNION ALL SELECT key, i, 'T', 'T', i * 2 + 1, 0, 1 FROM k WHERE f = {j} AND m = 95
            UNION ALL SELECT 'u' || i, i, 'T', 'T', -1 - i, 0, CASE WHEN i % 2 = 0 THEN 1 ELSE 0 END
              FROM range({n // 1000}) r(i) WHERE i % {files} = {j})
          SELECT '{run_id}' AS run_id, CASE WHEN i % 1000 = 0 AND key = 'k' || i THEN NULL ELSE key END AS key,
                 CASE WHEN att = 0 THEN {_UNSENT_ID} ELSE {_SENT_ID.format(a='att')} END AS msg_id,
                 NULL AS offset_msg_id, topic, origin_topic,
                 'broker-' || (i % 2) AS broker, i % 4 AS queue_id, off AS queue_offset, rt AS reconsume_times,
                 'c{j}' AS consumer_id, 1 AS batch_size, 0 AS batch_index, {t0} AS store_ms,
                 {t0} + i // 10 + 50 AS receive_ms,
                 CASE WHEN key = 'k' || i THEN key END AS body_key,
                 CASE WHEN key = 'k' || i THEN i % 1000 <> 1 END AS body_ok,
                 NULL::VARCHAR AS served_by, NULL::INTEGER AS delivery_attempt, NULL::VARCHAR AS receipt_handle,
                 NULL::VARCHAR AS ack, NULL::BIGINT AS ack_ms, NULL::VARCHAR AS ack_error, NULL::VARCHAR AS change FROM d)
          TO '{run_ledgers}/receive-c{j}.jsonl' (FORMAT JSON)""")
    con.close()
