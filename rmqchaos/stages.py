"""Pipeline stages. Each runs on its own against a run directory (the Airflow DAGs run each as a
task), records its status in state.json and its window in timeline.jsonl, and leaves all state
in the run directory. `down` works whatever happened before it."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from cluster import rocketmq_tools as tools
from cluster.local import LocalCluster, reap
from cluster.procs import now_ms
from rmqchaos.errors import UserError
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir
from rmqchaos.spec import WitnessCheck


class CheckFailed(UserError):
    pass


@contextmanager
def stage(run: RunDir, name: str) -> Iterator[None]:
    t0 = now_ms()
    st = run.state()
    st["stages"][name] = {"status": "running", "start_ms": t0}
    run.write_state(st)
    outcome, err = "ok", None
    try:
        yield
    except BaseException as e:
        outcome, err = "failed", (e.line() if isinstance(e, UserError) else f"{type(e).__name__}: {e}")
        raise
    finally:
        st = run.state()
        st["stages"][name] = {"status": outcome, "start_ms": t0, "end_ms": now_ms(), "error": err}
        run.write_state(st)
        run.event("stage", name, t0, now_ms(), outcome, **({"error": err} if err else {}))


def backend(run: RunDir) -> LocalCluster:
    return LocalCluster(run)


def up(run: RunDir) -> None:
    with stage(run, "up"):
        backend(run).up()


def check(run: RunDir) -> None:
    """Checks configured in the scenario's `checks:` section (now: the RocketMQ-tools witness)."""
    with stage(run, "check"):
        w = run.scenario().checks.witness
        if w is None:
            say("no checks configured")
            return
        result = witness(run, backend(run), w)
        if not result["ok"]:
            raise CheckFailed(f"witness check failed: {result['problems'][0]}",
                              f"details in {run.path / 'checks' / f'witness-{w.topic}.json'}")


def load(run: RunDir, ledger: bool | None = None) -> None:
    """Consumers up, Locust load, drain, consumers down (rmqchaos/load_stage.py)."""
    from rmqchaos.load_stage import run_load_stage
    with stage(run, "load"):
        run_load_stage(run, backend(run), ledger)


def down(run: RunDir) -> list[str]:
    with stage(run, "down"):
        say("stopping the cluster")
        done = reap(run, grace=run.scenario().cluster.stop_timeout)
        for d in done:
            say(d)
        return done


def witness(run: RunDir, cluster: LocalCluster, w: WitnessCheck) -> dict[str, Any]:
    """Send with RocketMQ's benchmark Producer, count what each broker stored with mqadmin
    topicStatus, read everything back with mqadmin printMsg (a real pull consumer)."""
    s = run.scenario()
    v, ns, out = s.cluster.rocketmq_version, cluster.namesrv_addr, run.path / "checks"
    out.mkdir(parents=True, exist_ok=True)
    masters = [p for p in cluster.plans.values() if p.role == "master"]
    topic = w.topic
    admin = cluster.admin()
    for p in masters:
        admin.create_topic(p.addr, topic, queues=4)
    _wait(lambda: {q["brokerName"] for q in (admin.topic_route(topic) or {}).get("queueDatas", [])}
          >= {p.broker_name for p in masters}, 30, f"topic {topic} to route to every broker group")
    cg = cluster.tools_cgroup()
    tw = {"cgroup_procs": cg.procs_files()}
    t0 = now_ms()
    say(f"witness: RocketMQ's benchmark Producer sends {w.messages} x {w.message_size} B to {topic}")
    before = tools.topic_offsets(v, out / "tools", ns, topic, **tw)
    prod = tools.bench_produce(v, out / "tools", ns, topic, w.messages, w.message_size, w.threads, w.timeout, **tw)
    (out / f"witness-{topic}-producer.log").write_text(prod.out)
    done = tools.bench_complete(prod.out)
    sent, send_failed = (done[0], done[1] + done[2]) if done else (0, w.messages)
    stored_after = tools.topic_offsets(v, out / "tools", ns, topic, **tw)
    stored = {b: stored_after.get(b, 0) - before.get(b, 0) for b in stored_after}
    say(f"witness: stored per broker {stored}; reading everything back with mqadmin printMsg")
    msgs = tools.read_back(v, out / "tools", ns, topic, w.timeout, **tw)
    read_per: dict[str, int] = {}
    for _, broker, _, _ in msgs:
        read_per[broker] = read_per.get(broker, 0) + 1
    expected_total = sum(before.values()) + w.messages
    problems = []
    if sent != w.messages or send_failed:
        problems.append(f"producer reported {sent} sent, {send_failed} failed; expected {w.messages} sent")
    if sum(stored.values()) != w.messages:
        problems.append(f"brokers stored {sum(stored.values())} new messages, expected {w.messages}")
    for p in masters:
        if stored.get(p.broker_name or "", 0) <= 0:
            problems.append(f"{p.broker_name} stored none of the messages")
    if len(msgs) != expected_total or len({x[0] for x in msgs}) != expected_total:
        problems.append(f"read back {len(msgs)} messages ({len({x[0] for x in msgs})} distinct), "
                        f"expected {expected_total}")
    result = {"ok": not problems, "problems": problems, "topic": topic, "messages": w.messages,
              "sent": sent, "send_failed": send_failed, "stored_per_broker": stored,
              "read_back_total": len(msgs), "read_back_per_broker": read_per,
              "read_back_distinct": len({x[0] for x in msgs}), "start_ms": t0, "end_ms": now_ms()}
    (out / f"witness-{topic}.json").write_text(json.dumps(result, indent=2) + "\n")
    run.event("check", "witness", t0, now_ms(), "ok" if result["ok"] else "failed",
              **{k: result[k] for k in ("sent", "stored_per_broker", "read_back_total")})
    say(f"witness: {'OK' if result['ok'] else 'FAILED'}: sent {sent}, stored {sum(stored.values())}, "
        f"read back {len(msgs)} ({read_per})")
    return result


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise UserError(f"timed out after {timeout:.0f}s waiting for {what}", "check `rmqchaos cluster status`")
        time.sleep(0.25)


def analyze(run: RunDir, master: str | None = None) -> dict[str, Any] | None:
    """The PySpark reconciliation of the run's ledgers (analysis/job.py) -> analysis/summary.json."""
    from rmqchaos.ledgers import ledger_files
    with stage(run, "analyze"):
        if not ledger_files(run.path, "send") and not ledger_files(run.path, "receive"):
            say("analyze: no ledgers in this run (no load ran)")
            return None
        from analysis.job import analyze as job
        return job(run.path, master)


def report(run: RunDir) -> Path:
    """report.txt (stages, witness, counts) and, when the run was analyzed, report.html."""
    with stage(run, "report"):
        summary_f = run.path / "analysis" / "summary.json"
        if summary_f.exists():
            from analysis.report import write_report
            write_report([run.path], run.path / "report.html")
        st = run.state()
        tl = run.timeline()
        up_ev = next((e for e in tl if e["kind"] == "cluster_up"), None)
        w = run.scenario().checks.witness
        wfile = run.path / "checks" / f"witness-{w.topic}.json" if w else None
        wres = json.loads(wfile.read_text()) if wfile and wfile.exists() else None
        rep = {"run_id": st["run_id"], "scenario": run.scenario().name, "stages": st["stages"],
               "cluster_up_s": round((up_ev["end_ms"] - up_ev["start_ms"]) / 1000, 1) if up_ev else None,
               "witness": wres}
        (run.path / "report.json").write_text(json.dumps(rep, indent=2) + "\n")
        lines = [f"run {st['run_id']}  scenario {rep['scenario']}",
                 f"cluster up: {rep['cluster_up_s']} s" if up_ev else "cluster up: (not run)"]
        for name, sg in st["stages"].items():
            if name == "report":
                continue
            dur = (sg.get("end_ms", 0) - sg["start_ms"]) / 1000 if sg.get("end_ms") else None
            lines.append(f"  stage {name:8s} {sg['status']:8s} {'' if dur is None else f'{dur:.1f}s'}"
                         + (f"  {sg['error']}" if sg.get("error") else ""))
        if wres:
            lines.append(f"witness ({wres['topic']}): sent {wres['sent']}, stored per broker "
                         f"{wres['stored_per_broker']}, read back {wres['read_back_total']} -> "
                         + ("OK" if wres["ok"] else "FAILED: " + "; ".join(wres["problems"])))
        if summary_f.exists():
            summ = json.loads(summary_f.read_text())
            c = summ["counts"]
            lines.append(f"keys {c['keys']} (attempts {c['attempts']}, acked {c['acked']}, acked weak "
                         f"{c['acked_weak']}): ok {c['ok']}, LOST {c['lost']}, DUPLICATED {c['duplicated']} "
                         f"(+{c['duplicate_deliveries']} deliveries), recovered {c['recovered']}, failed "
                         f"{c['failed']}, indeterminate {c['indeterminate']}; unexpected {c['unexpected']}")
            if c.get("corrupted_deliveries"):
                lines.append(f"CORRUPTED: {c['corrupted_deliveries']} deliveries carried the msgId of a sent message "
                             f"with a damaged key (e.g. {summ['corrupted'][0]['sent_key']} came back as "
                             f"{summ['corrupted'][0]['key'][:40]})")
            causes = {k: v for k, v in summ["duplicates_by_cause"].items() if v}
            if causes:
                lines.append("extra deliveries by cause: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
            prefixes = summ["errors"]["by_remark_prefix"]
            if prefixes:
                lines.append("broker busy texts: " + ", ".join(f"{k} {v}" for k, v in prefixes.items()))
            for w in summ["warnings"]:
                lines.append(f"warning: {w}")
            lines.append(f"html report: {run.path / 'report.html'}")
        (run.path / "report.txt").write_text("\n".join(lines) + "\n")
        return run.path / "report.txt"
