"""`after: <fault id>`: a fault that follows another starts `at` after that one ended, not at a fixed
second (issue 47: the flood's cleanup). The key at load (one line per bad value), the plan's order,
and a real FaultScheduler against scripted nodes. Pure logic."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from chaos.registry import registry
from chaos.scheduler import occurrences
from rmqchaos.spec import SpecError, parse_scenario
from tests.test_role_targets import FakeNode, schedule

pytestmark = pytest.mark.fast

BASE = """name: after
load: {duration: 60s}
cluster:
  namesrv: {jvm: {heap_mb: 128, system_properties: {com.rocketmq.remoting.frameMaxLength: 65536}}}
faults:
"""


def parse(faults: str) -> Any:
    return parse_scenario(BASE + faults, "t.yaml", fault_kinds=registry())


def err(faults: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse(faults)
    return e.value.lines


def test_a_fault_after_another_is_valid_and_its_plan_comes_after_what_it_follows() -> None:
    s = parse("  - {id: cleanup, kind: cleanup_retry_topics, after: flood, at: 10s}\n"
              "  - {id: flood, kind: topic_flood, target: broker-a, at: 5s, groups: 1000}\n"
              "  - {kind: pause, target: broker-b, at: 20s, duration: 2s}\n")
    assert s.faults[0].after == "flood"
    # the follower's at (10 s) is counted from the flood's end: it is planned after the flood, not before it
    assert [(o.fault_id, o.at, o.after) for o in occurrences(s.faults)] == [
        ("flood", 5.0, None), ("pause-broker-b", 20.0, None), ("cleanup", 10.0, "flood")]


@pytest.mark.parametrize("faults, line", [
    ("  - {id: a, kind: pause, target: broker-a, at: 1s, after: b}\n",
     "t.yaml:6: faults[0].after: no fault with id 'b' in this scenario; fault ids: a"),
    ("  - {kind: pause, target: broker-a, at: 1s, after: b}\n",
     "t.yaml:6: faults[0].after: no fault with id 'b' in this scenario; fault ids: (none): give the fault to "
     "follow an id"),
    ("  - {id: a, kind: pause, target: broker-a, at: 1s, after: a}\n",
     "t.yaml:6: faults[0].after: a fault cannot come after itself ('a')"),
    ("  - {id: a, kind: pause, target: broker-a, at: 1s, repeat: {every: 5s, times: 3}}\n"
     "  - {id: b, kind: pause, target: broker-b, at: 1s, after: a}\n",
     "t.yaml:7: faults[1].after: 'a' repeats 3 times: `after` follows a fault that occurs once"),
    ("  - {id: a, kind: pause, target: broker-a, at: 1s}\n"
     "  - {id: b, kind: pause, target: broker-b, at: 1s, after: a.x}\n",
     "t.yaml:7: faults[1].after: no fault with id 'a.x' in this scenario; fault ids: a, b"),
    # at least 5 s (the pause's own at) + 5 s (its span) + 51 s: past the 60 s load
    ("  - {id: a, kind: pause, target: broker-a, at: 5s, duration: 5s}\n"
     "  - {id: b, kind: kill, target: broker-b, at: 51s, after: a}\n",
     "t.yaml:7: faults[1].at: the fault (at 61s, 51s after a's end at 10s or later, lasting 0s) ends after the "
     "load's duration 60s"),
])
def test_a_bad_after_is_one_line_at_its_key(faults: str, line: str) -> None:
    assert err(faults) == [line]


def test_a_cycle_is_named_at_each_of_its_faults() -> None:
    assert err("  - {id: a, kind: pause, target: broker-a, at: 1s, after: c}\n"
               "  - {id: b, kind: pause, target: broker-a, at: 1s, after: a}\n"
               "  - {id: c, kind: pause, target: broker-b, at: 1s, after: b}\n") == [
        "t.yaml:6: faults[0].after: `after` goes round in a cycle: a -> c -> b -> a",
        "t.yaml:7: faults[1].after: `after` goes round in a cycle: b -> a -> c -> b",
        "t.yaml:8: faults[2].after: `after` goes round in a cycle: c -> b -> a -> c"]


def test_the_follower_starts_its_at_after_the_fault_it_follows_ended(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause of 0.6 s, and a kill 0.3 s after it: the kill comes 0.3 s after the pause's end (0.9 s
    from the start), not at 0.3 s on the load's clock; its event names what it followed and when that ended."""
    frozen: dict[str, bool] = {}
    monkeypatch.setattr(FakeNode, "pause", lambda n: frozen.__setitem__(n.name, True), raising=False)
    monkeypatch.setattr(FakeNode, "paused", lambda n: frozen.get(n.name, False), raising=False)
    monkeypatch.setattr(FakeNode, "resume", lambda n: frozen.__setitem__(n.name, False), raising=False)
    t0 = time.time()
    c, ev, sched = schedule(tmp_path, "  - {id: k, kind: kill, target: broker-b, after: p, at: 0.3s}\n"
                                      "  - {id: p, kind: pause, target: broker-b, at: 0s, duration: 0.6s}\n",
                            lambda c: None)
    sched.check()
    assert c.done == [("kill", "broker-b")] and frozen == {"broker-b": False}
    p, k = ev["p"], ev["k"]
    assert k["start_ms"] - p["end_ms"] >= 290, (p, k)
    assert k["start_ms"] / 1000 - t0 >= 0.85
    assert (k["params"]["after"], k["params"]["after_outcome"], k["params"]["at_s"]) == ("p", "ok", 0.3)
    assert 0.55 <= k["params"]["after_end_s"] <= 1.0
