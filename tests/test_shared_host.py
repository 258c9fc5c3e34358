"""The shared host of incident 000 (scenarios/shared-host*.yaml): the scenario family and the
broker's own evidence (pure logic), then shared-host.yaml itself, scaled for CI, end to end on a
real broker beside real Redis and fio noise: the broker's busy answers land verbatim in the send
ledger, every key is classified, and the ledgers show that no busy-answered attempt was stored."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.evidence import broker_log
from conftest import REPO, run_here
from pipeline.runs import load_scenario
from pipeline.workflows.matrix import scenarios as matrix

SCENARIOS = REPO / "scenarios"
# The broker's texts as 5.5.0 writes them (docs/broker-evidence.md), whole.
BUSY_TEXT = re.compile(
    r"^(\[(PCBUSY_CLEAN_QUEUE|TIMEOUT_CLEAN_QUEUE)\]broker busy, start flow control for a while, "
    r"period in queue: \d+ms, size of queue: \d+"
    r"|\[PC_SYNCHRONIZED\]broker busy, start flow control for a while"
    r"|\[REJECTREQUEST\]system busy, start flow control for a while)$")


# ---------------------------------------------------------------- the scenario family (pure logic)

def _flat(d: dict, pre: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{pre}{k}."))
        else:
            out[f"{pre}{k}"] = v
    return out


@pytest.mark.fast
@pytest.mark.parametrize("variant, changed", [
    ("shared-host-quiet", {"faults": []}),
    ("shared-host-page-cache-only", {"faults": [{"id": "pagecache", "kind": "page_cache_limit", "target": "broker-a",
                                                 "at": 1.0, "after": None, "restart_after": None, "repeat": None,
                                                 "timeout": 60.0,
                                                 "duration": None, "page_cache_mb": 32}]}),
    ("shared-host-wait-queue", {"cluster.broker_defaults.config.waitTimeMillsInSendQueue": 750}),
    ("shared-host-pagecache-timeout", {"cluster.broker_defaults.config.osPageCacheBusyTimeOutMills": 250}),
    ("shared-host-one-thread", {"cluster.broker_defaults.config.sendMessageThreadPoolNums": 1}),
    ("shared-host-many-threads", {"cluster.broker_defaults.config.sendMessageThreadPoolNums": 16,
                                  "cluster.broker_defaults.config.useReentrantLockWhenPutMessage": True}),
    ("shared-host-tsp", {"cluster.broker_defaults.config.transientStorePoolEnable": True,
                         "cluster.broker_defaults.config.transientStorePoolSize": 4,
                         "cluster.broker_defaults.config.mappedFileSizeCommitLog": 67108864}),
    ("shared-host-java-default", {"load.policy.kind": "java_default"}),
    ("shared-host-resend", {"load.policy.kind": "resend_to_backup_topic", "load.timeout": 0.03}),
])
def test_each_variant_changes_only_its_remedy(variant: str, changed: dict) -> None:
    base = _flat(load_scenario(SCENARIOS / "shared-host.yaml").model_dump(mode="json"))
    var = _flat(load_scenario(SCENARIOS / f"{variant}.yaml").model_dump(mode="json"))
    diff = {k: var.get(k) for k in set(base) | set(var) if base.get(k) != var.get(k)}
    # its own signature: what the remedy exists to show (analysis/judge/signature.py)
    diff = {k: v for k, v in diff.items() if k not in ("name", "description") and not k.startswith("signature.")}
    assert diff == changed


@pytest.mark.fast
def test_the_shared_host_family_is_in_the_nightly_matrix_with_noise_on_the_base() -> None:
    names = {Path(p).name for p in matrix(SCENARIOS / "nightly.yaml")}
    assert {p.name for p in SCENARIOS.glob("shared-host*.yaml")} <= names
    s = load_scenario(SCENARIOS / "shared-host.yaml")
    assert sorted(f.kind for f in s.faults) == ["es_like_noise", "page_cache_limit", "redis_noise"]
    conf = s.cluster.broker_defaults.config
    assert conf["osPageCacheBusyTimeOutMills"] < 1000 and conf["waitTimeMillsInSendQueue"] < 200  # tightened


# ---------------------------------------------------------------- the broker's store log (pure logic)

STORE_LOG = """\
2026-11-25 07:51:07 INFO FlushRealTimeService - PERF_COUNTER_FLUSH_DATA_TIME_MS[2026-11-24 23:51:07.186] num:21 cost:10139 tps:2.0811 min:0 max:45 tp50:3 tp80:9 tp90:15 tp99:45 tp999:45 0_1:9 2_5:6 6_10:2 11_50:4 51_100:0 101_500:0 501_999:0 1000_:0
2026-11-25 07:51:09 INFO SendMessageThread_1 - PERF_COUNTER_WRITE_MEMORY_TIME_MS[2026-11-24 23:51:09.844] num:10081 cost:10002 tps:1007.9084 min:0 max:25 tp50:0 tp80:0 tp90:0 tp99:1 tp999:1 0_1:10076 2_5:4 6_10:0 11_50:1 51_100:0 101_500:0 501_999:0 1000_:0
2026-11-25 07:51:55 INFO StoreStatsService - [PAGECACHERT] TotalPut 1000, PutMessageDistributeTime [<=0ms]:900 [0~10ms]:50 [10~50ms]:30 [50~100ms]:10 [100~200ms]:0 [200~500ms]:0 [500ms~1s]:5 [1~2s]:5 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:0 
2026-11-25 07:52:01 WARN SendMessageThread_1 - [NOTIFYME]putMessage in lock cost time(ms)=812, bodyLength=1024 AppendMessageResult=AppendMessageResult{status=PUT_OK}
2026-11-25 07:52:02 WARN SendMessageThread_1 - DefaultMessageStore#putMessage: CommitLog#putMessage cost 640ms, topic=T, bodyLength=1024
2026-11-25 07:52:03 INFO StoreScheduledThread1 - some other line
"""


@pytest.mark.fast
def test_store_log_lines_are_read_on_the_run_clock() -> None:
    e = broker_log.parse(STORE_LOG.splitlines())
    utc = 1795564267000  # 2026-11-24 23:51:07 UTC, written as 07:51:07 GMT+8
    assert e["flush_data"] == [{"t_ms": utc, "n": 21, "window_ms": 10139, "max_ms": 45, "p50_ms": 3, "p99_ms": 45}]
    assert e["write_memory"][0] == {"t_ms": utc + 2000, "n": 10081, "window_ms": 10002, "max_ms": 25, "p50_ms": 0,
                                    "p99_ms": 1}
    (pc,) = e["pagecachert"]
    assert pc["t_ms"] == utc + 48000 and pc["total"] == 1000 and pc["buckets"]["500ms~1s"] == 5
    assert len(pc["buckets"]) == 13
    assert broker_log.slow_share(pc) == pytest.approx(50 / 1000)  # 10~50ms and up
    assert broker_log.slow_share(pc, 500) == pytest.approx(10 / 1000)
    assert e["slow_puts"] == [{"t_ms": utc + 54000, "ms": 812, "kind": "in_lock"},
                              {"t_ms": utc + 55000, "ms": 640, "kind": "put"}]


# ---------------------------------------------------------------- shared-host.yaml on a real broker

def test_shared_host_scaled_for_ci_records_busy_answers_verbatim_and_classifies_every_key(tmp_path: Path) -> None:
    """shared-host.yaml with a shorter, lighter load and its own faults (page cache squeezed, Redis and
    fio noise) on a real broker. Whether the noise trips the scenario's 50 ms thresholds is this host's
    disk speed that day (~1,500-1,800 busy answers in 40 s at 1000 msg/s some days; none in CI once,
    the longest append 49 ms): a measurement, for the nightly. Here osPageCacheBusyTimeOutMills is
    1 ms, so any append that holds the lock longer (a GC pause does) sheds what arrives meanwhile, and
    the test checks what the platform does with the broker's busy answers, whatever the host."""
    f = tmp_path / "shared-host-ci.yaml"
    f.write_text(yaml.safe_dump({
        "extends": str(SCENARIOS / "shared-host.yaml"), "name": "shared-host-ci",
        "cluster": {"namesrv": {"port": 24576}, "brokers": [{"name": "broker-a", "port": 24511}],
                    "broker_defaults": {"config": {"osPageCacheBusyTimeOutMills": 1}}, "stop_timeout": "3s"},
        "checks": {"witness": {"messages": 3000, "message_size": 1024, "threads": 1}},
        "load": {"duration": "25s", "rate": 800},
        "faults": [{"id": "pagecache", "kind": "page_cache_limit", "target": "broker-a", "at": "1s", "page_cache_mb": 32},
                   {"id": "redis", "kind": "redis_noise", "at": "3s", "base_port": 22379},
                   {"id": "es", "kind": "es_like_noise", "at": "3s"}]}, sort_keys=False))
    run, _ = run_here(f, tmp_path / "run")
    noise_bytes = sum(x.stat().st_size for x in (run / "noise").rglob("*") if x.is_file())
    assert noise_bytes < 5 << 20, f"noise data left behind: {noise_bytes} bytes"  # evidence only

    busy = []
    for led in (run / "ledgers").glob("send-*.jsonl"):
        for x in led.read_text().splitlines():
            rec = json.loads(x)
            if rec["rec"] == "outcome" and rec["code"] == 2:
                busy.append(rec["remark"])
    assert busy, "no busy answer under noise"
    assert all(BUSY_TEXT.match(t) for t in busy), [t for t in busy if not BUSY_TEXT.match(t)][:3]

    s = json.loads((run / "analysis" / "summary.json").read_text())
    c = s["counts"]
    # how many of the 20,000 asked a noisy host reaches is its speed (8,711 once): some, every one classified
    assert c["keys"] > 0 and c["unexpected"] == 0 and s["complete"] is True, s["incomplete_reasons"]
    assert c["keys"] == sum(c[k] for k in ("ok", "lost", "duplicated", "recovered", "failed", "indeterminate",
                                            "undelivered_at_stop"))
    answers = {a["answer"]: a for a in s["answers"]}
    busy_answers = {k: a for k, a in answers.items() if k.startswith("[")}
    assert sum(a["attempts"] for a in busy_answers.values()) == len(busy)
    assert all(a["stored"] == 0 for a in busy_answers.values()), busy_answers  # answered before the append
    assert answers["SEND_OK"]["stored"] == answers["SEND_OK"]["attempts"]  # no_retry, nothing lost
    assert c["failed"] == len(busy) and c["lost"] == 0  # no_retry: each busy key is a definite failure
    # the verdict names what the run found: the busy refusals, by kind, with their rate (and its base by name)
    from analysis.report.report import verdict
    assert s["extends"] == "shared-host" and f"; {len(busy):,} of {c['attempts']:,} sends (" in verdict(s) and all(
        f"{k.strip('[]')} {a['attempts']:,}" in verdict(s) for k, a in busy_answers.items()), verdict(s)

    # the squeeze held: the broker's page cache was cut to about 32 MiB and it survived it
    (pc,) = [e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_id"] == "pagecache"]
    ev = pc["params"]["evidence"]
    assert pc["outcome"] == "ok" and ev["oom_kills"] == 0, ev
    assert ev["before"]["page_cache_mb"] > 40 and ev["page_cache_mb_after_cap"] <= 40, ev
    assert ev["at_end"]["page_cache_mb"] <= 48, ev  # still squeezed at the end, whatever the cap's raises
    assert ev["intent"]["short"] is False, ev["intent"]  # its samples' median within the cap (chaos/intent.py)

    # the time axis: disk pressure rose with the noise, the broker's own put latency is there
    disk = s["disk"]
    noise_start = min(e["start_ms"] for e in s["events"] if e["kind"] == "fault")
    before = [d["writes_s"] for d in disk if d["ts_ms"] < noise_start]
    during = [d["writes_s"] for d in disk if d["ts_ms"] > noise_start + 2000]
    assert before and during and max(during) > 2 * max(before), (before, during)
    ev = s["broker_evidence"]["broker-a"]
    assert ev["write_memory"] and all(w["n"] >= 0 for w in ev["write_memory"])
    assert sum(n for p in s["busy_series"].values() for _, n in p) == len(busy)
    html = (run / "report.html").read_text()
    assert "Broker put latency, from its own store log" in html and "stored all the same" in html


# ---------------------------------------------------------------- answers from the ledgers (Spark, planted)

def _attempt(key: str, n: int, topic: str, start: int, outcome: str, code: int | None = None, remark: str | None = None,
             msg_id: str | None = None) -> list[dict]:
    from rmqchaos.ledger.schema import intent_record, outcome_record
    i = intent_record("intent", "r", "p0", start * 10 + n, key, n, topic, "resend_to_backup_topic", start, start)
    o = outcome_record("outcome", "r", "p0", start * 10 + n, key, n, topic, "resend_to_backup_topic", start, start,
                       start + 30,
                       outcome, "SEND_OK" if outcome == "ok" else None, code, remark, None, True, msg_id, None,
                       "broker-a", 0, None, outcome == "ok")
    return [i, o]


def _delivery(key: str, msg_id: str, topic: str, offset: int) -> dict:
    return {"run_id": "r", "key": key, "msg_id": msg_id, "topic": topic, "origin_topic": topic, "broker": "broker-a",
            "queue_id": 0, "queue_offset": offset, "reconsume_times": 0, "consumer_id": "c0", "batch_size": 1,
            "batch_index": 0, "store_ms": 1, "receive_ms": 2}


def _canonical(m: str) -> str:
    """A planted msgId in RocketMQ's form (32 uppercase hex digits); a batch's ids one by one."""
    return ",".join(f"{int.from_bytes(x.encode(), 'big'):032X}" for x in m.split(","))


@pytest.mark.parametrize("form", ["plain", "canonical"])
def test_answers_say_which_attempts_were_stored_and_what_first_answer_duplicated_keys_got(
        kept_spark: Any, tmp_path: Path, form: str) -> None:
    """The same planted answers with msgIds of no particular form (every key matched by msgId) and in
    RocketMQ's form (keys whose one attempt was delivered under its own msgId settled in the key table)."""
    from analysis.reconcile.keys import key_table
    from analysis.reconcile.reconcile import analyze_ledgers
    from analysis.ledgers.sealed import attribute, read_receive, read_send
    mid = _canonical if form == "canonical" else (lambda m: m)
    other_case = (lambda m: _canonical(m).lower()) if form == "canonical" else (lambda m: m.upper())
    busy = "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 12ms, size of queue: 3"
    send = [
        # k1: timed out but stored (its msgId delivered), resent to the backup topic: duplicated
        *_attempt("k1", 1, "T", 1000, "timeout", msg_id=mid("m1a")), *_attempt("k1", 2, "T_bak", 1040, "ok", msg_id=mid("m1b")),
        # k2: busy (not stored), resent: delivered once
        *_attempt("k2", 1, "T", 2000, "error", 2, busy, mid("m2a")), *_attempt("k2", 2, "T_bak", 2040, "ok", msg_id=mid("m2b")),
        # k3: timed out, not stored, resent: delivered once
        *_attempt("k3", 1, "T", 3000, "timeout", msg_id=mid("m3a")), *_attempt("k3", 2, "T_bak", 3040, "ok", msg_id=mid("m3b")),
        # k4: plain success
        *_attempt("k4", 1, "T", 4000, "ok", msg_id=mid("m4a")),
        # k5: busy, and busy again within the same millisecond (two attempts), then not resent
        *_attempt("k5", 1, "T", 5000, "error", 2, busy, mid("m5a")), *_attempt("k5", 2, "T", 5000, "error", 2, busy, mid("m5b")),
        # k6, k7: batch attempts (one msgId per message): stored iff any of their msgIds was delivered
        *_attempt("k6", 1, "T", 6000, "ok", msg_id=mid("m6a,m6b")), *_attempt("k7", 1, "T", 7000, "timeout", msg_id=mid("m7a,m7b")),
        # k8: its one delivery carries its msgId in other letter case: another msgId, so not this attempt's
        *_attempt("k8", 1, "T", 8000, "ok", msg_id=mid("m8a")),
        # k9: never delivered under its key, but its msgId was, under a key never sent: stored
        *_attempt("k9", 1, "T", 9000, "ok", msg_id=mid("m9a")),
        # k10: one attempt, the same copy delivered twice: duplicated, its first answer stored
        *_attempt("k10", 1, "T", 10000, "ok", msg_id=mid("m10a")),
    ]
    recv = [_delivery("k1", mid("m1a"), "T", 0), _delivery("k1", mid("m1b"), "T_bak", 0),
            _delivery("k2", mid("m2b"), "T_bak", 1), _delivery("k3", mid("m3b"), "T_bak", 2),
            _delivery("k4", mid("m4a"), "T", 1), _delivery("k6", mid("m6b"), "T", 2),
            _delivery("k8", other_case("m8a"), "T", 3), _delivery("k9x", mid("m9a"), "T", 4),
            _delivery("k10", mid("m10a"), "T", 5), _delivery("k10", mid("m10a"), "T", 5)]
    (tmp_path / "send-p0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in send))
    (tmp_path / "receive-c0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recv))
    spark = kept_spark
    res = analyze_ledgers(spark, [tmp_path / "send-p0.jsonl"], [tmp_path / "receive-c0.jsonl"], [])
    own = {r["key"]: r["own_msgid_delivered"] for r in key_table(
        read_send(spark, [tmp_path / "send-p0.jsonl"], []),
        attribute(read_receive(spark, [tmp_path / "receive-c0.jsonl"], []))).collect()}
    # settled without a msgId join: only canonical msgIds, one answered attempt, all deliveries under it
    assert {k for k, v in own.items() if v} == ({"k4", "k10"} if form == "canonical" else set())
    answers = {a["answer"]: a for a in res["answers"]}
    assert answers == {
        "SEND_OK": {"answer": "SEND_OK", "attempts": 8, "stored": 7, "dup_keys_first_answer": 1, "dup_keys_first_stored": 1},
        "timeout": {"answer": "timeout", "attempts": 3, "stored": 1, "dup_keys_first_answer": 1, "dup_keys_first_stored": 1},
        "[PCBUSY_CLEAN_QUEUE]": {"answer": "[PCBUSY_CLEAN_QUEUE]", "attempts": 3, "stored": 0,
                                 "dup_keys_first_answer": 0, "dup_keys_first_stored": 0}}
    assert res["counts"]["duplicated"] == 2 and res["duplicates_by_cause"]["backup_topic"] == 1
    assert res["duplicates_by_cause"]["consumer_repull"] == 1
    assert res["busy_series"] == {"[PCBUSY_CLEAN_QUEUE]": [[2, 1], [5, 2]]}
    assert res["counts"]["failed"] == 1  # k5
