"""page_cache_limit: a broker that shares its host's page cache with greedy neighbours (incident 000:
three Elasticsearch nodes beside it). The node's memory cgroup is capped at its memory without page
cache plus `page_cache_mb`, so the kernel keeps its page cache near that: the commit log's dirty
pages must be written back before new ones can be had, and the broker's appends wait on the disk
(the stall a busy disk turns into busy answers). Lifted at stop. If the node's own memory grows past
the cap the kernel OOM-kills it: the evidence counts OOM kills during the fault."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span, register

MIB = 1 << 20


class PageCacheParams(Lasting):
    page_cache_mb: int = Field(64, ge=8, le=1 << 20)


@register
class PageCacheLimit(FaultKind):
    name = "page_cache_limit"
    Params = PageCacheParams
    target = "broker"

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
        self.evidence = {"limit_mb": round(limit / MIB, 1), "before": self.before,
                         "page_cache_mb_after_cap": round(self.mem.page_cache() / MIB, 1)}

    def stop(self) -> dict[str, Any]:
        at_end = {"usage_mb": round((self.mem.usage() or 0) / MIB, 1),
                  "page_cache_mb": round(self.mem.page_cache() / MIB, 1)}
        self.mem.clear_limit()
        return {**self.evidence, "at_end": at_end, "oom_kills": self.mem.oom_kills() - self.before["oom_kills"]}
