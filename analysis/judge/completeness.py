"""Whether a run's ledgers can support a verdict of loss: the rule that never turns "the consumer
stopped" into "RocketMQ lost it".

A key is `lost` only if it was acknowledged and never delivered *and the receive side is complete*:
the consumers drained until every group's lag was 0 (the brokers held nothing they had not
delivered) and each consumer stopped cleanly (its receive ledger flushed and fsync'd on SIGTERM).
When either is not known to hold (the run was interrupted or killed, the drain timed out, a consumer
died other than by a consumer_kill fault), an acknowledged key that was not delivered is `undelivered_at_stop`: not verified, never
counted as lost. The send side needs no such rule: an attempt without a recorded outcome is already
`indeterminate`, never acknowledged.

The facts come from the run directory alone: state.json (stage statuses, with the process that ran
each), timeline.jsonl (the drain's result and how each consumer stopped), the load
process's load/summary.json (written only when it finished) and the consumers' serving status
(consumers/serving-*.json: whether each broker group served every consumer group again after a restart).
"""
from __future__ import annotations

from typing import Any

from analysis.durability.powercuts import not_started
from analysis.judge.serving import restart_reasons
from rmqchaos.run.rundir import RunDir


def completeness(run: RunDir) -> dict[str, Any]:
    """{"complete": bool, "receive_complete": bool, "reasons": [str]}."""
    reasons: list[str] = []
    receive: list[str] = []
    stages = run.stages()
    load = stages.get("load")
    if load is None:
        reasons.append("the load stage never ran")
    elif load["status"] != "ok":
        reasons.append(f"the load stage did not finish ({load['status']}"
                       + (f": {load['error']}" if load.get("error") else "") + ")")
    if not (run.load_dir / "summary.json").exists():
        reasons.append("the load process did not finish (no load/summary.json): outcomes of its last attempts "
                       "may be missing (those keys are indeterminate)")
    drains = [e for e in run.timeline() if e["kind"] == "drain"]
    if not drains:
        receive.append("the consumers were never drained")
    elif drains[-1]["params"].get("out_of_reach"):
        down = not_started(run.timeline())
        receive.append(f"the drain stopped early: broker group(s) {', '.join(drains[-1]['params']['out_of_reach'])} "
                       "had no running node, so their stored messages were out of reach"
                       + (f" ({'; '.join(f'{n} did not start again after its power loss: {w}' for n, w in down.items())})"
                          if down else ""))
    elif drains[-1]["params"].get("drained") is not True:
        left = "not recorded" if "drained" not in drains[-1]["params"] else "above 0"
        receive.append(f"the drain did not reach lag 0 for every consumer group (lag {left} when it stopped)")
    s = run.scenario()
    stops = {e["target"]: e["outcome"] for e in run.timeline() if e["kind"] == "consumer_stop"}
    # an instance a consumer_kill fault ended and did not start again: its ledger holds every delivery
    # it acknowledged (written before the ack, chaos/kinds/consumer_kill.py); the drain's lag 0 the rest
    killed = {e["params"].get("consumer") for e in run.timeline() if e["kind"] == "fault"
              and e["params"].get("fault_kind") == "consumer_kill" and e["outcome"] == "ok"
              and e["params"].get("back_after") is None}
    for inst in (s.consumers.instances if s.consumers and s.load else []):
        how = stops.get(f"consumer-{inst.id}")
        if how != "terminated" and not (how is None and inst.id in killed):
            receive.append(f"consumer {inst.id} did not stop cleanly ({how or 'no stop recorded: killed with the platform'}): "
                           "its last deliveries may not be in its ledger")
    reasons += receive
    # a restarted broker group that did not serve a consumer group again in time (analysis/judge/serving.py);
    # a gate that refused is the load stage's own error, above
    reasons += restart_reasons(run)
    return {"complete": not reasons, "receive_complete": not receive, "reasons": reasons}
