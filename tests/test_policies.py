"""Pure logic: the producer policies' decisions and the fault schedule (no broker involved)."""
from __future__ import annotations

import pytest

from chaos.scheduler import occurrences
from loadgen.policies import accepted, run_policy
from rmqchaos.spec import Fault, Policy
from rmqclient.producer import SendResult


pytestmark = pytest.mark.fast


def result(outcome: str, code: int | None = None, status: str | None = None, broker: str = "broker-a",
           sent: bool = True) -> SendResult:
    return SendResult(outcome=outcome, topic="T", key="k", start_ms=0, end_ms=1, code=code, status=status,
                      broker=broker, sent=sent)


class Script:
    """Answers attempts from a list and records what the policy asked for."""

    def __init__(self, *answers: SendResult) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str | None, float]] = []

    def __call__(self, topic: str, exclude: str | None, timeout: float) -> SendResult:
        self.asked.append((topic, exclude, timeout))
        return self.answers.pop(0)


def test_no_retry_and_ignore_send_status_make_one_attempt() -> None:
    for kind in ("no_retry", "ignore_send_status"):
        s = Script(result("timeout"))
        assert len(run_policy(Policy(kind=kind), "T", None, 3.0, s)) == 1 and len(s.asked) == 1
    weak = result("ok", 10, "FLUSH_DISK_TIMEOUT")
    assert accepted(Policy(kind="ignore_send_status"), weak) and not accepted(Policy(kind="no_retry"), weak)


def test_retry_on_listed_results_to_another_broker() -> None:
    s = Script(result("error", 2), result("timeout", broker="broker-b"), result("ok", 0, "SEND_OK"))
    out = run_policy(Policy(kind="retry", attempts=3, retry_on=["busy", "timeout"]), "T", None, 1.0, s)
    assert [r.outcome for r in out] == ["error", "timeout", "ok"]
    assert [a[1] for a in s.asked] == [None, "broker-a", "broker-b"]
    s = Script(result("error", 13))  # not listed: final
    assert len(run_policy(Policy(kind="retry", retry_on=["busy"]), "T", None, 1.0, s)) == 1


def test_java_default_follows_default_mq_producer() -> None:
    # stored with a weak status: returned as is (retryAnotherBrokerWhenNotStoreOK = false)
    s = Script(result("ok", 10, "FLUSH_DISK_TIMEOUT"))
    assert len(run_policy(Policy(kind="java_default"), "T", None, 3.0, s)) == 1
    # busy, then a transport failure: both retried, each on another broker, 3 attempts at most
    s = Script(result("error", 2), result("error", None, broker="broker-b"), result("error", 2))
    assert len(run_policy(Policy(kind="java_default"), "T", None, 3.0, s)) == 3
    assert [a[1] for a in s.asked] == [None, "broker-a", "broker-b"]
    # a timeout waited all that was left of the budget: never retried, even if our wait woke a
    # moment early (a sub-millisecond attempt to broker-b duplicated 15 keys of a run before this)
    t = iter([0.0, 0.0, 2.9999])
    s = Script(result("timeout"), result("ok", 0, "SEND_OK", broker="broker-b"))
    assert len(run_policy(Policy(kind="java_default", send_msg_timeout=3.0), "T", None, 9.0, s,
                          clock=lambda: next(t))) == 1
    # a code outside retryResponseCodes is thrown at once
    s = Script(result("error", 13))
    assert len(run_policy(Policy(kind="java_default"), "T", None, 3.0, s)) == 1
    # one sendMsgTimeout budget for all attempts: each gets what is left, none starts after it
    t = iter([0.0, 0.0, 2.5, 3.5])  # t0, then before each attempt
    s = Script(result("error", None), result("error", None), result("error", None))
    out = run_policy(Policy(kind="java_default", send_msg_timeout=3.0), "T", None, 9.0, s, clock=lambda: next(t))
    assert len(out) == 2 and [round(a[2], 2) for a in s.asked] == [3.0, 0.5]


def test_resend_to_backup_topic_only_on_the_listed_results() -> None:
    s = Script(result("timeout"), result("ok", 0, "SEND_OK"))
    out = run_policy(Policy(kind="resend_to_backup_topic", resend_on=["timeout"]), "T", "T_bak", 1.0, s)
    assert [a[0] for a in s.asked] == ["T", "T_bak"] and out[-1].ok
    s = Script(result("error", 2))
    assert len(run_policy(Policy(kind="resend_to_backup_topic", resend_on=["timeout"]), "T", "T_bak", 1.0, s)) == 1


def test_fault_schedule_expands_repeats_and_restarts() -> None:
    plan = occurrences([Fault(kind="pause", target="broker-b", at=5, duration=2, repeat={"every": 10, "times": 3}),
                        Fault(id="oom", kind="oom_kill", target="broker-a", at=12, restart_after=4)])
    assert [(o.at, o.fault_id, o.fault.kind, o.follows) for o in plan] == [
        (5, "pause-broker-b#1", "pause", None), (12, "oom", "oom_kill", None), (15, "pause-broker-b#2", "pause", None),
        (16, "oom-restart", "restart", "oom"), (25, "pause-broker-b#3", "pause", None)]
