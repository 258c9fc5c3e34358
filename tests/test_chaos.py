"""Faults on a real cluster under load, and the headline experiment (TSP on vs off)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chaos.registry import registry
from pipeline.stages import drain, load
from rmqchaos.machine.procs import alive
from tests.conftest import REPO, cli, load_run, write_scenario
from tests.helpers import rendered_verdicts
from tests.test_load import ledgers


def fault_events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "timeline.jsonl").read_text().splitlines()
            if json.loads(x)["kind"] == "fault"]


@pytest.mark.long  # make test: pause, jvm_oom and kill in tests/test_pipeline.py, the OOM kill pair here
def test_pause_then_oom_kill_act_on_their_target_only(fresh_cluster, tmp_path: Path) -> None:
    c = fresh_cluster
    namesrv_pid = c.node("namesrv").pid
    # the kernel's kill takes ~0.5-1.5 s under load (reclaim first): room for it in the load
    run = load_run(tmp_path, c, {"topic": "T_CHAOS", "users": 10, "rate": 300, "duration": "45s", "timeout": "1s"},
                   {"settle": "5s", "drain_timeout": "20s",  # broker-a stays dead: its lag is unknown
                    "instances": [{"id": "c0", "group": "g_chaos"}]}, name="chaos")
    d = yaml.safe_load((run.path / "scenario.yaml").read_text())
    d["faults"] = [{"id": "pause-b", "kind": "pause", "target": "broker-b", "at": "3s", "duration": "5s"},
                   {"id": "oom-a", "kind": "oom_kill", "target": "broker-a", "at": "10s", "timeout": "30s"}]
    (run.path / "scenario.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    b_pid = c.node("broker-b").pid
    load.run(run)
    drain.run(run)
    (d,) = [e for e in run.timeline() if e["kind"] == "drain"]
    assert (d["outcome"], d["params"]["out_of_reach"]) == ("out_of_reach", ["broker-a"])  # not its 20 s timeout
    assert d["end_ms"] - d["start_ms"] < 15000

    pause, oom = fault_events(run.path)
    assert (pause["params"]["fault_id"], pause["outcome"]) == ("pause-b", "ok")
    assert 4.9 <= pause["params"]["evidence"]["frozen_s"] <= 6.0
    assert (oom["params"]["fault_id"], oom["outcome"]) == ("oom-a", "ok")
    ev = oom["params"]["evidence"]
    before, after = ev["oom_kill_counter"]
    assert after == before + 1 and ev["limit"] > 0  # the kernel's OOM killer, in its cgroup, killed the broker
    assert f"Memory cgroup out of memory: Killed process {ev['pid']} (java)" in ev["dmesg"]
    assert not c.node("broker-a").running()
    assert c.node("broker-b").pid == b_pid and c.node("namesrv").pid == namesrv_pid  # nobody else
    assert alive(b_pid, None)

    _, outcomes, recv = ledgers(run.path)
    # the pause: broker-b's sends inside the window time out, and broker-b answers again afterwards
    in_pause = [r for r in outcomes if r["broker"] == "broker-b"
                and pause["start_ms"] + 200 <= r["start_ms"] <= pause["end_ms"] - 1500]
    assert in_pause and all(r["outcome"] == "timeout" for r in in_pause)
    assert any(r["broker"] == "broker-b" and r["outcome"] == "ok" and r["start_ms"] > pause["end_ms"] + 500
               for r in outcomes)
    # the load kept running on broker-b after broker-a died
    assert any(r["broker"] == "broker-b" and r["outcome"] == "ok" and r["start_ms"] > oom["end_ms"] + 1000
               for r in outcomes)
    assert any(r["broker"] == "broker-a" and r["outcome"] == "error" and r["start_ms"] > oom["end_ms"]
               for r in outcomes)


@pytest.mark.fast
def test_bad_fault_settings_fail_before_anything_starts(tmp_path: Path) -> None:
    cases = [({"kind": "oom_kill", "target": "broker-z", "at": "5s"}, "faults[0].target: no node 'broker-z'"),
             ({"kind": "pause", "target": "broker-a", "at": "28s"},
              "faults[0].at: the fault (at 28s, lasting 5s) ends after the load's duration 30s"),
             ({"kind": "jvm_oom", "target": "broker-a", "at": "5s"}, "jvm_oom needs -XX:+ExitOnOutOfMemoryError"),
             ({"kind": "explode", "target": "broker-a", "at": "5s"}, "faults[0].kind: unknown fault kind 'explode'; known: " + ", ".join(sorted(registry())))]
    for fault, expect in cases:
        f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"}, "faults": [fault]})
        r = cli("run", str(f), "--out", str(tmp_path / "never"))
        assert r.returncode == 1 and expect in r.stderr and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
        assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------- the headline pair

def _experiment(tmp: Path, scenario: str, ports: tuple[int, int, int], config: dict | None = None,
                backend: str = "local", duration: str = "28s") -> dict:
    """One scenario of the pair, shortened for CI, on ports of its own, with `config` over its broker
    config, on `backend`: broker-a is OOM-killed and restarted 6 s later; returns its summary."""
    from pipeline.stages import analyze, down, up
    from pipeline.runs import create_run, load_scenario
    d = load_scenario(REPO / "scenarios" / scenario).resolved()  # its `extends:` chain merged in
    d["cluster"]["namesrv"] = {"port": ports[0]}
    d["cluster"]["brokers"] = [{"name": "broker-a", "port": ports[1]}, {"name": "broker-b", "port": ports[2]}]
    d["cluster"]["stop_timeout"] = "3s"
    d["cluster"]["backend"] = backend
    d["cluster"]["broker_defaults"]["config"].update(config or {})
    # a kill takes ~1 s and a restart ~6 s until re-registered (up to ~16 s on a starved host): room for both
    d["load"].update(duration=duration, rate=800)
    d["consumers"] = {"settle": "10s"}
    d["faults"] = [{"id": "oom-broker-a", "kind": "oom_kill", "target": "broker-a", "at": "8s", "restart_after": "6s"}]
    tmp.mkdir(parents=True, exist_ok=True)
    f = write_scenario(tmp / scenario, d)
    run = create_run(f, tmp / "run", mode="owned")
    try:
        up.run(run)
        load.run(run)
        drain.run(run)
    finally:
        down.run(run)
    analyze.run(run)
    return json.loads((run.path / "analysis" / "summary.json").read_text())


def test_oom_kill_loses_acked_messages_with_tsp_on_and_none_with_tsp_off(kept_spark,
                                                                         tmp_path: Path) -> None:
    # What a kill loses with TSP is what was acked since the last commit. At the memory limit every
    # allocation of the broker reclaims first, so it stalls for ~0.1 s before the kernel kills it; a
    # commit that finishes inside that stall leaves nothing to lose. With the shipped 200 ms commit
    # interval single kills lost 16, 48, 39 and 5 here (and 0 once under the earlier step-by-step
    # squeeze, whose stall was longer). The test widens the interval to 1 s, so that "nothing lost"
    # would be a finding, not a coin toss. Only the first kill of a broker is a TSP sample: a
    # restarted broker loads its last commit-log file without a TSP buffer (MappedFileQueue.doLoad)
    # and writes it through the page cache until it rolls over (second kills here lost 0, 0).
    # A kill that the host stalls for ~2 s (seen once in a full suite: kill_after_s 1.88, lost 0) lets
    # the commit thread catch up even then; a second fresh cluster is then the second sample. The
    # claim is that TSP can lose acknowledged messages and that without it nothing is lost.
    on = _experiment(tmp_path / "on", "oom-tsp-on.yaml", (27876, 27911, 27921),
                     config={"commitCommitLogThoroughInterval": 1000})
    tsp_runs = [on]
    if on["counts"]["lost"] == 0:
        tsp_runs.append(_experiment(tmp_path / "on2", "oom-tsp-on.yaml", (27876, 27911, 27921),
                                    config={"commitCommitLogThoroughInterval": 1000}))
    off = _experiment(tmp_path / "off", "oom-tsp-off.yaml", (27876, 27911, 27921))
    for s in (*tsp_runs, off):
        [kill] = [e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_kind"] == "oom_kill"]
        assert kill["outcome"] == "ok"
        # the kernel's OOM killer ended the broker, and its restart brought it back (chaos/intent.py)
        [back] = [e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_kind"] == "restart"]
        for e in (kill, back):
            assert e["params"]["evidence"]["intent"]["short"] is False, e["params"]["evidence"]["intent"]
        c = s["counts"]
        assert c["acked"] > 0  # how many a 36 s load reaches is the host's speed, not the platform's doing
        # a killed broker loses the consumer offsets it had not persisted; if the consumer's route
        # refresh saw it gone, it re-pulls from them after the restart (at-least-once): the only
        # duplicates allowed, since no_retry never resends
        causes = s["duplicates_by_cause"]
        assert c["duplicate_deliveries"] == causes["consumer_repull"], causes
    # With TSP an OOM kill can also cut a commit mid-write: the restarted broker then serves a message
    # whose tail is zeros (seen: its KEYS property "9\x00\x00..." under the original msgId). Its
    # self-verifying body still names its key (properties_damaged: counted for that key) unless the
    # cut reached the body (body_damaged); only a copy whose body is damaged can be unexpected.
    for on in tsp_runs:
        assert on["complete"] is True and on["counts"]["undelivered_at_stop"] == 0
        kinds = on["corrupted_by_kind"]
        assert on["counts"]["unexpected_deliveries"] <= kinds["body_damaged"] and kinds["msgid_only"] == 0, kinds
        assert on["cluster"]["brokers"]["broker-a"]["transientStorePoolEnable"] == "true"
        # every lost key looked up in both brokers' commit logs: acked in the off-heap buffer, never
        # committed, so in no commit log (the store check, cluster/stored/messages.py)
        sc = on["store_check"]
        assert sc["method"] == "index" and sc["checked"] == on["counts"]["lost"] + on["counts"]["indeterminate"]
        assert (sc["lost_from_store"], sc["lost_in_delivery"]) == (on["counts"]["lost"], 0), sc
    # Without TSP a kill can still tear the one message being appended when it came (seen once in CI:
    # corrupted_deliveries 1): its copy into the mapped commit log faults in a new page at the memory
    # limit, the kernel kills the JVM there, and the page before keeps the message's head. Recovery
    # accepts it (the CRC covers only the body) and serves it. Appends are serialized and return only
    # once the copy is done, so that is at most one message per kill, and one never acknowledged.
    torn = {(e["broker"], e["queue_id"], e["queue_offset"]) for e in off["corrupted"]}
    assert len(torn) <= 1 and off["corrupted_by_kind"]["msgid_only"] == 0, off["corrupted"]
    assert off["counts"]["unexpected_deliveries"] <= off["corrupted_by_kind"]["body_damaged"], off["corrupted"]
    acked = {r["key"] for r in ledgers(Path(off["run_dir"]))[1] if r["outcome"] == "ok"}
    assert not [e for e in off["corrupted"] if e["key"] in acked], off["corrupted"]
    assert off["store_check"]["lost_from_store"] == off["store_check"]["lost_in_delivery"] == 0
    assert off["cluster"]["brokers"]["broker-a"]["transientStorePoolEnable"] == "false"
    assert off["complete"] is True
    # acked in the off-heap buffer, died with the JVM
    assert any(on["counts"]["lost"] > 0 for on in tsp_runs), [on["counts"] for on in tsp_runs]
    assert off["counts"]["lost"] == 0, off["counts"]  # the page cache outlives the process
    # the report says so at its top, in the browser: one sentence per run and one comparing them
    from analysis.report.report import comparisons, verdict
    from pipeline.stages.report import combined
    page = Path(combined([tsp_runs[-1]["run_dir"], off["run_dir"]], tmp_path / "report.html")["html"])
    said = rendered_verdicts(page, tmp_path / "profile")
    assert said == [verdict(tsp_runs[-1]), verdict(off), *comparisons([tsp_runs[-1], off])] and len(said) == 3
    lost = tsp_runs[-1]["counts"]["lost"]
    words = {1: "one acknowledged message", 2: "two acknowledged messages",  # the report spells out 1..3
             3: "three acknowledged messages"}.get(lost, f"{lost} acknowledged messages")
    assert ("one kernel OOM kill of broker-a lost " + words
            + (" (verified absent from every broker's store)" if lost else "")) in said[0]
    assert "one kernel OOM kill of broker-a lost 0 acknowledged messages" in said[1]
    assert said[2] == (f"Under one kernel OOM kill of broker-a: with transientStorePoolEnable=true (oom-tsp-on) the "
                       f"cluster {said[0].split(' broker-a ')[1].split(';')[0]}; with transientStorePoolEnable=false "
                       "(oom-tsp-off), 0.")
