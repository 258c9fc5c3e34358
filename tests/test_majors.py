"""A 4.x release runs what 4.x has; what 5.0 brought is refused at validation in one line naming the
feature and the version, before any Maven call (rmqchaos/spec/majors.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def on(version: str, name: str, tmp: Path) -> str:
    """The one line the scenario file `name` is refused with on `version` (an overlay of it)."""
    from rmqchaos.spec import SpecError, load_scenario
    f = tmp / "overlay.yaml"
    f.write_text(f"extends: {SCENARIOS / name}\ncluster:\n  rocketmq_version: {version}\n")
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    assert len(e.value.lines) == 1, e.value.lines
    return e.value.lines[0]


@pytest.mark.parametrize("scenario, where, feature", [
    ("failover-controller-and-master.yaml", "cluster.controllers", "controller mode (5.0+)"),
    ("grpc-control.yaml", "cluster.proxy.enabled", "proxy, gRPC clients or POP (5.0+)"),
    ("timer-broker-kill.yaml", "load.timer.delay", "timer wheel (5.0+, TIMER_DELIVER_MS): use delay_level"),
])
def test_what_5_0_brought_is_refused_on_4x_in_one_line(scenario: str, where: str, feature: str, tmp_path: Path) -> None:
    line = on("4.9.7", scenario, tmp_path)
    assert line.split(": ", 2)[1] == where and f"RocketMQ 4.9.7 has no {feature}" in line, line


def test_a_version_older_than_4_6_0_is_refused_before_maven(tmp_path: Path) -> None:
    line = on("4.5.0", "control.yaml", tmp_path)
    assert "RocketMQ version '4.5.0' cannot be resolved here (the platform runs 4.x releases from 4.6.0" in line
