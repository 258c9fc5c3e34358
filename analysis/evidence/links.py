"""What the monitor's probes saw on each link a network fault names (cluster/watch/monitor.py `links`):
per link its round trip each second and the stretches with no answer, for summary.json's `links`
and the report's links plot (analysis/report/plots.py `plot_links`)."""
from __future__ import annotations

from typing import Any

SLOW_MS = 100.0  # an answer slower than this is drawn as slow (a loopback round trip is well under 1 ms)
STATES = ("answered", "slow", "no answer")


def state(rtt_ms: float | None) -> str:
    return "no answer" if rtt_ms is None else "slow" if rtt_ms > SLOW_MS else "answered"


def link_series(monitor: list[dict[str, Any]]) -> dict[str, Any] | None:
    """From the monitor's samples (as written): {"t_ms": [each sample with `links`], "links": {key:
    {"rtt_ms": [one per t_ms, null = no answer], "no_answer": [[start_ms, end_ms], ...],
    "no_answer_s": samples without an answer, "slow_s": answers slower than SLOW_MS, "median_ms":
    of the answers}}}. A stretch with no answer runs from its first unanswered sample to the next
    answered one (or one interval past its last sample). None when no sample probed a link."""
    mon = [m for m in monitor if isinstance(m.get("links"), dict)]
    if not mon:
        return None
    ts = [m["ts_ms"] for m in mon]
    keys = list(dict.fromkeys(k for m in mon for k in m["links"]))
    out: dict[str, Any] = {}
    for k in keys:
        rtts = [m["links"].get(k) for m in mon]
        stretches: list[list[int]] = []
        for i, r in enumerate(rtts):
            if r is not None:
                continue
            end = ts[i + 1] if i + 1 < len(ts) else ts[i] + 1000
            if stretches and stretches[-1][1] == ts[i]:
                stretches[-1][1] = end
            else:
                stretches.append([ts[i], end])
        got = sorted(r for r in rtts if r is not None)
        out[k] = {"rtt_ms": rtts, "no_answer": stretches, "no_answer_s": sum(r is None for r in rtts),
                  "slow_s": sum(r is not None and r > SLOW_MS for r in rtts),
                  "median_ms": got[len(got) // 2] if got else None}
    return {"t_ms": ts, "links": out}


def without_links(sample: dict[str, Any]) -> dict[str, Any]:
    """A monitor sample as the summary keeps it: its links are in the summary's own `links`."""
    return {k: v for k, v in sample.items() if k != "links"}
