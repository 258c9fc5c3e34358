"""Locust load, producer policies and the ledgers, against the real cluster."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.stages import drain, load
from rmqchaos.ledger.journal_read import check_run, journal_tail, read_ledger
from rmqchaos.ledger.journal_write import recover_spool, spool_paths
from rmqchaos.ledger.schema import ledger_files
from tests.conftest import REPO, cli, load_run, write_scenario


def ledgers(run_dir: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(intents, outcomes, deliveries); asserts every file is whole."""
    files = list(check_run(run_dir))
    assert files and all(f.problem is None for f in files), [f.problem for f in files]
    send = [r for f in files if f.path.name.startswith("send-") for r in f.records]
    recv = [r for f in files if f.path.name.startswith("receive-") for r in f.records]
    return [r for r in send if r["rec"] == "intent"], [r for r in send if r["rec"] == "outcome"], recv


def locust_requests(run_dir: Path) -> int:
    return json.loads((run_dir / "load" / "summary.json").read_text())["locust_requests"]


@pytest.mark.long  # make test: test_analysis.py's real run is a fault-free run whose every acked key is received once
def test_fault_free_10k_at_a_fixed_rate_every_acked_key_received_once(cluster, tmp_path: Path) -> None:
    run = load_run(tmp_path, cluster, {"topic": "T_LOAD_10K", "users": 20, "rate": 1000, "duration": "60s",
                                       "messages": 10_000, "message_size": 512},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_load_10k"}]})
    load.run(run)
    assert drain.run(run)["drained"] is True  # its consumers found (records in the cluster's run) and drained
    intents, outcomes, recv = ledgers(run.path)
    assert len(intents) == len(outcomes) == locust_requests(run.path) == 10_000
    assert {(r["producer_id"], r["attempt_id"]) for r in intents} == \
           {(r["producer_id"], r["attempt_id"]) for r in outcomes}  # no intent without an outcome
    # what the analysis relies on instead of pairing the records (docs/ledgers.md)
    same = ("key", "topic", "start_ms", "intended_ms")
    assert {tuple(r[k] for k in ("producer_id", "attempt_id") + same) for r in intents} == \
           {tuple(r[k] for k in ("producer_id", "attempt_id") + same) for r in outcomes}
    acked = {r["key"] for r in outcomes if r["outcome"] == "ok"}
    # A freshly started broker may shed a few sends as busy (code 2, rejected before the append);
    # with no_retry those are final. Anything else unacknowledged is a failure.
    assert len(acked) >= 9_900 and all(r["code"] == 2 for r in outcomes if r["outcome"] != "ok"), \
        collections.Counter((r["outcome"], r["code"], r["remark"], r["error"]) for r in outcomes if r["outcome"] != "ok")
    got = collections.Counter(d["key"] for d in recv)
    assert set(got) == acked and max(got.values()) == 1
    # the fixed schedule: 1000 msg/s over 20 users, so 10k intended send times span ~10 s
    span = (max(r["intended_ms"] for r in intents) - min(r["intended_ms"] for r in intents)) / 1000
    assert 8.5 <= span <= 11.5, span
    assert (run.path / "load" / "locust_stats.csv").exists() and (run.path / "load" / "locust.html").exists()


def test_distributed_mode_two_workers_write_their_own_ledgers(cluster, tmp_path: Path) -> None:
    run = load_run(tmp_path, cluster, {"topic": "T_LOAD_DIST", "users": 4, "rate": 400, "duration": "30s",
                                       "messages": 2000, "workers": 2},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_load_dist"}]})
    load.run(run)
    assert drain.run(run)["drained"] is True  # its consumers found (records in the cluster's run) and drained
    assert len(ledger_files(run.path, "send")) == 2
    intents, outcomes, recv = ledgers(run.path)
    assert len(intents) == len(outcomes) == locust_requests(run.path) == 2000
    assert len({r["producer_id"] for r in intents}) == 2
    assert collections.Counter(d["key"] for d in recv) == collections.Counter(r["key"] for r in outcomes if r["outcome"] == "ok")


def test_ledger_turned_on_and_off_keeps_each_attempts_lines_together(cluster, tmp_path: Path) -> None:
    """bench ledger --alternate: the load turns its ledger on and off; an attempt whose intent was
    written gets its outcome even when the turn ends in flight, and each turn's CPU is recorded."""
    run = load_run(tmp_path, cluster, {"topic": "T_LOAD_TURNS", "users": 8, "rate": 1000, "duration": "30s",
                                       "messages": 4000})
    cluster.create_topics(["T_LOAD_TURNS"], 4)
    r = subprocess.run([sys.executable, "-m", "loadgen", str(run.path), "--ledger", "on", "--ledger-turns", "0.5"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((run.path / "load" / "summary.json").read_text())
    turns = summary["ledger_turns"]  # (on, user CPU-s, system CPU-s, accepted so far) at each turn's start
    assert len(turns) >= 6 and [t[0] for t in turns[:4]] == [True, False, True, False]
    assert all(b[1] >= a[1] and b[2] >= a[2] and b[3] >= a[3] for a, b in zip(turns, turns[1:]))
    intents, outcomes, _ = ledgers(run.path)
    assert {r["attempt_id"] for r in intents} == {r["attempt_id"] for r in outcomes}
    assert summary["locust_requests"] == 4000
    # only the on turns' attempts have lines: the sends accepted during on turns, give or take the
    # users' sends in flight at each turn's edge (their intent on one side, their answer on the other).
    # Which share that is depends on how fast each kind of turn sends, so it is not a fixed band.
    ends = [t[3] for t in turns[1:]] + [summary["locust_requests"] - summary["locust_failures"]]
    on_accepted = sum(end - t[3] for t, end in zip(turns, ends) if t[0])
    assert 0 < on_accepted < 4000 and abs(len(intents) - on_accepted) <= 8 * len(turns) + summary["locust_failures"]


def test_sigkilled_producer_leaves_intents_and_parsable_ledgers(cluster, tmp_path: Path) -> None:
    # far above what the broker takes, so every user is always mid-send: the kill cannot land between sends
    run = load_run(tmp_path, cluster, {"topic": "T_LOAD_KILL", "users": 50, "rate": 200_000, "duration": "30s"})
    cluster.create_topics(["T_LOAD_KILL"], 4)
    (run.path / "ledgers").mkdir()
    p = subprocess.Popen([sys.executable, "-m", "loadgen", str(run.path)], cwd=REPO, stderr=subprocess.DEVNULL)
    send_dir = run.path / "ledgers"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it in full flight
        fs = list(send_dir.glob("send-*.jsonl"))
        if fs and journal_tail(fs[0]).end > 200_000:
            break
        time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    [f] = ledger_files(run.path, "send")
    recover_spool(f)  # the last records, not yet drained, are in its spool (what the seal does first)
    assert not any(sp.exists() for sp in spool_paths(f))
    lf = read_ledger(f)  # parses; a torn tail would be reported, not raised
    assert not lf.corrupt
    if lf.torn_offset is not None:
        assert lf.problem == f"{f}: torn last record at byte {lf.torn_offset} ({lf.torn_bytes} bytes, crash mid-write)"
        assert lf.torn_offset + lf.torn_bytes == journal_tail(f).end == f.stat().st_size
    intents = {r["attempt_id"] for r in lf.records if r["rec"] == "intent"}
    outcomes = {r["attempt_id"] for r in lf.records if r["rec"] == "outcome"}
    assert outcomes < intents, "a killed producer leaves intents without outcomes"


@pytest.mark.fast
def test_torn_last_record_is_reported_with_file_and_offset(tmp_path: Path) -> None:
    f = tmp_path / "send-w0-1.jsonl"
    whole = b'{"rec":"intent","attempt_id":1}\n{"rec":"outcome","attempt_id":1}\n'
    f.write_bytes(whole + b'{"rec":"intent","att')
    lf = read_ledger(f)
    assert len(lf.records) == 2 and lf.torn_offset == len(whole) and lf.torn_bytes == 20
    assert lf.problem == f"{f}: torn last record at byte {len(whole)} (20 bytes, crash mid-write)"
    f.write_bytes(b'{"a":1}\nnot json\n{"b":2}\n')
    lf = read_ledger(f)
    assert len(lf.records) == 2 and lf.corrupt == [8] and "unparsable" in (lf.problem or "")


def test_resend_to_backup_topic_on_busy_never_duplicates(strict_cluster, tmp_path: Path) -> None:
    """Busy answers (code 2) are rejections before the append: the resend to <topic>_bak is the only copy."""
    run = load_run(tmp_path, strict_cluster, {"topic": "T_BUSY", "users": 300, "spawn_rate": 1000, "rate": 6000,
                                              "duration": "20s", "messages": 3000, "timeout": "10s",
                                              "policy": {"kind": "resend_to_backup_topic", "resend_on": ["busy"]}},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_busy"}]})
    load.run(run)
    drain.run(run)
    intents, outcomes, recv = ledgers(run.path)
    busy_first = {r["key"] for r in outcomes if r["attempt"] == 1 and r["code"] == 2}
    assert busy_first, collections.Counter((r["outcome"], r["code"]) for r in outcomes)
    assert all(r["remark"].startswith("[TIMEOUT_CLEAN_QUEUE]broker busy") for r in outcomes if r["code"] == 2)
    resent = {r["key"]: r for r in outcomes if r["attempt"] == 2}
    assert set(resent) == busy_first and {r["topic"] for r in resent.values()} == {"T_BUSY_bak"}
    by_topic = collections.defaultdict(set)
    for d in recv:
        by_topic[d["topic"]].add(d["key"])
    assert not busy_first & by_topic["T_BUSY"], "a busy-rejected first attempt was stored"
    assert {k for k, r in resent.items() if r["outcome"] == "ok"} == busy_first & by_topic["T_BUSY_bak"]


def test_resend_to_backup_topic_on_timeout_duplicates_what_was_stored(fresh_cluster, tmp_path: Path) -> None:
    """A paused broker: first attempts time out, are resent to the backup topic, and once the broker
    resumes it stores the originals too — the duplicates of incident 000, visible in both ledgers."""
    run = load_run(tmp_path, fresh_cluster, {"topic": "T_TMO", "users": 10, "rate": 200, "duration": "15s",
                                             "timeout": "1s", "policy": {"kind": "resend_to_backup_topic",
                                                                          "resend_on": ["timeout"]}},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_tmo"}]})
    node = fresh_cluster.node("broker-a")

    def pause_window() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # pause once the load has been running for a while
            fs = list((run.path / "ledgers").glob("send-*.jsonl"))
            if fs and journal_tail(fs[0]).end > 150_000:
                break
            time.sleep(0.1)
        node.pause()
        time.sleep(3)
        node.resume()
    t = threading.Thread(target=pause_window)
    t.start()
    try:
        load.run(run)
        drain.run(run)
    finally:
        t.join()
        node.resume()
    intents, outcomes, recv = ledgers(run.path)
    timed_out = {r["key"] for r in outcomes if r["attempt"] == 1 and r["outcome"] == "timeout"}
    assert timed_out
    resent = {r["key"]: r for r in outcomes if r["attempt"] == 2}
    assert set(resent) == timed_out and {r["topic"] for r in resent.values()} == {"T_TMO_bak"}
    by_topic = collections.defaultdict(set)
    for d in recv:
        by_topic[d["topic"]].add(d["key"])
    assert {k for k, r in resent.items() if r["outcome"] == "ok"} <= by_topic["T_TMO_bak"]
    stored_originals = timed_out & by_topic["T_TMO"]
    assert stored_originals, "the paused broker stored none of the timed-out first attempts after resuming"
    assert stored_originals & by_topic["T_TMO_bak"], "no key was delivered from both topics"


def test_ignore_send_status_records_the_true_status_and_counts_it_as_success(strict_cluster, tmp_path: Path) -> None:
    run = load_run(tmp_path, strict_cluster, {"topic": "T_IGN", "users": 2, "rate": 100, "duration": "20s",
                                              "messages": 200, "policy": {"kind": "ignore_send_status"}},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_ign"}]})
    load.run(run)
    drain.run(run)
    intents, outcomes, recv = ledgers(run.path)
    weak = [r for r in outcomes if r["status"] == "FLUSH_DISK_TIMEOUT"]
    assert weak and all(r["outcome"] == "ok" and r["code"] == 10 and r["app_ok"] for r in weak)
    not_accepted = sum(1 for r in outcomes if not r["app_ok"])
    assert json.loads((run.path / "load" / "summary.json").read_text())["locust_failures"] == not_accepted
    assert {d["key"] for d in recv} >= {r["key"] for r in weak}  # stored, as the status says


@pytest.mark.fast
def test_bad_load_settings_fail_before_anything_starts(tmp_path: Path) -> None:
    for bad, expect in ((("rate", -5), "load.rate: Input should be greater than 0"),
                        (("duration", 0), "load.duration: Input should be greater than 0"),
                        (("policy", {"kind": "resend_twice"}), "load.policy.kind: Input should be")):
        f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {bad[0]: bad[1]}})
        out = tmp_path / "never"
        r = cli("run", str(f), "--out", str(out))
        assert r.returncode == 1 and expect in r.stderr, r.stderr
        assert r.stderr.startswith(f"rmqchaos: error: {f}:")
        assert not out.exists()
