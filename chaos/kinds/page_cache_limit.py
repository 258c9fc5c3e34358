"""page_cache_limit: a broker that shares its host's page cache with greedy neighbours (incident 000:
three Elasticsearch nodes beside it). The node's memory cgroup is capped at its memory without page
cache plus `page_cache_mb`, so the kernel keeps its page cache near that: the commit log's dirty
pages must be written back before new ones can be had, and the broker's appends wait on the disk
(the stall a busy disk turns into busy answers). The cap follows the node's own memory up: every
`tick_s`, when its growth (a JVM's heap is touched as it is used) has eaten a quarter of the page-cache
allowance, the cap is set again to its memory plus the allowance (only then). Without that a broker
that grew by page_cache_mb was OOM-killed (measured here once with 32 MB). Lifted at stop; the
evidence counts the raises and any OOM kills during the fault. Its intent: the page cache the node
held while capped (the median of the samples at the cap and every tick) at or under the allowance."""
from __future__ import annotations

import statistics
from typing import Any

from pydantic import Field

from chaos.intent import intent, measure
from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span, register
from rmqchaos.errors import UserError

MIB = 1 << 20


class PageCacheParams(Lasting):
    page_cache_mb: int = Field(64, ge=8, le=1 << 20)


def page_cache_intent(node: str, cap_mb: float, seen_mb: list[float]) -> dict[str, Any]:
    """A ceiling as a measure: the share of the node's page cache (the median of `seen_mb`) within the
    cap, 1 at or under it (nothing seen: the node was gone; nothing to measure)."""
    if not seen_mb:
        return intent([], f"page-cache limit of {node}", none="its page cache was never read (the node was gone)")
    held = statistics.median(seen_mb)
    within = 1.0 if held <= cap_mb else cap_mb / held
    words = f"page cache {held:.0f} MB (median of {len(seen_mb)} samples) " + \
        (f"within its {cap_mb:g} MB cap" if within == 1 else f"over its {cap_mb:g} MB cap")
    return intent([measure("page cache within the cap", node, 1, within, words)], f"page-cache limit of {node}")


@register
class PageCacheLimit(FaultKind):
    name = "page_cache_limit"
    Params = PageCacheParams
    target = "broker"
    tick_s = 0.5  # a broker under load grows by a few MB/s at most

    @classmethod
    def span(cls, params: Any) -> float:
        return lasting_span(params)

    def start(self) -> None:
        self.running_pid()
        self.mem = self.node.memory
        self.before = {"usage_mb": round((self.mem.usage() or 0) / MIB, 1),
                       "page_cache_mb": round(self.mem.page_cache() / MIB, 1), "oom_kills": self.mem.oom_kills()}
        try:
            limit = self.mem.cap(page_cache=self.params.page_cache_mb * MIB)  # type: ignore[attr-defined]
        except OSError as e:
            raise FaultError(f"page_cache_limit {self.node.name}: {e}",
                             "is the memory controller enabled for the node's cgroup?") from None
        self.limit = limit
        self.seen_mb = [round(self.mem.page_cache() / MIB, 1)]
        self.evidence = {"limit_mb": round(limit / MIB, 1), "before": self.before,
                         "page_cache_mb_after_cap": self.seen_mb[0], "raises": 0}

    def tick(self) -> None:
        usage = self.mem.usage()
        if usage is None:  # the node is gone (killed by another fault): nothing to follow
            return
        cache = self.mem.page_cache()
        self.seen_mb.append(round(cache / MIB, 1))
        own = usage - cache
        allowance = self.params.page_cache_mb * MIB  # type: ignore[attr-defined]
        if self.limit - own < allowance * 3 // 4:
            try:
                self.limit = self.mem.cap(page_cache=allowance)
            except (OSError, UserError):
                if self.node.pid is None:  # killed meanwhile (another fault): nothing to follow
                    return
                raise
            self.evidence["raises"] += 1
            self.evidence["limit_mb_max"] = max(self.evidence.get("limit_mb_max", 0), round(self.limit / MIB, 1))

    def stop(self) -> dict[str, Any]:
        at_end = {"usage_mb": round((self.mem.usage() or 0) / MIB, 1),
                  "page_cache_mb": round(self.mem.page_cache() / MIB, 1)}
        self.mem.clear_limit()
        it = page_cache_intent(self.node.name, self.params.page_cache_mb, self.seen_mb)  # type: ignore[attr-defined]
        return {"intent": it, **self.evidence, "at_end": at_end, "oom_kills": self.mem.oom_kills() - self.before["oom_kills"]}
