"""The run history: one row per analyzed run in a DuckDB file (default $RMQCHAOS_HOME/history.duckdb,
$RMQCHAOS_HISTORY or a caller's path otherwise), idempotent by run id: recording a run again
replaces its row. Each row holds the figures people compare night after night (counts, duplicates
by cause, busy answers by kind, latency percentiles, recovery times, noise reached) and the whole
summary.json, so a figure added later can be derived from rows written before it (docs/history.md)."""
from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from analysis.judge.anomalies import anomalies
from analysis.evidence.findings import busy_refusals, lasting_outages, noise_intents, outage_seconds, reached_pct
from rmqchaos.machine import paths
from rmqchaos.errors import UserError

ROW_SCHEMA = 1  # what `row` derives from a summary; older rows can be re-derived from their `summary`
COUNTS = ("keys", "attempts", "acked", "acked_weak", "ok", "lost", "duplicated", "duplicate_deliveries", "recovered",
          "failed", "indeterminate", "undelivered_at_stop", "unexpected", "corrupted_deliveries")
LATENCY = (("send", "send"), ("intended", "send_from_intended"), ("e2e", "end_to_end"))
JSON_COLS = ("anomalies", "incomplete_reasons", "duplicates_by_cause", "busy_by_kind", "latency_ms", "recovery", "route_outages",
             "noise", "summary")
COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR PRIMARY KEY", "scenario": "VARCHAR", "extends": "VARCHAR",
    "settings_digest": "VARCHAR", "settings_from": "VARCHAR", "rocketmq_version": "VARCHAR",
    "platform_commit": "VARCHAR", "started_ms": "BIGINT", "analyzed_ms": "BIGINT", "recorded_ms": "BIGINT",
    "complete": "BOOLEAN", "incomplete_reasons": "VARCHAR",
    **{c: "BIGINT" for c in COUNTS},
    "duplicates_by_cause": "VARCHAR", "busy_total": "BIGINT", "busy_rate": "DOUBLE", "busy_by_kind": "VARCHAR",
    **{f"{name}_{p}_ms": "BIGINT" for name, _ in LATENCY for p in ("p50", "p99")},
    "latency_ms": "VARCHAR", "recovery": "VARCHAR", "max_rto_s": "DOUBLE", "route_outages": "VARCHAR",
    "noise": "VARCHAR", "noise_reached_pct": "DOUBLE", "report": "VARCHAR", "run_dir": "VARCHAR",
    "row_schema": "INTEGER", "summary": "VARCHAR",
    # whether the run showed what its scenario exists to show (analysis/judge/signature.py; null: none stated),
    # and the load's share of its asked messages and median lag behind schedule (analysis/reconcile/pace.py)
    "signature_reached": "BOOLEAN", "signature_words": "VARCHAR", "load_reached": "DOUBLE", "load_lag_p50_ms": "BIGINT",
    # the anomalies `rmqchaos explore` keeps a run for (analysis/judge/anomalies.py), and a drawn schedule's seed and base
    "anomalies": "VARCHAR", "explore_seed": "BIGINT", "explore_base": "VARCHAR",
}
LOCK_WAIT_S = 30.0  # another process (a parallel DAG task) holds the file: wait this long for it


# ---------------------------------------------------------------- a summary -> its row (pure)

def row(summary: dict[str, Any], run_dir: str | Path | None = None, report: str | Path | None = None) -> dict[str, Any]:
    """The history row of one analyzed run. run_dir: where its scenario.yaml and versions.json are
    (default: the summary's run_dir); report: its HTML report (default run_dir/report.html, where the
    report stage writes it)."""
    s = summary
    rd = Path(run_dir) if run_dir else Path(s["run_dir"]) if s.get("run_dir") else None
    c = s.get("counts") or {}
    busy = busy_refusals(s) if c else {"total": 0, "attempts": 0, "by_kind": {}}
    versions = dict(s.get("versions") or {})
    if rd is not None and (rd / "versions.json").is_file():
        try:
            versions = {**json.loads((rd / "versions.json").read_text()), **versions}
        except ValueError:
            pass
    digest, source = settings_digest(s, rd)
    lat = s.get("latency_ms") or {}
    rec = recovery(s)
    noise = [{"fault_kind": x["fault_kind"], "target": x["target"], "reached_pct": reached_pct(x["intent"]),
              "short": bool(x["intent"].get("short")), "words": x["intent"].get("words")} for x in noise_intents(s)]
    reached = [x["reached_pct"] for x in noise if x["reached_pct"] is not None]
    starts = [e["start_ms"] for e in s.get("events") or [] if isinstance(e.get("start_ms"), int)]
    out: dict[str, Any] = {
        "run_id": s["run_id"], "scenario": s.get("scenario"), "extends": s.get("extends"),
        "settings_digest": digest, "settings_from": source, "rocketmq_version": versions.get("rocketmq"),
        "platform_commit": versions.get("platform_commit"),
        "started_ms": min(starts) if starts else s.get("analyzed_ms"), "analyzed_ms": s.get("analyzed_ms"),
        "recorded_ms": int(time.time() * 1000), "complete": s.get("complete"),
        "incomplete_reasons": s.get("incomplete_reasons") or [],
        **{k: c.get(k) for k in COUNTS},
        "duplicates_by_cause": s.get("duplicates_by_cause") or {}, "busy_total": busy["total"],
        "busy_rate": round(busy["total"] / busy["attempts"], 6) if busy["attempts"] else None,
        "busy_by_kind": busy["by_kind"],
        **{f"{name}_{p}_ms": (lat.get(key) or {}).get(p) for name, key in LATENCY for p in ("p50", "p99")},
        "latency_ms": lat, "recovery": rec,
        "max_rto_s": max((r["rto_s"] for r in rec if r["rto_s"] is not None), default=None),
        "route_outages": [{"broker": o["broker"], "seconds": outage_seconds(o, s)} for o in lasting_outages(s)]
        if s.get("monitor") else [],
        "noise": noise, "noise_reached_pct": min(reached) if reached else None,
        "report": str(Path(report) if report else rd / "report.html") if (report or rd) else None,
        "run_dir": str(rd.resolve()) if rd else None, "row_schema": ROW_SCHEMA, "summary": s,
        "signature_reached": (s.get("signature") or {}).get("reached"),
        "signature_words": (s.get("signature") or {}).get("words"),
        "load_reached": (s.get("load_pace") or {}).get("reached"),
        "load_lag_p50_ms": ((s.get("load_pace") or {}).get("lag_ms") or {}).get("p50"),
        "anomalies": [a["check"] for a in anomalies(s)] if c else [],
        **explore_origin(rd),
    }
    return out


def explore_origin(run_dir: Path | None) -> dict[str, Any]:
    """{explore_seed, explore_base} of a run whose scenario `rmqchaos explore` drew (None each otherwise)."""
    import yaml
    f = run_dir / "scenario.yaml" if run_dir else None
    try:
        doc = yaml.safe_load(f.read_text()) if f is not None and f.is_file() else None
    except (OSError, yaml.YAMLError):
        doc = None
    ex = doc.get("explore") if isinstance(doc, dict) else None
    ex = ex if isinstance(ex, dict) else {}
    return {"explore_seed": ex.get("seed"), "explore_base": ex.get("base")}


def recovery(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Per fault window: {fault_id, fault_kind, target, rto_s (seconds until the acked rate was back
    at 90 % of the 10 s before it; None: no drop, or never back), throughput_drop}."""
    kinds = {(e.get("params") or {}).get("fault_id"): (e.get("params") or {}).get("fault_kind")
             for e in s.get("events") or [] if e.get("kind") == "fault"}
    return [{"fault_id": w.get("id"), "fault_kind": kinds.get(w.get("id")), "target": w.get("target"),
             "rto_s": w.get("rto_s"), "throughput_drop": w.get("throughput_drop")}
            for w in s.get("windows") or [] if w.get("kind") == "fault"]


def settings_digest(s: dict[str, Any], run_dir: Path | None) -> tuple[str | None, str | None]:
    """A digest of the run's resolved settings and what it was taken from: the resolved scenario
    (run_dir/scenario.yaml, without its name and description) -> 'scenario'; without one, the
    summary's broker.conf of every broker and its load section -> 'summary' (the two never match
    each other)."""
    import yaml
    f = run_dir / "scenario.yaml" if run_dir else None
    if f is not None and f.is_file():
        try:
            doc = yaml.safe_load(f.read_text())
        except (OSError, yaml.YAMLError):
            doc = None
        if isinstance(doc, dict):
            doc = {k: v for k, v in doc.items() if k not in ("name", "description")}
            return _digest(doc), "scenario"
    if s.get("cluster") or s.get("load"):
        return _digest({"brokers": (s.get("cluster") or {}).get("brokers"), "load": s.get("load")}), "summary"
    return None, None


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- the store

@contextmanager
def connect(db: str | Path | None = None, read_only: bool = False) -> Iterator[Any]:
    """A connection to the history file (created with its table on the first write). DuckDB lets one
    process write at a time: another holder is waited for up to LOCK_WAIT_S."""
    import duckdb
    from rmqchaos.machine.wait import poll_until
    f = Path(db) if db else paths.history_db()
    if read_only and not f.is_file():
        raise UserError(f"no run history at {f}", "analyze a run, or `rmqchaos history import runs/`")
    f.parent.mkdir(parents=True, exist_ok=True)
    last: list[Exception] = []

    def attempt() -> Any:
        try:
            return duckdb.connect(str(f), read_only=read_only)
        except duckdb.IOException as e:
            if "lock" not in str(e).lower():
                raise UserError(f"cannot open the run history {f}: {str(e).splitlines()[0]}",
                                "check the path ($RMQCHAOS_HISTORY or --db)") from None
            last[:] = [e]  # the lock of another process: wait for it
            return None
    con = poll_until(attempt, LOCK_WAIT_S, f"the run history {f}", interval=0.2, raise_on_timeout=False)
    if con is None:
        raise UserError(f"the run history {f} is locked by another process ({last[0] if last else '?'})",
                        "try again when it is done")
    try:
        if read_only and not con.execute("SELECT count(*) FROM information_schema.tables "
                                         "WHERE table_name = 'runs'").fetchone()[0]:
            raise UserError(f"{f} is not a run history (no table `runs`)", "check the path ($RMQCHAOS_HISTORY or --db)")
        if not read_only:
            cols = ", ".join(f"{k} {t}" for k, t in COLUMNS.items())
            con.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
            have = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                              "WHERE table_name = 'runs'").fetchall()}
            for k, t in COLUMNS.items():  # a file written by an older version: its new columns, empty
                if k not in have:
                    con.execute(f"ALTER TABLE runs ADD COLUMN {k} {t.replace(' PRIMARY KEY', '')}")
        yield con
    finally:
        con.close()


def record(summary: dict[str, Any], run_dir: str | Path | None = None, db: str | Path | None = None,
           report: str | Path | None = None) -> bool:
    """Put one analyzed run into the history, replacing its row if it is there. True: a new run."""
    with connect(db) as con:
        return _put(con, row(summary, run_dir, report))


def _put(con: Any, r: dict[str, Any]) -> bool:
    vals = [json.dumps(r[k], default=str) if k in JSON_COLS else r[k] for k in COLUMNS]
    new = not con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [r["run_id"]]).fetchone()[0]
    con.execute(f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", vals)
    return bool(new)


def summaries_under(p: str | Path) -> list[Path]:
    """The summary.json files a path names: the file itself, a run directory's analysis/summary.json,
    or every run directory's directly under a directory of runs (e.g. runs/)."""
    p = Path(p)
    if p.is_file():
        return [p]
    if (p / "analysis" / "summary.json").is_file():
        return [p / "analysis" / "summary.json"]
    if p.is_dir():
        return sorted(p.glob("*/analysis/summary.json"))
    raise UserError(f"{p} does not exist", "pass a run directory, a summary.json or a directory of runs")


def import_paths(ps: list[str | Path], db: str | Path | None = None) -> list[dict[str, Any]]:
    """Record every summary the paths name (runs made before the history existed): [{run_id,
    scenario, new, summary}], in order."""
    files = [f for p in ps for f in summaries_under(p)]
    if not files:
        raise UserError(f"no analysis/summary.json under {', '.join(map(str, ps))}", "analyze those runs first")
    rows = []
    for f in dict.fromkeys(f.resolve() for f in files):  # every file read and checked before the first write
        try:
            s = json.loads(f.read_text())
        except ValueError as e:
            raise UserError(f"{f} is not JSON ({e})", "analyze that run again") from None
        if not isinstance(s, dict) or "run_id" not in s:
            raise UserError(f"{f} is not a run's summary (no run_id)", "pass analysis/summary.json files")
        rows.append((row(s, f.parent.parent if f.parent.name == "analysis" else None), f))
    with connect(db) as con:  # one connection, one transaction: all of them or none
        con.execute("BEGIN TRANSACTION")
        out = [{"run_id": r["run_id"], "scenario": r["scenario"], "new": _put(con, r), "summary": str(f)}
               for r, f in rows]
        con.execute("COMMIT")
    return out


def _decode(names: list[str], r: tuple[Any, ...]) -> dict[str, Any]:
    return {k: json.loads(v) if k in JSON_COLS and v is not None else v for k, v in zip(names, r)}


def runs(db: str | Path | None = None, scenario: str | None = None, version: str | None = None,
         since_ms: int | None = None, limit: int | None = None, with_summary: bool = False) -> list[dict[str, Any]]:
    """The rows, oldest first (by start), filtered by scenario name, RocketMQ version and start."""
    where, args = [], []
    for cond, v in (("scenario = ?", scenario), ("rocketmq_version = ?", version), ("started_ms >= ?", since_ms)):
        if v is not None:
            where.append(cond)
            args.append(v)
    q = ("SELECT {cols} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
         + " ORDER BY started_ms DESC, run_id DESC" + (f" LIMIT {int(limit)}" if limit else ""))
    with connect(db, read_only=True) as con:
        cols = [k for k in _present(con) if with_summary or k != "summary"]
        rows = con.execute(q.format(cols=", ".join(cols)), args).fetchall()
    return [_widen(_decode(cols, r)) for r in reversed(rows)]


def _present(con: Any) -> list[str]:
    """COLUMNS the file has: one written by an older version lacks the newest (a read-only connection
    cannot add them); they read as None (`_widen`)."""
    have = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'")
            .fetchall()}
    return [k for k in COLUMNS if k in have]


def _widen(r: dict[str, Any]) -> dict[str, Any]:
    return {**{k: None for k in COLUMNS if k != "summary"}, **r}


def get(ref: str, db: str | Path | None = None) -> dict[str, Any]:
    """One run's row with its summary: by run id, by its run directory, or by a unique end of its id
    (e.g. the 6 hex digits the report shows)."""
    p = Path(ref)
    with connect(db, read_only=True) as con:
        cols = _present(con)
        rs = con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE run_id = ?", [ref]).fetchall()
        if not rs and p.exists():
            rs = con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE run_dir = ?", [str(p.resolve())]).fetchall()
        if not rs:
            rs = con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE ends_with(run_id, ?) ORDER BY run_id",
                             [ref]).fetchall()
    if not rs:
        raise UserError(f"no run {ref!r} in the history", "`rmqchaos history list` shows the run ids")
    if len(rs) > 1:
        raise UserError(f"{ref!r} names {len(rs)} runs ({', '.join(r[0] for r in rs[:5])})", "give the whole run id")
    return _widen(_decode(cols, rs[0]))


# ---------------------------------------------------------------- two rows side by side (pure)

def figures(r: dict[str, Any]) -> dict[str, Any]:
    """The comparable figures of a row, flat and labelled, in the order people read them."""
    out: dict[str, Any] = {k: r.get(k) for k in ("scenario", "rocketmq_version", "platform_commit", "settings_digest",
                                                 "complete")}
    out.update({k: r.get(k) for k in COUNTS})
    out.update({f"duplicates {k}": v for k, v in (r.get("duplicates_by_cause") or {}).items()})
    out["busy_total"] = r.get("busy_total")
    out["busy_rate"] = r.get("busy_rate")
    out.update({f"busy {k}": v for k, v in (r.get("busy_by_kind") or {}).items()})
    out.update({f"{name}_{p}_ms": r.get(f"{name}_{p}_ms") for name, _ in LATENCY for p in ("p50", "p99")})
    out.update({f"rto_s {x['fault_id']}": x["rto_s"] for x in r.get("recovery") or []})
    out.update({f"out of route s {x['broker']}": x["seconds"] for x in r.get("route_outages") or []})
    out["noise_reached_pct"] = r.get("noise_reached_pct")
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure of either row: {figure, a, b, change (b - a for numbers, else None), differs}.
    A figure only one run has reads None on the other side (e.g. a busy kind only one run got:
    shown as 0 there, since a busy kind is counted only when it occurred)."""
    fa, fb = figures(a), figures(b)
    out = []
    for k in list(fa) + [k for k in fb if k not in fa]:
        x, y = fa.get(k), fb.get(k)
        if k.startswith(("busy ", "duplicates ")):
            x, y = x or 0, y or 0
        num = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        out.append({"figure": k, "a": x, "b": y, "change": round(y - x, 6) if num else None, "differs": x != y})
    return out
