"""`analyze`: a run directory's ledgers and timeline → analysis/summary.json (+ keys.parquet,
series.parquet). Also a spark-submit entry point: `spark-submit analysis/job.py RUN_DIR`."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from analysis.evidence.links import link_series, without_links

SCHEMA_VERSION = 2


def analyze(run_dir: str | Path, master: str | None = None, spark: Any = None) -> dict[str, Any]:
    from analysis.evidence.broker_log import evidence
    from analysis.evidence.log_marks import dledger_lines, dledger_terms, log_marks, truncations
    from analysis.judge.completeness import completeness
    from analysis.judge.serving import summarize as serving
    from analysis.reconcile.pace import pace
    from analysis.judge.signature import evaluate as signature
    from analysis.reconcile.reconcile import analyze_ledgers
    from analysis.contracts.timers import timer_slack_ms
    from analysis.report.verdict import truncated_words
    from analysis.ledgers.session import spark_session
    from cluster.plan.nodes import plan
    from cluster.stored.messages import Store
    from rmqchaos.ledger.schema import ledger_files
    from rmqchaos.progress import say
    from rmqchaos.run.rundir import RunDir
    from rmqchaos.spec import Consumers

    run = RunDir.open(run_dir)
    out = run.path / "analysis"
    t0 = time.time()
    comp = completeness(run)
    if not comp["complete"]:
        say("analyze: INCOMPLETE RUN: " + "; ".join(comp["reasons"]))
    send, recv = ledger_files(run.path, "send"), ledger_files(run.path, "receive")
    say(f"analyze: {len(send)} send and {len(recv)} receive ledger file(s) with Spark")
    from analysis.ledgers.session import C1_ONLY_BELOW_BYTES
    small = sum(_size(f) for f in send + recv) < C1_ONLY_BELOW_BYTES
    spark = spark or spark_session(master, log_file=out / "spark.log", small=small)  # the process's session, kept
    brokers = run.broker_configs()
    # the brokers' own store files (cluster/stored/messages.py): where a lost key is, or that it is nowhere; a
    # DLedger replica's tail it truncated is in no log (its own log lines say where)
    dledger = dledger_lines(run.path / "cluster")
    store = Store(brokers, run.path / "cluster", truncated=truncations(dledger)) if brokers else None
    monitor = _jsonl(run.path / "monitor" / "cluster.jsonl")
    try:
        events = [e for e in run.timeline()]
        res = analyze_ledgers(spark, send, recv, events, out, receive_complete=comp["receive_complete"],
                              store=store if store is not None and store.nodes() else None,
                              brokers=brokers, monitor=monitor,
                              ordered=bool(run.scenario().load and run.scenario().load.order),
                              txn_files=ledger_files(run.path, "txn") if run.scenario().load and
                              run.scenario().load.transaction else None, txn_timing=_txn_timing(brokers),
                              timer_slack_ms=timer_slack_ms(run.scenario(), brokers),
                              proxies={p.name for p in plan(run.scenario()) if p.serves_grpc},
                              revive_slack_ms=int((run.scenario().consumers or Consumers()).revive_wait * 1000))
    finally:
        if store is not None:
            store.close()
    s = run.scenario()
    summary = {"schema_version": SCHEMA_VERSION, "run_id": run.run_id, "scenario": s.name, "extends": _base_name(run.path),
               "run_dir": str(run.path), "analyzed_ms": int(time.time() * 1000),
               "complete": comp["complete"], "incomplete_reasons": comp["reasons"],
               "versions": run.versions(), "cluster": {"brokers": brokers, **({"powerfs": s.cluster.powerfs_nodes()} if s.cluster.powerfs else {})},
               "load": s.load.model_dump(mode="json") if s.load else None,
               **{k: res[k] for k in ("counts", "duplicates_by_cause", "duplicated_keys_by_send_outcome",
                                      "retried_keys_by_batch_position", "errors",
                                      "answers", "busy_series", "latency_ms", "windows", "warnings", "corrupted",
                                      "corrupted_by_kind", "unexpected_examples", "store_check", "failover",
                                      "reused_queue_offsets", "offset_rollback", "order", "transactions", "timers", "pop")},
               "events": events, "series": res["series"],
               # the host's side of the time axis: disk pressure each second, the brokers' own put latency
               "disk": _jsonl(run.disk_metrics_file),
               # the cluster monitor (cluster/watch/monitor.py) each second, without its per-queue detail;
               # its link probes per link (analysis/evidence/links.py)
               "monitor": [_compact(m) for m in monitor], "links": link_series(monitor),
               "broker_evidence": evidence(run.path / "cluster", brokers),
               # named lines of the nodes' own logs (analysis/evidence/log_marks.py; the figure family `log`)
               "log_marks": log_marks(run.path / "cluster"),
               # DLedger replicas' elections by term (a term elected twice), and the terms a replica
               # entered again from 0 (its term and vote forgotten)
               **dledger_terms(dledger)}
    # whether the consumers were really served: per group and broker, the gate, after each restart
    summary["serving"] = serving(run)
    # the load's achieved against asked (analysis/reconcile/pace.py)
    summary["load_pace"] = pace(summary["load"], res.get("lag"))
    if summary["load_pace"] and summary["load_pace"]["short"]:
        say(f"analyze: short of schedule: {summary['load_pace']['words']}")
    if s.expect is not None:  # a known bug's signature: reproduced or not, with the evidence
        from analysis.judge.expect import evaluate, read_probes
        summary["expect"] = evaluate(s.expect, summary, read_probes(run.probes_file), s.cluster.rocketmq_version)
        say(f"analyze: {summary['expect']['words']}")
    # what the scenario exists to show: reached or not, and why (analysis/judge/signature.py)
    summary["signature"] = signature(s.signature, summary, [(f.id, f.kind) for f in s.faults])
    if summary["signature"]:
        say(f"analyze: signature: {summary['signature']['words']}")
    out.mkdir(exist_ok=True)
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(out / "summary.json")
    c = summary["counts"]
    sc = summary["store_check"]
    say(f"analyze: {c['keys']} keys: ok {c['ok']}, lost {c['lost']}"
        + (f" (in no commit log {sc['lost_from_store']}{truncated_words(sc)}, stored but never delivered {sc['lost_in_delivery']})"
           if sc else " (not checked against the store)") + ", "
        + (f"undelivered at stop {c['undelivered_at_stop']} (not verified), " if not comp["complete"] else "")
        + f"duplicated {c['duplicated']}, recovered "
        f"{c['recovered']}, failed {c['failed']}, indeterminate {c['indeterminate']}, unexpected {c['unexpected']}, "
        f"corrupted deliveries {c['corrupted_deliveries']} "
        f"({time.time() - t0:.1f}s)")
    for w in summary["warnings"]:
        say(f"analyze: warning: {w}")
    return summary


def _size(f: Path) -> int:
    """Bytes of a ledger file, or of every file under a sealed (directory) copy."""
    f = Path(f)
    return sum(x.stat().st_size for x in f.rglob("*") if x.is_file()) if f.is_dir() else f.stat().st_size


def _base_name(run_dir: Path) -> str | None:
    """The name of the scenario this run's file `extends:` (the report compares a remedy with its base),
    from the file as written (scenario.src.yaml): the base file's `name:` when its path can be read
    from here, else its file name without .yaml (a file without `name:` is named so); None without one."""
    import yaml
    try:
        doc = yaml.safe_load((run_dir / "scenario.src.yaml").read_text())
        ext = doc.get("extends") if isinstance(doc, dict) else None
        if not isinstance(ext, str) or not ext:
            return None
        base = Path(ext)
        named = yaml.safe_load(base.read_text()) if base.is_absolute() and base.is_file() else None
    except (OSError, yaml.YAMLError):
        return None
    return named["name"] if isinstance(named, dict) and isinstance(named.get("name"), str) else base.stem


def _compact(sample: dict[str, Any]) -> dict[str, Any]:
    if "brokers" not in sample:  # a sample that failed as a whole: kept as it is
        return sample
    sample = without_links(sample)
    brokers = {n: {k: v for k, v in b.items() if k != "backlog"} for n, b in (sample.get("brokers") or {}).items()}
    return {**sample, "brokers": brokers}


def _jsonl(f: Path) -> list[dict[str, Any]]:
    if not f.is_file():
        return []
    out = []
    for x in f.read_text().splitlines():
        try:
            out.append(json.loads(x))
        except ValueError:  # a sampler stopped mid-line: metrics are best effort, unlike the ledgers
            continue
    return out


if __name__ == "__main__":  # spark-submit analysis/job.py RUN_DIR [MASTER]
    analyze(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)


def _txn_timing(brokers: dict[str, dict[str, str]]) -> tuple[int, int]:
    """The brokers' (transactionTimeOut, transactionCheckInterval) in ms, as they ran (5.5.0's defaults
    6000 and 30000 where a broker.conf does not say): the largest, so the bound is never too short."""
    t = [int(c.get("transactionTimeOut") or 6000) for c in brokers.values()] or [6000]
    i = [int(c.get("transactionCheckInterval") or 30000) for c in brokers.values()] or [30000]
    return max(t), max(i)

