"""What `rmqchaos explore` keeps a run for: the anomalies its summary shows, each a condition on the
run's named figures (analysis/judge/figures.py), so a found anomaly becomes a scenario's `expect:` as is.

Duplicates count only when nothing the platform knows explains them (`duplicates.unexplained`): a
resend after a timeout, a %RETRY% redelivery or a re-pull after a rebalance is at-least-once
delivery doing its job. Loss counts only on a run whose receive side finished (counts.lost is 0
otherwise: those keys are `undelivered_at_stop`), and a run that did not finish is kept apart as
`incomplete`, never as an anomaly. The checks of ordered, transactional, timer and POP loads hold
only on a run with such a load: on any other their figures have no evidence."""
from __future__ import annotations

from typing import Any

from analysis.judge.figures import evidence

#: anomaly -> the condition that flags it
CHECKS: dict[str, str] = {
    "lost": "lost > 0",
    "erased_after_delivery": "store_check.erased_after_delivery > 0",
    "unexplained_duplicates": "duplicates.unexplained > 0",
    "two_masters": "two_master_seconds > 0",
    "stale_reads": "failover.stale_reads > 0",
    "reused_queue_offsets": "reused_queue_offsets > 0",
    "corrupted_deliveries": "corrupted_deliveries > 0",
    "unexpected_deliveries": "unexpected > 0",
    "not_started_after_power_loss": "not_started_after_power_loss > 0",
    "dledger_terms_reused": "dledger_terms_reused > 0",  # a term elected twice: votes forgotten
    "dledger_terms_forgotten": "dledger_terms_forgotten > 0",  # a replica back in a term it had voted in
    # the checkers of later issues, on a run whose load has them (no evidence otherwise: never flagged).
    # Order: an inversion or a gap; a repeat out of order is a replay after a crash (at least once).
    "order_reordered": "order_reordered > 0",
    "order_gaps": "order_gaps > 0",
    "rolled_back_delivered": "transactions.rolled_back_delivered > 0",
    "committed_lost": "transactions.committed_lost > 0",
    "timers_early": "timers_early > 0",
    "pop_consumed_but_lost": "pop.consumed_but_lost > 0",
    "pop_redelivered_after_change": "pop.redelivered_after_ack.after_change > 0",
}


def anomalies(s: dict[str, Any]) -> list[dict[str, Any]]:
    """[{check, condition, seen}] for each check that holds on the summary `s`, in CHECKS' order; none
    for a run that did not finish (what it missed may be what it never got to)."""
    if s.get("complete") is False:
        return []
    names = list(CHECKS)
    return [{"check": n, "condition": e["what"], "seen": e["seen"]}
            for n, e in zip(names, evidence([CHECKS[n] for n in names], s)) if e["holds"] is True]


def shows(s: dict[str, Any], check: str) -> bool:
    """Whether the summary shows the anomaly `check` (a name of CHECKS)."""
    return any(a["check"] == check for a in anomalies(s))
