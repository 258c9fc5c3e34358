"""blkio_throttle: a slower disk, deterministically: cap a node's block I/O (bytes/s, IOPS) on the
disk its store is on (the run directory's disk) through its cgroup, lifted at stop. Under cgroup v1
the cap applies to I/O the node submits itself (its flush thread's msync/fsync, direct I/O), not
to the kernel's background writeback of its page cache. Its intent: the caps the kernel reads back
for the node's cgroup at the start and again at the end, before they are lifted, are those asked."""
from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from chaos.intent import happened, intent
from chaos.protocol import FaultError, FaultKind, Lasting, lasting_span, register
from rmqchaos.machine import diskstats


class BlkioParams(Lasting):
    write_mb_s: float | None = Field(None, gt=0)
    write_iops: int | None = Field(None, ge=1)
    read_mb_s: float | None = Field(None, gt=0)
    read_iops: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _some_cap(self) -> "BlkioParams":
        if not any((self.write_mb_s, self.write_iops, self.read_mb_s, self.read_iops)):
            raise ValueError("set at least one of write_mb_s, write_iops, read_mb_s, read_iops")
        return self

    def limits(self) -> dict[str, int]:
        mb = lambda v: int(v * 1_000_000) if v else 0  # noqa: E731
        return {"write_bps": mb(self.write_mb_s), "read_bps": mb(self.read_mb_s),
                "write_iops": self.write_iops or 0, "read_iops": self.read_iops or 0}


def _caps(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(c.items())) or "none"


def blkio_intent(node: str, want: dict[str, int], at_start: dict[str, int], at_end: dict[str, int]) -> dict[str, Any]:
    held = at_start == want and at_end == want
    return intent([happened("caps held", node, held, f"caps in force from start to end ({_caps(want)})" if held else
                            f"caps read back {_caps(at_end)} at the end, not {_caps(want)}")], f"disk throttle of {node}")


@register
class BlkioThrottle(FaultKind):
    name = "blkio_throttle"
    Params = BlkioParams

    @classmethod
    def span(cls, params: Any) -> float:
        return lasting_span(params)

    def start(self) -> None:
        self.running_pid()
        self.dev = diskstats.device_of(self.ctx.run.path)
        want = {k: v for k, v in self.params.limits().items() if v}  # type: ignore[attr-defined]
        got = self.node.throttle_io(self.dev.majmin, want)
        if got != want:
            self.node.throttle_io(self.dev.majmin, {})
            raise FaultError(f"blkio_throttle {self.node.name}: the kernel reads back {got}, not {want}",
                             "is the blkio (v1) / io (v2) controller enabled for the node's cgroup?")
        self.want = want
        self.evidence = {"device": self.dev.name, "majmin": self.dev.majmin, "limits": got}

    def stop(self) -> dict[str, Any]:
        try:
            at_end = self.node.io_caps(self.dev.majmin)
        except OSError:  # the node's cgroup went as it was read (killed by another fault)
            at_end = {}
        left = self.node.throttle_io(self.dev.majmin, {})
        return {"intent": blkio_intent(self.node.name, self.want, self.evidence["limits"], at_end), **self.evidence,
                "lifted": not left}
