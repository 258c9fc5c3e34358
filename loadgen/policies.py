"""Producer policies: what an application does after each attempt. Pure logic, no I/O: a policy
gets an `attempt(topic, exclude_broker, timeout)` function and calls it as the application would.

- no_retry: one attempt; failures are final.
- retry: up to `attempts`, on the results listed in `retry_on`, optionally on another broker.
- java_default: DefaultMQProducer 5.5.0 sync send (docs/protocol.md): 3 attempts in all inside one
  sendMsgTimeout budget, each getting what is left of it; retried at once on a transport failure and
  on codes JAVA_RETRY_CODES, never after a timeout (it spent what was left); any stored answer
  (whatever its status) ends it (retryAnotherBrokerWhenNotStoreOK=false); each retry prefers another
  broker than the last.
- resend_to_backup_topic: on a result in `resend_on` (default busy, timeout), send the same business
  message once to the backup topic (incident 000's workaround).
- ignore_send_status: one attempt; the application takes any stored answer as success, even
  FLUSH_DISK_TIMEOUT (incident 003). The ledger still records the true status.

`accepted(result)`: whether the application counts that attempt as a success (reported to Locust
and written to the ledger as `app_ok`): stored with SEND_OK, or stored at all for ignore_send_status.
"""
from __future__ import annotations

import time
from typing import Callable

from rmqchaos.spec import Policy
from rmqclient.producer import SendResult

# DefaultMQProducer.retryResponseCodes (5.5.0): TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR,
# SYSTEM_BUSY, NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT, GO_AWAY.
JAVA_RETRY_CODES = frozenset({17, 14, 1, 2, 16, 204, 205, 1500})
JAVA_ATTEMPTS = 3  # 1 + retryTimesWhenSendFailed (2)

Attempt = Callable[[str, "str | None", float], SendResult]


def matches(r: SendResult, on: list[str]) -> bool:
    for cond in on:
        if cond == "timeout" and r.outcome == "timeout":
            return True
        if cond == "transport" and r.outcome == "error" and r.code is None:
            return True
        if cond == "busy" and r.code == 2:
            return True
        if cond == "weak" and r.outcome == "ok" and r.status != "SEND_OK":
            return True
        if cond.startswith("code:") and r.outcome == "error" and r.code == int(cond[5:]):
            return True
    return False


def accepted(policy: Policy, r: SendResult) -> bool:
    if policy.kind == "ignore_send_status":
        return r.outcome == "ok"
    return r.outcome == "ok" and r.status == "SEND_OK"


def run_policy(policy: Policy, topic: str, backup_topic: str | None, timeout: float, attempt: Attempt,
               clock: Callable[[], float] = time.monotonic) -> list[SendResult]:
    """Run one business message through the policy; returns every attempt's result in order."""
    k = policy.kind
    if k in ("no_retry", "ignore_send_status"):
        return [attempt(topic, None, timeout)]
    if k == "retry":
        out = [attempt(topic, None, timeout)]
        while len(out) < policy.attempts and matches(out[-1], policy.retry_on):
            out.append(attempt(topic, out[-1].broker if policy.another_broker else None, timeout))
        return out
    if k == "resend_to_backup_topic":
        assert backup_topic is not None
        out = [attempt(topic, None, timeout)]
        if matches(out[-1], policy.resend_on):
            out.append(attempt(backup_topic, None, timeout))
        return out
    if k == "java_default":
        budget, t0 = policy.send_msg_timeout, clock()
        out: list[SendResult] = []
        last_broker: str | None = None
        for _ in range(JAVA_ATTEMPTS):
            left = budget - (clock() - t0)
            if left <= 0:  # DefaultMQProducerImpl: `if (timeout < costTime) break`
                break
            r = attempt(topic, last_broker, left)
            out.append(r)
            last_broker = r.broker or last_broker
            if r.outcome == "ok":
                break  # any stored status is returned as is
            if r.outcome == "timeout":
                # It waited all that was left: in Java the next loop's `timeout < costTime` (or, at an
                # equal millisecond, invokeSync's `timeoutMillis <= costTime`) ends it unsent. Our wait
                # may wake a millisecond early; a sub-millisecond attempt would send and duplicate.
                break
            if r.code is None or r.code in JAVA_RETRY_CODES:
                continue  # RemotingException / MQClientException / retryable MQBrokerException
            break  # other broker codes are thrown to the application
        return out
    raise ValueError(f"unknown policy {k!r}")
