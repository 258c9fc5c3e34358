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


def test_a_key_renamed_between_the_majors_is_mapped_and_one_only_the_other_version_has_is_refused() -> None:
    from rmqchaos.spec import across
    v4 = {"haSlaveFallbehindMax", "maxDelayTime", "flushDiskType"}
    v5 = {"haMaxGapNotInSync", "enableSplitRegistration", "flushDiskType"}
    conf = {"flushDiskType": "SYNC_FLUSH", "haSlaveFallbehindMax": 1, "maxDelayTime": 3, "enableSplitRegistration": True,
            "noSuchKey": 1}
    out, mapped, refused = across(conf, "here", "5.5.0", v5, "4.9.7", v4, "remove it")
    assert out == {"flushDiskType": "SYNC_FLUSH", "haMaxGapNotInSync": 1, "enableSplitRegistration": True, "noSuchKey": 1}
    assert mapped == {"haSlaveFallbehindMax": "haMaxGapNotInSync"}  # noSuchKey: left for the validation to name
    assert refused == ["key maxDelayTime (here) is a RocketMQ 4.9.7 key that 5.5.0 does not have "
                       "(removed in 5.2.0, apache/rocketmq #6400): remove it"]
    out, mapped, refused = across({"haMaxGapNotInSync": 2, "enableSplitRegistration": True}, "here", "4.9.7", v4,
                                  "5.5.0", v5, "remove it")  # and back: the 5.x name on a 4.x side
    assert (out, mapped) == ({"haSlaveFallbehindMax": 2}, {"haMaxGapNotInSync": "haSlaveFallbehindMax"})
    assert refused == ["key enableSplitRegistration (here) is a RocketMQ 5.5.0 key that 4.9.7 does not have: remove it"]


def test_the_prerelease_test_refuses_a_key_only_one_side_has_in_one_line_before_any_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.workflows import compare, prerelease
    from rmqchaos.errors import UserError
    monkeypatch.setenv("RMQCHAOS_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    keys = {"4.9.7": {"broker": {"flushDiskType": "enum", "brokerRole": "enum", "haSlaveFallbehindMax": "int",
                                 "maxDelayTime": "int"}, "namesrv": {}},
            "5.5.0": {"broker": {"flushDiskType": "enum", "brokerRole": "enum", "haMaxGapNotInSync": "int",
                                 "enableSplitRegistration": "bool"}, "namesrv": {}}}
    monkeypatch.setattr(prerelease, "config_keys", keys.__getitem__)  # the two versions' jars, without Maven
    base = tmp_path / "base.yaml"
    base.write_text(f"extends: {SCENARIOS / 'prerelease.yaml'}\ncluster:\n  broker_defaults:\n"
                    "    config: {enableSplitRegistration: true}\n")
    params = {"scenario": str(base), "rocketmq_version": "5.5.0", "baseline_version": "4.9.7", "fault_set": "none"}
    with pytest.raises(UserError) as e:
        compare.prepare(params)
    assert str(e.value) == ("key enableSplitRegistration (the base scenario's cluster.broker_defaults.config) is a "
                            "RocketMQ 5.5.0 (the candidate) key that 4.9.7 (the baseline) does not have: remove it from "
                            "the base scenario (the candidate may set it in broker_config)")
    base.write_text(f"extends: {SCENARIOS / 'prerelease.yaml'}\n")
    with pytest.raises(UserError, match=r"^key maxDelayTime \(broker_config\) is a RocketMQ 4\.9\.7 \(the baseline\) "
                                        r"key that 5\.5\.0 \(the candidate\) does not have \(removed in 5\.2\.0"):
        compare.prepare({**params, "broker_config": {"maxDelayTime": 3}})
    assert not [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]  # no run directory: only the sides' files


def test_a_key_under_its_other_majors_name_says_what_to_use_and_a_removed_one_when(tmp_path: Path) -> None:
    from rmqchaos.spec import SpecError, load_scenario
    f = tmp_path / "s.yaml"
    for key, says in (("haSlaveFallbehindMax", "RocketMQ renamed it between 4.x and 5.x: use haMaxGapNotInSync"),
                      ("maxDelayTime", "(a 4.x key, removed in 5.2.0, apache/rocketmq #6400)")):
        f.write_text(f"extends: {SCENARIOS / 'control.yaml'}\ncluster:\n  rocketmq_version: 5.5.0\n"
                     f"  broker_defaults:\n    config: {{{key}: 1}}\n")
        with pytest.raises(SpecError) as e:
            load_scenario(f)
        assert e.value.lines == [f"{f}:5: cluster.broker_defaults.config.{key}: unknown broker.conf key {key!r}"
                                 + ("; " if "renamed" in says else " ") + says], e.value.lines
