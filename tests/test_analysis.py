"""The PySpark reconciliation: exact on planted truth, exact on a real fault-free run, strict about
malformed ledgers, and a report a person can open."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from analysis.ledgers import duckdb_ref, rules, synthetic
from analysis.reconcile.reconcile import analyze_ledgers
from analysis.ledgers.session import spark_session
from analysis.report.report import verdict
from analysis.report.verdict import busy_phrase
from rmqchaos.ledger.seal import LedgerError
from tests.conftest import REPO, cli, load_run
from tests.helpers import CHROMIUM_FLAGS, chromium, rendered_verdicts
from tests.test_client import consume_all

SCHEMA = json.loads((REPO / "analysis" / "summary.schema.json").read_text())


@pytest.fixture
def spark(kept_spark):
    return kept_spark


def _files(d: Path) -> tuple[list[Path], list[Path]]:
    return sorted(d.glob("send-*.jsonl")), sorted(d.glob("receive-*.jsonl"))


def test_synthetic_truth_is_found_exactly_by_spark_and_duckdb(spark, tmp_path: Path) -> None:
    n = 20_000
    synthetic.write(tmp_path, n)
    send, recv = _files(tmp_path)
    truth = synthetic.truth(n)
    res = analyze_ledgers(spark, send, recv, [])
    ref = duckdb_ref.classify(send, recv)
    for k in ("keys", "ok", "lost", "duplicated", "recovered", "failed", "indeterminate", "unexpected", "acked",
              "acked_weak", "acked_weak_lost", "attempts", "duplicate_deliveries"):
        assert res["counts"][k] == ref[k] == truth[k], k
    assert res["duplicates_by_cause"] == ref["duplicates_by_cause"] == truth["duplicates_by_cause"]
    assert res["counts"]["no_outcome"] == truth["indeterminate"] // 2  # the intent-only keys (i % 100 == 98)
    assert res["errors"]["by_remark_prefix"] == {"[TIMEOUT_CLEAN_QUEUE]": truth["failed"]}
    assert res["errors"]["by_status"]["FLUSH_DISK_TIMEOUT"] == truth["acked_weak"]
    assert res["errors"]["by_outcome"]["no_outcome"] == truth["indeterminate"] // 2
    # damaged copies by kind: a missing KEYS property with an intact body still counts for its key
    assert res["corrupted_by_kind"] == truth["corrupted_by_kind"] == {"properties_damaged": 20, "body_damaged": 20,
                                                                     "msgid_only": 10}
    assert res["counts"]["corrupted_deliveries"] == truth["corrupted_deliveries"] == 50
    by_kind = {k: [c for c in res["corrupted"] if c["kind"] == k] for k in truth["corrupted_by_kind"]}
    def i(c: dict) -> str:  # the key number in a synthetic msgId (its last 12 hex digits)
        return str(int(c["msg_id"][-12:], 16))
    assert all(c["sent_key"] == "k" + i(c) and c["prop_key"] == "u" + i(c) for c in by_kind["msgid_only"])
    assert all(c["prop_key"] is None and c["key"] == c["body_key"] == "k" + i(c)
               and c["damage"].startswith("KEYS property missing") for c in by_kind["properties_damaged"])
    # answers: most keys settled by the key table (one attempt, delivered under its own msgId), the rest
    # matched by msgId
    assert sorted(res["answers"], key=lambda r: r["answer"]) == sorted(truth["answers"], key=lambda r: r["answer"])
    assert all(c["damage"].startswith("body fails its checksum") for c in by_kind["body_damaged"])


def test_latency_percentiles_are_exact_nearest_rank_per_group(spark) -> None:
    import math
    import random

    from analysis.ledgers.latency import PERCENTS, histogram as _histogram, percentiles as _percentiles
    from pyspark.sql import functions as F
    rnd = random.Random(7)
    # skewed ms latencies (few distinct values, long tail), some nulls, groups of very different sizes
    rows = [(g, rnd.choice([None, int(rnd.expovariate(1 / 40))]), rnd.randrange(0, 5000))
            for g in range(6) for _ in range(10 ** (g % 4) + g)]
    df = spark.createDataFrame(rows, "g long, a long, b long")
    got = _percentiles(_histogram(df, {"a": F.col("a"), "b": F.col("b")}, F.col("g")))
    for g in range(6):
        for m, i in (("a", 1), ("b", 2)):
            vals = sorted(r[i] for r in rows if r[0] == g and r[i] is not None)
            if not vals:
                assert (g, m) not in got
                continue
            want = {"n": len(vals), "max": vals[-1],  # nearest rank: the value at rank ceil(n * p / 100)
                    **{f"p{p}": vals[math.ceil(len(vals) * p / 100) - 1] for p in PERCENTS}}
            assert got[(g, m)] == want, (g, m)


def test_event_windows_count_the_keys_and_acked_sends_meant_inside_them(spark, tmp_path: Path) -> None:
    n = 20_000
    synthetic.write(tmp_path, n)
    send, recv = _files(tmp_path)
    t0 = 1_800_000_000_000  # synthetic.write: key i is meant to go at t0 + i // 10, its resend 1 s later
    events = [{"kind": "kill", "start_ms": t0, "end_ms": t0 + 999, "params": {"fault_id": "f"}},
              {"kind": "stage", "start_ms": t0, "end_ms": t0 + 5000}]  # bookkeeping: no window
    res = analyze_ledgers(spark, send, recv, events)
    inside = synthetic.truth(n // 2)  # keys 0..9999
    (w,) = res["windows"]
    assert w["id"] == "f" and w["keys_by_class"] == {c: inside[c] for c in rules.CLASSES if inside.get(c)}
    # every acknowledged first attempt; the acknowledged resends (i % 100 in 92, 93) start after the window
    resent = inside["duplicates_by_cause"]["producer_resend"] + inside["duplicates_by_cause"]["backup_topic"]
    assert w["latency_from_intended_ms"]["n"] == inside["acked"] - resent
    failed = synthetic.truth(n)["failed"]  # one busy answer each, in the second its key was meant to go
    assert res["busy_series"] == {"[TIMEOUT_CLEAN_QUEUE]": [[t0 // 1000, inside["failed"]],
                                                            [t0 // 1000 + 1, failed - inside["failed"]]]}


def test_answers_stay_exact_when_the_kinds_of_answer_exceed_the_cap(spark, tmp_path: Path, monkeypatch) -> None:
    """The answers' totals come from the error grouping's rows; past ERROR_GROUPS_MAX kinds those rows
    are cut (a warning), and the answers are then counted apart: still the planted truth."""
    import analysis.reconcile.answers as answers
    n = 5_000
    synthetic.write(tmp_path, n)
    monkeypatch.setattr(answers, "ERROR_GROUPS_MAX", 2)
    res = analyze_ledgers(spark, *_files(tmp_path), [])
    assert any("more than 2 kinds of answer" in w for w in res["warnings"])
    assert sum(res["errors"]["by_outcome"].values()) < res["counts"]["attempts"]  # the cut rows
    assert sorted(res["answers"], key=lambda r: r["answer"]) == \
        sorted(synthetic.truth(n)["answers"], key=lambda r: r["answer"])


def test_incomplete_receive_side_turns_every_lost_key_into_undelivered_at_stop(spark, tmp_path: Path) -> None:
    n = 5_000
    synthetic.write(tmp_path, n)
    send, recv = _files(tmp_path)
    truth = synthetic.truth(n)
    res = analyze_ledgers(spark, send, recv, [], receive_complete=False)
    assert res["counts"]["lost"] == 0 and res["counts"]["undelivered_at_stop"] == truth["lost"] > 0
    assert res["counts"]["ok"] == truth["ok"] and res["counts"]["keys"] == truth["keys"]


def test_malformed_record_fails_with_file_and_position(spark, tmp_path: Path) -> None:
    synthetic.write(tmp_path, 1000, files=1)
    send, recv = _files(tmp_path)
    data = send[0].read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    send[0].write_bytes(data[:cut] + b'{"rec":"intent","key":\n' + data[cut:])
    with pytest.raises(LedgerError) as e:
        analyze_ledgers(spark, send, recv, [])
    assert str(e.value).startswith(f"{send[0]}: malformed record at byte {cut}")


@pytest.mark.parametrize("kind, line", [
    ("send", b'{"rec":"intent","producer_id":"w0-1","attempt_id":"seven","key":"k1"}\n'),  # a wrong type
    ("send", b'{"rec":"outcome","producer_id":"w0-1","attempt_id":7,"outcome":"ok"}\n'),  # no key
    ("send", b'{"rec":"retry","producer_id":"w0-1","attempt_id":7,"key":"k1"}\n'),  # no such record kind
    ("receive", b'{"key":"k1","queue_offset":\n'),                                      # not JSON
])
def test_bad_record_of_either_ledger_names_file_and_position(spark, tmp_path: Path, kind: str, line: bytes) -> None:
    synthetic.write(tmp_path, 1000, files=1)
    send, recv = _files(tmp_path)
    f = (send if kind == "send" else recv)[0]
    data = f.read_bytes()
    cut = data.index(b"\n", len(data) // 3) + 1
    f.write_bytes(data[:cut] + line + data[cut:])
    with pytest.raises(LedgerError) as e:
        analyze_ledgers(spark, send, recv, [])
    assert str(e.value).startswith(f"{f}: malformed record at byte {cut}")


def test_torn_tail_is_a_warning_and_its_record_is_not_counted(spark, tmp_path: Path) -> None:
    synthetic.write(tmp_path, 1000, files=1)
    send, recv = _files(tmp_path)
    size = send[0].stat().st_size
    with open(send[0], "ab") as f:
        f.write(b'{"rec":"intent","run_id":"synthetic","producer_id":"w0-1","attem')
    res = analyze_ledgers(spark, send, recv, [])
    assert res["warnings"] == [f"{send[0]}: torn last record at byte {size} (crash mid-write); not counted"]
    assert res["counts"]["keys"] == 1000


@pytest.fixture(scope="module")
def real_run(cluster, tmp_path_factory: pytest.TempPathFactory):
    """A small fault-free load through the real cluster, analyzed, with its HTML report."""
    from pipeline.stages import analyze, drain, load, report
    tmp = tmp_path_factory.mktemp("analysis-run")
    run = load_run(tmp, cluster, {"topic": "T_ANALYZE", "users": 10, "rate": 500, "duration": "30s",
                                  "messages": 3000},
                   {"settle": "5s", "instances": [{"id": "c0", "group": "g_analyze"}]}, name="analyzed")
    load.run(run)
    assert drain.run(run)["drained"] is True
    analyze.run(run)
    report.run(run)
    return run


def test_fault_free_real_run_reports_zero_lost_zero_duplicated(real_run) -> None:
    s = json.loads((real_run.path / "analysis" / "summary.json").read_text())
    jsonschema.validate(s, SCHEMA)
    c = s["counts"]
    # at most 3000 keys in 30 s: how many a host reaches is its speed (2,576 on a slow day, 13 of them
    # refused busy); every key attempted is counted, and every one has its answer
    intents = {json.loads(x)["key"] for f in (real_run.path / "ledgers").glob("send-*.jsonl")
               for x in f.read_text().splitlines() if json.loads(x)["rec"] == "intent"}
    assert 0 < c["keys"] == len(intents) <= 3000 and c["attempts"] >= c["keys"]
    assert (c["lost"], c["duplicated"], c["unexpected"], c["indeterminate"], c["no_outcome"]) == (0, 0, 0, 0, 0)
    assert c["ok"] + c["failed"] == c["keys"] == sum(c[k] for k in ("ok", "lost", "duplicated", "recovered",
                                                                     "failed", "indeterminate"))
    assert s["versions"]["rocketmq"] and set(s["cluster"]["brokers"]) >= {"broker-a", "broker-b"}
    assert (real_run.path / "analysis" / "keys.parquet").is_dir()
    assert any(w["kind"] == "load" and w["keys_by_class"].get("ok") for w in s["windows"])
    # the Java consumer writes the ledger's schema, field for field; each delivery served by its group's
    # master (the only node of each group here): the address its pull went to
    from cluster import get_backend
    from rmqchaos.ledger.schema import RECEIVE_KEYS
    recv = [json.loads(x) for f in (real_run.path / "ledgers").glob("receive-*.jsonl") for x in f.read_text().splitlines()]
    assert recv and {tuple(r) for r in recv} == {RECEIVE_KEYS}
    addr = {p.broker_name: p.addr for p in get_backend(real_run).plans.values() if p.is_broker}
    assert all(r["served_by"] == addr[r["broker"]] for r in recv), {(r["broker"], r["served_by"]) for r in recv}


def test_withheld_deliveries_are_reported_lost_exactly(real_run, spark, tmp_path: Path) -> None:
    """N deliveries removed from a copy of the receive ledger: exactly N keys lost."""
    d = tmp_path / "ledgers"
    shutil.copytree(real_run.path / "ledgers", d)
    [recv] = sorted(d.glob("receive-*.jsonl"))
    lines = recv.read_bytes().splitlines(keepends=True)
    withheld = lines[100:107]
    recv.write_bytes(b"".join(lines[:100] + lines[107:]))
    res = analyze_ledgers(spark, *_files(d), [])
    assert res["counts"]["lost"] == len(withheld) == 7
    assert res["counts"]["duplicated"] == res["counts"]["unexpected"] == 0


def test_store_check_and_self_verifying_bodies_on_the_real_cluster(real_run, cluster, spark, tmp_path: Path) -> None:
    """On a copy of the real run's ledgers, with the real cluster's stores:
    - a message sent (acked, stored) after the consumers stopped: lost_in_delivery, found where the
      broker said it stored it; an acknowledgement planted for a message never sent: lost_from_store;
    - deliveries crafted through the real broker and the Java consumer: a copy of a sent key with no
      KEYS property but an intact body is counted for its key (properties_damaged, not unexpected); a
      body with a flipped byte is body_damaged; the consumer's verdicts equal rmqchaos.ledger.body.check's."""
    from cluster.stored.messages import Store
    from rmqchaos.ledger import body
    from rmqchaos.ledger.schema import intent_record, outcome_record
    from rmqclient.producer import Producer
    d = tmp_path / "ledgers"
    shutil.copytree(real_run.path / "ledgers", d)
    # k0: a key acknowledged and delivered once (a slow host may have had some refused busy)
    first = next(r for r in map(json.loads, sorted(d.glob("send-*.jsonl"))[0].read_text().splitlines())
                 if r["rec"] == "outcome" and r["outcome"] == "ok")
    k0, pid = first["key"], first["producer_id"]
    cluster.create_topics(["T_CRAFT"], 1)  # waits until it routes to both groups: the consumer must see both queues
    prod = Producer(cluster.namesrv_addr, timeout=10)
    try:
        withheld = prod.send("T_ANALYZE", body.encode("withheld-1", "planted", 1, b"x" * 900, 1024), key="withheld-1")
        assert withheld.ok, withheld
        craft = [body.encode(k0, pid, 1, b"y" * 900, 1024),               # a copy of k0 without its KEYS property
                 bytearray(body.encode("flip-1", "planted", 2, b"z" * 900, 1024)),  # a flipped byte
                 b"not a self-verifying body", b"rmqc1|zzzzzzzz|w|1|k\n"]
        craft[1][500] ^= 0x20
        crafted = [prod.send("T_CRAFT", bytes(b), key=key) for b, key in zip(craft, (None, "flip-1", "foreign-1", "hex-1"))]
        assert all(r.ok for r in crafted), crafted
    finally:
        prod.close()
    with open(d / "send-planted.jsonl", "w") as f:
        for i, (key, r) in enumerate([("withheld-1", withheld), ("planted-1", None)]):
            rec = ("planted", "planted", i + 1, key, 1, "T_ANALYZE", "no_retry", withheld.start_ms, withheld.start_ms)
            f.write(json.dumps(intent_record("intent", *rec)) + "\n")
            f.write(json.dumps(outcome_record("outcome", *rec, withheld.end_ms, "ok", "SEND_OK", 0, None, None, True,
                                              r.uniq_key if r else "7F00000100002A9F0000000000000000",
                                              r.msg_id if r else None, r.broker if r else "broker-a",
                                              r.queue_id if r else 0, r.queue_offset if r else 10**9, True)) + "\n")
    # flip-1, foreign-1 and hex-1 were never attempted: only the crafted deliveries' verdicts matter for them
    got = consume_all(cluster, tmp_path, "g_craft", ["T_CRAFT"], 4)
    assert {(x["key"], x["body_key"], x["body_ok"]) for x in got} == \
        {(k, *body.check(bytes(b))) for b, k in zip(craft, (None, "flip-1", "foreign-1", "hex-1"))}
    assert {(x["key"], x["body_ok"]) for x in got} == {(None, True), ("flip-1", False), ("foreign-1", None),
                                                       ("hex-1", False)}
    with open(d / "receive-craft.jsonl", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in got)
    store = Store(real_run.broker_configs())
    try:
        res = analyze_ledgers(spark, *_files(d), [], store=store)
    finally:
        store.close()
    c, sc = res["counts"], res["store_check"]
    assert c["lost"] == 2 and (sc["lost_from_store"], sc["lost_in_delivery"]) == (1, 1), sc
    [found] = [e for e in sc["examples"] if e["key"] == "withheld-1"]
    assert found["verdict"] == "lost_in_delivery"
    [at] = found["stored_at"]
    assert (at["broker"], at["queue_id"], at["queue_offset"], at["msg_id"], at["body_ok"]) == \
        (withheld.broker, withheld.queue_id, withheld.queue_offset, withheld.uniq_key, True)
    assert [e["stored_at"] for e in sc["examples"] if e["key"] == "planted-1"] == [[]]
    assert sc["method"] == "index" and set(sc["nodes"]) == {"broker-a", "broker-b"}
    # k0 came twice (its own delivery and the damaged copy): duplicated, not unexpected
    assert res["corrupted_by_kind"] == {"properties_damaged": 1, "body_damaged": 2, "msgid_only": 0}
    [pd] = [x for x in res["corrupted"] if x["kind"] == "properties_damaged"]
    assert (pd["key"], pd["prop_key"], pd["body_key"]) == (k0, None, k0) and pd["damage"].startswith("KEYS property missing")
    assert c["duplicated"] == 1 and c["unexpected"] == 3  # flip-1, foreign-1, hex-1: never attempted
    assert {x["key"] for x in res["unexpected_examples"]} == {"flip-1", "foreign-1", "hex-1"}


def test_same_counts_on_a_standalone_spark_cluster_that_stops_leaving_nothing(real_run, tmp_path: Path) -> None:
    """`rmqchaos spark up` (1 master, 2 workers of 1 core, on 127.0.0.1), `analyze --master spark://…`
    on the real run, the same summary counts as local[*]; `spark down` ends every process it started."""
    from rmqchaos.machine.procs import alive
    local = json.loads((real_run.path / "analysis" / "summary.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(real_run.path, run, ignore=shutil.ignore_patterns("analysis"))
    up = cli("spark", "up", "--workers", "2", "--cores", "1", "--memory-mb", "1024", "--port", "17177",
             "--webui-port", "18280")
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert "Spark master spark://127.0.0.1:17177 with 2 worker(s), 2 core(s)" in up.stdout
        assert cli("spark", "up", "--port", "17177").returncode != 0  # one cluster at a time, one clear line
        st = json.loads(cli("spark", "status").stdout)
        assert set(st["running"]) == {"master", "worker-1", "worker-2"} and st["workers_alive"] == 2
        listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
        for line in listening.splitlines():  # every listener of the three JVMs is on loopback
            if any(f"pid={p}," in line for p in st["running"].values()):
                assert line.split()[3].startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")), line
        hist = tmp_path / "history.duckdb"  # the run history the analyze stage records each run in
        an = cli("analyze", str(run), "--master", "spark://127.0.0.1:17177", timeout=600,
                 env={**os.environ, "RMQCHAOS_HISTORY": str(hist)})
        assert an.returncode == 0, an.stderr[-2000:]
        assert "WARNING" not in an.stderr  # Spark's and the JVM's own lines go to analysis/spark.log
    finally:
        down = cli("spark", "down")
    assert down.returncode == 0 and down.stdout.count(": terminated") + down.stdout.count(": killed") == 3, down.stdout
    assert not any(alive(p, None) for p in st["running"].values())
    remote = json.loads((run / "analysis" / "summary.json").read_text())
    assert remote["counts"] == local["counts"] and remote["store_check"]["checked"] == local["store_check"]["checked"]
    # the real run in the history once with its counts, though analyzed here and imported from its
    # first analysis too (one row per run id)
    im = cli("history", "import", str(real_run.path), "--db", str(hist))
    assert im.returncode == 0, im.stderr
    rows = json.loads(cli("history", "list", "--db", str(hist), "--json").stdout)
    assert [(r["run_id"], r["keys"], r["lost"], r["duplicated"]) for r in rows] == \
        [(local["run_id"], local["counts"]["keys"], 0, 0)]


def test_html_report_renders_with_its_plots_in_headless_chromium(real_run, tmp_path: Path) -> None:
    from PIL import Image
    html = real_run.path / "report.html"
    text = html.read_text()
    assert text.count("<svg") == 5  # throughput, lost/dup, errors, latency, and the host's time axis (disk.jsonl)
    assert "Broker put latency, from its own store log" in text
    for external in ("<script", "<link", "src=", "url(http", 'href="http'):  # self-contained: nothing to fetch
        assert external not in text, external
    # the verdict at the top, as the browser shows it, says what summary.json says
    s = json.loads((real_run.path / "analysis" / "summary.json").read_text())
    assert rendered_verdicts(html, tmp_path / "profile") == [verdict(s)]
    # a busy host may refuse a send even without faults (CI once: TIMEOUT_CLEAN_QUEUE 1 of 3,000); then
    # the verdict names it from the summary's own error counts, and says nothing of it otherwise
    busy = busy_phrase(s)
    # likewise a load that fell behind its schedule on a loaded host (analysis/reconcile/pace.py): named, never silent
    pace = s["load_pace"]["words"] if s["load_pace"]["short"] else ""
    assert verdict(s) == ("analyzed: with ASYNC_MASTER, ASYNC_FLUSH, transientStorePoolEnable=false and the "
                          "no_retry send policy, a run without faults lost 0 acknowledged messages; none delivered twice"
                          + (f"; {busy}" if busy else "") + (f"; {pace}" if pace else "") + ".")
    assert s["load_pace"]["reached"] is not None and s["load_pace"]["lag_ms"]["p50"] is not None
    assert "None" not in text  # an absent value reads as a dash

    def inked(page: Path) -> int:  # sampled pixels that are not background white
        png = page.with_suffix(".png")
        subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,3200", f"--screenshot={png}",
                        page.as_uri()], capture_output=True, timeout=120, check=True)
        img = Image.open(png).convert("RGB")
        return sum(1 for y in range(0, img.height, 3) for x in range(0, img.width, 3)
                   if sum(img.getpixel((x, y))) < 700)

    bare = tmp_path / "no-plots.html"  # the same page with every plot removed
    bare.write_text(re.sub(r"<svg.*?</svg>", "", text, flags=re.S))
    with_plots, without = inked(html), inked(bare)
    assert with_plots > without + 5000, (with_plots, without)


def test_one_spark_session_per_process_until_another_master_is_asked_for(spark) -> None:
    """The analyses of a matrix in one process share the session; a different master gets its own
    (getOrCreate() alone would hand back the live local one). Last in this module: it stops `spark`."""
    assert spark_session() is spark
    other = spark_session("local[1]")
    assert other.sparkContext.master == "local[1]" and spark.sparkContext._jsc is None
    assert spark_session("local[1]") is other
