"""The same classification written independently in DuckDB SQL: the reference the Spark job is
checked against (tests and `rmqchaos bench analyze` only; the platform's analysis is Spark)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.ledgers import rules

from rmqchaos.ledger.schema import RECEIVE_FIELDS, SEND_FIELDS

_DUCK = {"string": "VARCHAR", "int": "INTEGER", "long": "BIGINT", "bool": "BOOLEAN"}


def _columns(fields: tuple[tuple[str, str], ...], *names: str) -> str:
    """A DuckDB read_json `columns=` struct of `names`, typed from the one ledger schema."""
    types = dict(fields)
    return "{" + ",".join(f"'{n}':'{_DUCK[types[n]]}'" for n in names) + "}"


_SEND_COLS = _columns(SEND_FIELDS, "rec", "producer_id", "attempt_id", "key", "attempt", "topic", "intended_ms",
                      "start_ms", "end_ms", "outcome", "status", "code", "sent")
_RECV_COLS = _columns(RECEIVE_FIELDS, "key", "topic", "origin_topic", "broker", "queue_id", "queue_offset",
                      "reconsume_times", "body_key", "body_ok")


def classify(send_files: list[Path], recv_files: list[Path], threads: int | None = None) -> dict[str, Any]:
    import duckdb
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {threads}")
    sf = "[" + ",".join(f"'{f}'" for f in send_files) + "]"
    rf = "[" + ",".join(f"'{f}'" for f in recv_files) + "]"
    rejected = ",".join(str(c) for c in rules.DEFINITE_REJECT_CODES)
    con.execute(f"""
    CREATE TEMP VIEW s AS SELECT * FROM read_json({sf}, format='newline_delimited', columns={_SEND_COLS});
    -- a delivery belongs to the key its intact body names (its KEYS property may be damaged)
    CREATE TEMP VIEW r AS SELECT * REPLACE (CASE WHEN body_ok THEN body_key ELSE key END AS key)
      FROM read_json({rf}, format='newline_delimited', columns={_RECV_COLS});
    CREATE TEMP TABLE att AS
      SELECT i.key, i.topic, o.status,
        CASE WHEN o.outcome = 'ok' THEN 'acked'
             WHEN o.outcome = 'error' AND (o.code IN ({rejected}) OR (o.code IS NULL AND o.sent = false)) THEN 'rejected'
             ELSE 'unknown' END AS c
      FROM (SELECT * FROM s WHERE rec = 'intent') i
      LEFT JOIN (SELECT * FROM s WHERE rec = 'outcome') o USING (producer_id, attempt_id);
    CREATE TEMP TABLE ks AS
      SELECT key, count(*) AS attempts, count(DISTINCT topic) AS topics_attempted,
             bool_or(c = 'acked') AS acked, bool_or(c = 'acked' AND status = 'SEND_OK') AS strong,
             bool_and(c = 'rejected') AS all_rejected
      FROM att GROUP BY key;
    CREATE TEMP TABLE kr AS
      SELECT key, count(*) AS d, count(*) FILTER (WHERE reconsume_times > 0) AS retry,
             count(*) FILTER (WHERE reconsume_times = 0) AS firsts,
             count(DISTINCT origin_topic) FILTER (WHERE reconsume_times = 0) AS topics,
             count(DISTINCT (origin_topic, broker, queue_id, queue_offset)) FILTER (WHERE reconsume_times = 0) AS copies
      FROM r GROUP BY key;
    CREATE TEMP TABLE k AS
      SELECT ks.*, coalesce(kr.d, 0) AS d, kr.retry, kr.firsts, kr.topics, kr.copies,
        CASE WHEN ks.key IS NULL THEN 'unexpected' WHEN coalesce(kr.d, 0) > 1 THEN 'duplicated'
             WHEN kr.d = 1 AND ks.acked THEN 'ok' WHEN kr.d = 1 THEN 'recovered'
             WHEN ks.acked THEN 'lost' WHEN ks.all_rejected THEN 'failed' ELSE 'indeterminate' END AS cls
      FROM ks FULL OUTER JOIN kr USING (key);
    """)
    counts = dict(con.execute("SELECT cls, count(*) FROM k GROUP BY cls").fetchall())
    out: dict[str, Any] = {c: int(counts.get(c, 0)) for c in rules.CLASSES + ("unexpected",)}
    out["keys"] = sum(out[c] for c in rules.CLASSES)
    row = con.execute("""SELECT count(*) FILTER (WHERE acked), count(*) FILTER (WHERE acked AND NOT strong),
        count(*) FILTER (WHERE acked AND NOT strong AND cls = 'lost'),
        coalesce(sum(d - 1) FILTER (WHERE cls = 'duplicated'), 0),
        coalesce(sum(CASE WHEN firsts > 0 THEN retry ELSE d - 1 END) FILTER (WHERE cls = 'duplicated'), 0),
        coalesce(sum(CASE WHEN firsts > 0 THEN topics - 1 ELSE 0 END) FILTER (WHERE cls = 'duplicated'), 0),
        coalesce(sum(CASE WHEN firsts > 0 AND attempts > topics_attempted THEN copies - topics ELSE 0 END)
                 FILTER (WHERE cls = 'duplicated'), 0),
        coalesce(sum(CASE WHEN firsts > 0 THEN firsts - copies ELSE 0 END) FILTER (WHERE cls = 'duplicated'), 0),
        coalesce(sum(CASE WHEN firsts > 0 AND NOT (attempts > topics_attempted) THEN copies - topics ELSE 0 END)
                 FILTER (WHERE cls = 'duplicated'), 0)
        FROM k""").fetchone()
    out.update(acked=int(row[0]), acked_weak=int(row[1]), acked_weak_lost=int(row[2]),
               duplicate_deliveries=int(row[3]))
    out["attempts"] = int(con.execute("SELECT count(*) FROM att").fetchone()[0])
    out["duplicates_by_cause"] = {"consumer_retry": int(row[4]), "backup_topic": int(row[5]),
                                  "producer_resend": int(row[6]), "consumer_repull": int(row[7]),
                                  "transaction_recommit": 0, "timer_reput": 0,  # no transactional or timer load here
                                  "unexplained": int(row[8])}
    con.close()
    return out
