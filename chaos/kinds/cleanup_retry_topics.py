"""cleanup_retry_topics: the remedy for the %RETRY% topic flood (incident 002). On every master,
delete the `%RETRY%<group>` topics of groups that have no consumer online (GET_CONSUMER_CONNECTION_LIST
answers none), from the broker and from namesrv. The broker's next periodic registration (every
`registerNameServerPeriod`, 30 s by default) is small again and namesrv takes it back into the
route. Groups with a live consumer keep theirs (a live consumer's heartbeat would recreate it). Its
intent: the stale topics found against those the masters no longer hold when asked again afterwards
(nothing stale: nothing to measure)."""
from __future__ import annotations

import time
from typing import Any

from chaos.intent import intent, measure
from chaos.protocol import FaultError, FaultKind, NoParams, register
from rmqclient.admin import RemotingError


def cleanup_intent(stale: int, still_held: int) -> dict[str, Any]:
    """`stale`: the %RETRY% topics without an online group found on the masters; `still_held`: of
    those, the ones a master still lists after the deletes."""
    if not stale:
        return intent([], "%RETRY% topic cleanup", none="no stale %RETRY% topic to delete")
    gone = stale - still_held
    return intent([measure("topics deleted", "masters", stale, gone, f"deleted {gone:,} of {stale:,} stale topics")],
                  "%RETRY% topic cleanup")


@register
class CleanupRetryTopics(FaultKind):
    name = "cleanup_retry_topics"
    Params = NoParams
    target = "none"

    def start(self) -> None:
        admin = self.ctx.cluster.admin(timeout=30)
        t0, per_broker = time.monotonic(), {}
        stale_all: set[tuple[str, str]] = set()  # (master, topic)
        try:
            for p in self.ctx.cluster.masters():
                retry = sorted(t for t in admin.topic_configs(p.addr) if t.startswith("%RETRY%"))
                online = admin.online_groups(p.addr, [t[len("%RETRY%"):] for t in retry])
                stale = [t for t in retry if t[len("%RETRY%"):] not in online]
                stale_all.update((p.name, t) for t in stale)
                for t in stale:
                    admin.delete_topic_in_broker(p.addr, t)
                per_broker[p.name] = {"retry_topics": len(retry), "deleted": len(stale), "kept_online": len(online)}
            held_by = {(p.name, t) for p in self.ctx.cluster.masters() for t in admin.topic_configs(p.addr)}
            held = {t for _, t in held_by}
            gone = [t for t in admin.topic_list() if t.startswith("%RETRY%") and t not in held]
            for t in gone:
                admin.delete_topic_in_namesrv(t)
        except RemotingError as e:
            raise FaultError(f"cleanup_retry_topics: {e}", "is the cluster up?") from None
        self.evidence = {"intent": cleanup_intent(len(stale_all), len(stale_all & held_by)), "brokers": per_broker,
                         "deleted_in_namesrv": len(gone), "seconds": round(time.monotonic() - t0, 1)}
