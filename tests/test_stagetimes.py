"""Where a run's time went: stage seconds, time between stages, wall against the load (pure logic)."""
from __future__ import annotations

import pytest

from rmqchaos.run.stagetimes import time_by_stage, time_line

pytestmark = pytest.mark.fast


def _st(start_s: float, end_s: float | None, status: str = "ok") -> dict:
    return {"status": status, "start_ms": int(start_s * 1000), **({"end_ms": int(end_s * 1000)} if end_s else {})}


def test_stages_between_and_ratio() -> None:
    t = time_by_stage({"up": _st(100, 115), "check": _st(117, 118), "load": _st(118, 166),
                       "drain": _st(170, 175), "down": _st(175, 177), "analyze": _st(180, 188),
                       "report": _st(188, None, "running")})
    assert t is not None
    assert t["stages"] == {"up": 15.0, "check": 1.0, "load": 48.0, "drain": 5.0, "down": 2.0, "analyze": 8.0}
    assert t["wall_s"] == 88.0 and t["between_s"] == 9.0 and t["load_s"] == 48.0
    assert t["ratio"] == pytest.approx(88 / 48, abs=0.01)
    line = time_line(t)
    assert line.startswith("time: 88.0 s (1.83x the load): up 15.0, check 1.0, load 48.0") and "between stages 9.0" in line


def test_a_run_without_load_or_without_ended_stages() -> None:
    t = time_by_stage({"up": _st(0, 10), "down": _st(12, 13)})
    assert t is not None and t["ratio"] is None and t["between_s"] == 2.0
    assert "x the load" not in time_line(t)
    assert time_by_stage({"up": _st(0, None, "running")}) is None
    assert time_line(None) == "time: no stage ended"
