"""A signature's premise: what its fault did, as a figure that reads 0 (or None) on a run without it.
The figures that say it (rmqchaos/spec/expect.py DERIVED: attempts_failed, busy_stored,
end_to_end_max_ms, retry_topics_max, consumer_clock_timed_out, txn_checked_after_fault,
gone_ok_sync_flush, gone_in_disk_fault; read_again_after_rollback and link_p50_added_ms reading 0
without a power loss or a link fault) on planted summaries: present, absent, at their edges. Then every
scenario given a premise here, judged on a planted fault-free summary of its kind as
tests/test_no_fault_twins.py judges it on a recorded one: one of its own conditions must be False.
Pure logic: no cluster, no Spark."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from analysis.judge.figures import broker_faults, evidence, value
from analysis.judge.signature import own_evidence
from analysis.durability.store_check import by_group
from conftest import REPO
from pipeline.runs import load_scenario
from rmqchaos.spec.expect import DERIVED, DUPLICATE_CAUSES, LOG_MARKS, POP_CAUSES, POP_CLASSES, TXN_CLASSES, parse_condition
from test_no_fault_twins import kind

pytestmark = pytest.mark.fast

SCENARIOS = REPO / "scenarios"
T0 = 1_800_000_000_000  # the planted runs' first ms
NEW = ("attempts_failed", "busy_stored", "end_to_end_max_ms", "retry_topics_max", "consumer_clock_timed_out",
       "txn_checked_after_fault", "gone_ok_sync_flush", "gone_in_disk_fault")


def fault(kind_: str, target: str | None, start_s: float, end_s: float | None = None, fid: str | None = None,
          outcome: str = "ok", **evidence_: Any) -> dict[str, Any]:
    return {"kind": "fault", "outcome": outcome, "target": target, "start_ms": T0 + int(start_s * 1000),
            "end_ms": T0 + int((start_s if end_s is None else end_s) * 1000),
            "params": {"fault_id": fid or f"{kind_}-{target}", "fault_kind": kind_, "evidence": evidence_}}


def brokers(kind_: str = "normal", flush: tuple[str, str] = ("ASYNC_FLUSH", "ASYNC_FLUSH")) -> dict[str, dict[str, str]]:
    if kind_ == "replicated":
        return {f"broker-a-{i}": {"brokerName": "broker-a", "flushDiskType": "ASYNC_FLUSH"} for i in range(3)}
    return {g: {"brokerName": g, "brokerRole": "ASYNC_MASTER", "flushDiskType": f} for g, f in zip(("broker-a", "broker-b"), flush)}


def fault_free(kind_: str = "normal") -> dict[str, Any]:
    """A summary of a run of this kind where nothing happened (the shape of analysis/job.py's): every send
    acknowledged SEND_OK and delivered once, no fault event, the monitor's samples, the store check with
    nothing gone, a few check-backs after their end as a quick check-back makes them (op records come
    in 3 s batches), timers up to 1.2 s late."""
    n = 20_000
    b = brokers(kind_)
    s: dict[str, Any] = {
        "scenario": f"no-fault-{kind_}", "complete": True, "incomplete_reasons": [],
        "counts": {"keys": n, "attempts": n, "acked": n, "acked_weak": 0, "acked_weak_lost": 0, "ok": n, "lost": 0,
                   "undelivered_at_stop": 0, "not_committed": 0, "duplicated": 0, "duplicate_deliveries": 0,
                   "recovered": 0, "failed": 0, "indeterminate": 0, "unexpected": 0, "unexpected_deliveries": 0,
                   "no_outcome": 0, "corrupted_deliveries": 0},
        "duplicates_by_cause": dict.fromkeys(DUPLICATE_CAUSES, 0),
        "retried_keys_by_batch_position": {"first_in_batch": 0, "later_in_batch": 0, "never_first": 0},
        "errors": {"by_outcome": {"ok": n}, "by_status": {"SEND_OK": n}, "by_code": {}, "by_remark_prefix": {},
                   "by_broker": {}},
        "answers": [{"answer": "SEND_OK", "attempts": n, "stored": n, "dup_keys_first_answer": 0,
                     "dup_keys_first_stored": 0}],
        "latency_ms": {k: {"n": n, "p50": 4, "p95": 20, "p99": 60, "max": 900}
                       for k in ("send", "send_from_intended", "end_to_end")},
        "cluster": {"brokers": b}, "events": [], "windows": [], "offset_rollback": None,
        "monitor": [{"ts_ms": T0 + i * 1000, "frame_errors": {"count": 0},
                     "brokers": {x: {"up": True, "registered": True, "topics": {"normal": 1, "retry": 1, "dlq": 0, "system": 12}}
                                 for x in b}} for i in range(20)],
        "store_check": {"checked": 0, "lost_from_store": 0, "lost_in_delivery": 0, "indeterminate_stored": 0,
                        "indeterminate_not_stored": 0, "lost_in_wheel": 0, "lost_truncated": 0, "erased_after_delivery": 0,
                        "gone_by_broker": {}, "gone_by_status": {}, "gone_acked_ms_by_broker": {}, "lost_by_broker": {},
                        "gone_ok_by_broker": {}, "gone_ack_slot_ms": 100, "gone_ack_slots_by_broker": {}},
        "reused_queue_offsets": {"positions": 0},
        "log_marks": {m: {} for m in LOG_MARKS}, "dledger_elections": {}, "dledger_terms_forgotten": {},
        "failover": None, "order": None, "transactions": None, "timers": None, "pop": None}
    if kind_ == "replicated":
        s["failover"] = {"groups": {}, "failovers": [], "two_master_windows": [], "lost": None, "stale_reads": 0,
                         "duplicates_after_switch": None}
    if kind_ == "ordered":
        s["order"] = {"keys": 160, "messages": n, "keys_in_order": 160, "keys_moved": 0, "keys_by_anomaly": {},
                      "messages_by_anomaly": {}, "causes": {"moved": 0, "stayed": 0, "by_home_broker": {}}}
    if kind_ == "transactional":
        sec = (T0 // 1000) + 12
        s["transactions"] = {"keys": 6_000, "classes": {**dict.fromkeys(TXN_CLASSES, 0), "committed_delivered": 4_200,
                                                         "rolled_back": 1_200, "unknown_in_time": 600},
                             "extra_deliveries": 600, "checks": 1_200, "abandoned": 0, "checked_after_end": 600,
                             "checked_after_end_by_second": {"broker-a": [[sec, sec + 3, 300]], "broker-b": [[sec, sec + 4, 300]]},
                             "bound_ms": 13_000}
        s["duplicates_by_cause"]["transaction_recommit"] = 600  # a quick check-back's re-commits
        s["counts"].update(duplicated=600, duplicate_deliveries=600)
    if kind_ == "timer":
        s["timers"] = {"keys": n, "delivered": n, "early": {"keys": 0}, "lost": 0, "undelivered_at_stop": 0,
                       "late_over": {"ms": 5000, "keys": 0}, "late_ms": {"n": n, "p50": 600, "p99": 1_100, "max": 1_200},
                       "by_fault": [], "no_fault": {"exposed": n, "early": 0, "late": 0, "lost": 0}}
    if kind_ == "pop":
        s["pop"] = {"deliveries": n, "keys": n, "acks_ok": n, "acks_refused": 0, "classes": dict.fromkeys(POP_CLASSES, 0),
                    "causes": {c: dict.fromkeys(POP_CAUSES[c], 0) for c in POP_CLASSES}, "by_fault": {}}
    return s


# ---------------------------------------------------------------- each figure, present, absent, at its edges

def test_the_new_figures_are_declared_and_validate() -> None:
    for name in NEW:
        assert name in DERIVED and parse_condition(f"{name} > 0") == (name, ">", 0)
    # on a run where nothing happened, each counts nothing (the two maxima read what a quiet run has)
    s = fault_free("transactional")
    assert {n: value(s, n) for n in NEW} == {**dict.fromkeys(NEW, 0), "end_to_end_max_ms": 900, "retry_topics_max": 1}


def test_attempts_failed_are_errors_other_than_busy_and_timeouts() -> None:
    s = fault_free()
    s["errors"]["by_outcome"].update(error=50, timeout=7)
    s["answers"].append({"answer": "[TIMEOUT_CLEAN_QUEUE]", "attempts": 20, "stored": 0})
    assert value(s, "errors_not_busy") == 30 and value(s, "attempts_failed") == 37
    s["errors"]["by_outcome"] = {"ok": 100, "error": 20}  # every error a busy refusal, no timeout
    assert value(s, "attempts_failed") == 0
    assert value(fault_free(), "attempts_failed") == 0


def test_busy_stored_counts_busy_refused_attempts_delivered_all_the_same() -> None:
    s = fault_free()
    s["answers"] += [{"answer": "[REJECTREQUEST]", "attempts": 40, "stored": 2},
                     {"answer": "[PCBUSY_CLEAN_QUEUE]", "attempts": 9, "stored": 0},
                     {"answer": "code 2", "attempts": 3, "stored": 1},  # a busy answer without its text
                     {"answer": "timeout", "attempts": 50, "stored": 30}]  # stored, but not refused busy
    assert value(s, "busy_stored") == 3
    assert value(fault_free(), "busy_stored") == 0
    del s["answers"]  # an older summary: not known
    assert value(s, "busy_stored") is None


def test_end_to_end_max_and_retry_topics_max() -> None:
    s = fault_free()
    assert value(s, "end_to_end_max_ms") == 900
    s["latency_ms"]["end_to_end"]["max"] = 54_512.0
    assert value(s, "end_to_end_max_ms") == 54_512
    s["latency_ms"]["end_to_end"] = {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}  # nothing delivered
    assert value(s, "end_to_end_max_ms") is None and value({}, "end_to_end_max_ms") is None
    s = fault_free()
    assert value(s, "retry_topics_max") == 1
    s["monitor"][5]["brokers"]["broker-a"]["topics"]["retry"] = 302
    s["monitor"][6]["brokers"]["broker-a"] = {"up": False}  # a broker that did not answer: no topics
    s["monitor"].append({"ts_ms": T0, "error": "the sample failed"})  # a sample that failed as a whole
    assert value(s, "retry_topics_max") == 302
    assert value({**s, "monitor": []}, "retry_topics_max") is None


def test_consumer_clock_timed_out_reads_the_step_faults_evidence() -> None:
    s = fault_free("timer")
    assert value(s, "consumer_clock_timed_out") == 0  # no step: nothing given up
    s["events"] = [fault("consumer_clock", None, 20, 20, "consumer-ahead", client_requests_timed_out=5, persists=True)]
    assert value(s, "consumer_clock_timed_out") == 5
    s["events"].append(fault("consumer_clock", None, 40, 40, "again", client_requests_timed_out=None))
    assert value(s, "consumer_clock_timed_out") is None  # one could not read its client's log
    s["events"][1]["outcome"] = "failed"  # not applied: not counted
    assert value(s, "consumer_clock_timed_out") == 5
    assert value({"counts": {}}, "consumer_clock_timed_out") is None  # no timeline at all


def test_broker_faults_name_the_group_of_the_node_hit_and_leave_out_restarts_and_other_targets() -> None:
    s = fault_free("replicated")
    s["events"] = [fault("kill", "broker-a-1", 20, 20, "kill-master"), fault("restart", "broker-a-1", 50, 55, "kill-master#r"),
                   fault("producer_crash", "producers", 10), fault("link", None, 5, 30),
                   fault("kill", "broker-a-2", 60, outcome="failed")]
    assert broker_faults(s) == [("broker-a", T0 + 20_000, T0 + 20_000)]
    assert broker_faults(s, ("disk_error",)) == []


SEC = T0 // 1000


def txn(faults: list[dict[str, Any]], rows: dict[str, list[list[int]]]) -> dict[str, Any]:
    s = fault_free("transactional")
    s["events"] = faults
    s["transactions"]["checked_after_end_by_second"] = rows
    return s


def test_txn_checked_after_fault_counts_halves_stored_before_a_fault_on_their_group_and_asked_again_after_it() -> None:
    rows = {"broker-a": [[SEC + 17, SEC + 19, 40],  # stored and asked before the kill at 20 s: a quick check-back
                         [SEC + 18, SEC + 36, 300],  # stored before it, asked after the restart: counted
                         [SEC + 19, SEC + 20, 5],  # asked in the kill's own second, at 20.0 s: counted
                         [SEC + 20, SEC + 37, 7],  # stored in the kill's second: which side is not known, not counted
                         [SEC + 40, SEC + 44, 50]],  # stored after it
            "broker-b": [[SEC + 18, SEC + 36, 60]]}  # another group's: the kill did not touch it
    kill = [fault("kill", "broker-a", 20, 20, "kill-a"), fault("restart", "broker-a", 35, 36, "kill-a#r")]
    assert value(txn(kill, rows), "txn_checked_after_fault") == 305
    assert value(txn([], rows), "txn_checked_after_fault") == 0  # no fault: the quick check-backs are not counted
    assert value(txn([fault("kill", "broker-a", 20.5, 20.5)], rows), "txn_checked_after_fault") == 300
    assert value(txn([fault("producer_crash", "producers", 20)], rows), "txn_checked_after_fault") == 0
    # a failover: the node hit is a replica of broker-a, the halves are the group's
    fo = txn([fault("kill", "broker-a-0", 20, 20, "kill-master")], {"broker-a": [[SEC + 18, SEC + 23, 455]]})
    fo["cluster"]["brokers"] = brokers("replicated")
    assert value(fo, "txn_checked_after_fault") == 455
    old = txn(kill, rows)
    del old["transactions"]["checked_after_end_by_second"]  # an older summary: not known
    assert value(old, "txn_checked_after_fault") is None and value(fault_free(), "txn_checked_after_fault") is None


def gone(slots: dict[str, dict[str, int]], ok: dict[str, int], flush: tuple[str, str] = ("SYNC_FLUSH", "ASYNC_FLUSH"),
         faults: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    s = fault_free()
    s["cluster"]["brokers"] = brokers(flush=flush)
    s["store_check"].update(gone_ack_slots_by_broker=slots, gone_ok_by_broker=ok)
    s["events"] = faults or []
    return s


def test_gone_ok_sync_flush_counts_a_sync_flush_groups_send_ok_keys_in_no_store() -> None:
    assert value(gone({}, {"broker-a": 3, "broker-b": 80}), "gone_ok_sync_flush") == 3
    assert value(gone({}, {"broker-b": 80}), "gone_ok_sync_flush") == 0  # the ASYNC_FLUSH group's are not its
    assert value(gone({}, {"broker-a": 3}, ("ASYNC_FLUSH", "ASYNC_FLUSH")), "gone_ok_sync_flush") == 0
    s = gone({}, {})
    del s["store_check"]["gone_ok_by_broker"]
    assert value(s, "gone_ok_sync_flush") is None and value({**s, "store_check": None}, "gone_ok_sync_flush") is None


def test_gone_in_disk_fault_counts_the_slots_wholly_inside_a_disk_fault_of_the_group() -> None:
    ms = lambda t: str(T0 + int(t * 1000))  # noqa: E731 - a slot's key
    eio = [fault("disk_error", "broker-a", 8, 20, "eio-a"), fault("disk_error", "broker-b", 8, 20, "eio-b"),
           fault("power_loss", "broker-a", 16, 22, "power-ab")]
    slots = {"broker-b": {ms(7.8): 4, ms(7.95): 2, ms(8.0): 5, ms(15.9): 70, ms(19.9): 1, ms(20.0): 3},
             "broker-a": {ms(12.3): 2}}
    # broker-b's slots of 8.0, 15.9 and 19.9 s lie wholly inside 8-20 s; those of 7.8, 7.95 and 20.0 s do not
    assert value(gone(slots, {}, faults=eio), "gone_in_disk_fault") == 5 + 70 + 1 + 2
    assert value(gone(slots, {}, faults=eio[1:]), "gone_in_disk_fault") == 5 + 70 + 1  # broker-a's window gone
    assert value(gone(slots, {}, faults=[fault("disk_slow", "broker-b", 15, 16)]), "gone_in_disk_fault") == 70
    assert value(gone(slots, {}, faults=eio[2:]), "gone_in_disk_fault") == 0  # a power loss alone is no disk fault
    assert value(gone(slots, {}), "gone_in_disk_fault") == 0
    s = gone(slots, {})
    del s["store_check"]["gone_ack_slots_by_broker"]
    assert value(s, "gone_in_disk_fault") is None


def test_a_keys_acknowledgements_by_group() -> None:
    acks = [("broker-a", "FLUSH_DISK_TIMEOUT", 1_000), ("broker-a", "SEND_OK", 900), ("broker-b", "SEND_OK", None),
            (None, "SEND_OK", 5), ("broker-b", "FLUSH_SLAVE_TIMEOUT", 2_000)]
    assert by_group(acks) == ({"broker-a", "broker-b"}, {"broker-a": 1_000, "broker-b": 2_000})
    assert by_group([]) == (set(), {})


def test_rollback_and_link_figures_read_zero_without_their_fault_and_unknown_with_it_unrecorded() -> None:
    s = fault_free()
    assert value(s, "read_again_after_rollback") == 0 and value(s, "link_p50_added_ms.broker-a") == 0
    s["events"] = [fault("power_loss", "broker-a", 15, 60, "power-a"), fault("link", None, 10, 70, "slow-a")]
    assert value(s, "read_again_after_rollback") is None and value(s, "link_p50_added_ms.broker-a") is None
    s["offset_rollback"] = {"deliveries": 195, "keys": 195, "by_fault": {"power-a": 195}}
    assert value(s, "read_again_after_rollback") == 195
    assert value({}, "read_again_after_rollback") is None and value({}, "link_p50_added_ms.broker-a") is None


# ---------------------------------------------------------------- the scenarios, on a run where nothing happened

# each scenario this change gave a premise (or whose premise figure now reads 0 without its fault)
PREMISED = ("shared-host.yaml", "shared-host-page-cache-only.yaml", "shared-host-wait-queue.yaml",
            "shared-host-pagecache-timeout.yaml", "shared-host-one-thread.yaml", "shared-host-many-threads.yaml",
            "shared-host-java-default.yaml", "shared-host-resend.yaml", "shared-host-tsp.yaml", "oom-tsp-off.yaml",
            "retry-flood-split.yaml", "partition-consumers.yaml", "failover-kill-master.yaml",
            "failover-kill-master-no-allack.yaml", "failover-oom-tsp-master.yaml", "failover-pause-master.yaml",
            "failover-partition-master.yaml", "failover-controller-and-master.yaml", "failover-dledger-kill-leader.yaml",
            "power-loss-controller-master.yaml", "power-loss-controller-quorum.yaml", "order-failover.yaml",
            "txn-broker-kill.yaml", "txn-failover.yaml", "txn-slow-check.yaml", "grpc-broker-kill.yaml",
            "grpc-broker-kill-remoting.yaml", "grpc-partition-proxy-broker.yaml", "grpc-local-broker-kill.yaml",
            "timer-failover.yaml", "clock-consumer-ahead.yaml", "disk-error-flush.yaml", "power-loss-offsets.yaml",
            "link-slow-broker.yaml", "grpc-link-slow-proxy.yaml")
# no fault of their own: the run to compare with, whose signature a fault-free run holds
NO_FAULT_CONTROLS = ("shared-host-quiet.yaml", "link-none-retry.yaml")


@pytest.mark.parametrize("name", PREMISED)
def test_a_premised_signature_fails_on_a_fault_free_run_of_its_kind(name: str) -> None:
    s = load_scenario(SCENARIOS / name)
    assert s.signature is not None
    ev = own_evidence(s.signature, fault_free(kind(s)))
    assert False in [e["holds"] for e in ev], "; ".join(f"{e['what']} -> {e['holds']} ({e['seen']})" for e in ev)


@pytest.mark.parametrize("name", NO_FAULT_CONTROLS)
def test_a_control_without_a_fault_holds_on_a_fault_free_run(name: str) -> None:
    s = load_scenario(SCENARIOS / name)
    assert s.signature is not None and not s.faults
    ev = own_evidence(s.signature, fault_free(kind(s)))
    assert all(e["holds"] is True for e in ev), ev


def faulted(name: str) -> dict[str, Any]:
    """A planted run of the scenario with its fault and what each premise rests on in docs/findings.md."""
    s = fault_free(kind(load_scenario(SCENARIOS / name)))
    if name == "txn-broker-kill.yaml":
        s["events"] = [fault("kill", "broker-a", 20, 20, "kill-a"), fault("restart", "broker-a", 35, 36, "kill-a#r")]
        s["transactions"]["checked_after_end_by_second"]["broker-a"].append([SEC + 19, SEC + 37, 503])
    elif name == "disk-error-flush.yaml":
        s["cluster"]["brokers"] = brokers(flush=("SYNC_FLUSH", "ASYNC_FLUSH"))
        s["events"] = [fault("disk_error", "broker-a", 8, 20, "eio-a"), fault("disk_error", "broker-b", 8, 20, "eio-b"),
                       fault("power_loss", "broker-a", 16, 22, "power-ab")]
        s["store_check"].update(gone_by_broker={"broker-a": 2, "broker-b": 80}, gone_ok_by_broker={"broker-b": 80},
                                gone_ack_slots_by_broker={"broker-a": {str(T0 + 12_300): 2},
                                                          "broker-b": {str(T0 + 15_800): 60, str(T0 + 7_500): 20}})
    elif name == "clock-consumer-ahead.yaml":
        s["events"] = [fault("consumer_clock", None, 20, 20, "consumer-ahead", client_requests_timed_out=5, persists=True)]
    return s


@pytest.mark.parametrize("name", ["txn-broker-kill.yaml", "disk-error-flush.yaml", "clock-consumer-ahead.yaml"])
def test_with_its_fault_as_findings_records_it_the_new_premise_holds(name: str) -> None:
    s = load_scenario(SCENARIOS / name)
    assert s.signature is not None
    new = [c for c in s.signature.conditions if parse_condition(c)[0] in NEW]
    assert new and all(e["holds"] is True for e in evidence(new, faulted(name))), evidence(new, faulted(name))


def test_the_planted_fault_free_run_is_not_changed_by_judging_it() -> None:
    s = fault_free("transactional")
    before = copy.deepcopy(s)
    for name in NEW:
        value(s, name)
    assert s == before
