"""page_cache_limit: a broker that shares its host's page cache with greedy neighbours (incident 000:
three Elasticsearch nodes beside it). The node's memory cgroup is capped at its memory without page
cache plus `page_cache_mb`, so the kernel keeps its page cache near that: the commit log's dirty
pages must be written back before new ones can be had, and the broker's appends wait on the disk
(the stall a busy disk turns into busy answers). The cap follows the node's own memory up: every
`tick_s`, when its growth (a JVM's heap is touched as it is used) has eaten a quarter of the page-cache
allowance, the cap is set again to its memory plus the allowance (only then). Without that a broker
that grew by page_cache_mb was OOM-killed (measured here once with 32 MB). Lifted at stop; the
evidence counts the raises and any OOM kills during the fault."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span, register
from rmqchaos.errors import UserError

MIB = 1 << 20


class PageCacheParams(Lasting):
    page_cache_mb: int = Field(64, ge=8, le=1 << 20)


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
        self.evidence = {"limit_mb": round(limit / MIB, 1), "before": self.before,
                         "page_cache_mb_after_cap": round(self.mem.page_cache() / MIB, 1), "raises": 0}

    def tick(self) -> None:
        usage = self.mem.usage()
        if usage is None:  # the node is gone (killed by another fault): nothing to follow
            return
        own = usage - self.mem.page_cache()
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
        return {**self.evidence, "at_end": at_end, "oom_kills": self.mem.oom_kills() - self.before["oom_kills"]}
