"""Where a run's time went: each stage's seconds from state.json's stage windows, and the time between
them (a DAG's task hops, a CLI's own work), against the load's time."""
from __future__ import annotations

from typing import Any

ORDER = ("up", "check", "load", "drain", "down", "analyze", "report")


def time_by_stage(stages: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """{"stages": {name: seconds}, "wall_s", "between_s", "load_s", "ratio" (wall / load, None without
    a load)} over the stages that ended, from the first start to the last end; None if none ended."""
    done = {n: st for n, st in stages.items() if st.get("end_ms") is not None and st.get("start_ms") is not None}
    if not done:
        return None
    names = sorted(done, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), done[n]["start_ms"]))
    per = {n: round((done[n]["end_ms"] - done[n]["start_ms"]) / 1000, 1) for n in names}
    wall = (max(st["end_ms"] for st in done.values()) - min(st["start_ms"] for st in done.values())) / 1000
    load = per.get("load")
    return {"stages": per, "wall_s": round(wall, 1), "between_s": round(max(0.0, wall - sum(per.values())), 1),
            "load_s": load, "ratio": round(wall / load, 2) if load else None}


def time_line(t: dict[str, Any] | None) -> str:
    """One line for a person: 'time: 97.1 s (2.02x the load): up 15.1, load 48.0, … between stages 3.0'."""
    if t is None:
        return "time: no stage ended"
    ratio = f" ({t['ratio']:.2f}x the load)" if t["ratio"] else ""
    return (f"time: {t['wall_s']:.1f} s{ratio}: " + ", ".join(f"{n} {s:.1f}" for n, s in t["stages"].items())
            + f", between stages {t['between_s']:.1f}")
