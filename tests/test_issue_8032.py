"""apache/rocketmq#8032 in the corpus (scenarios/upstream/issue-8032-*.yaml): the scenario validates,
its probe `replica_queues_differ` is validated strictly, and its verdict reads planted probes
(reproduced / not / could not tell). The whole runs are measured by hand (docs/findings.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.judge.expect import evaluate
from helpers import one_line
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.spec import load_scenario, parse_scenario

SCENARIO = next((Path(__file__).resolve().parent.parent / "scenarios" / "upstream").glob("issue-8032-*.yaml"))

DOC = """name: t
cluster:
  subnet: 127.0.96.0/24
  namesrv: {port: 26100}
  brokers: [{name: broker-a, port: 26112, replicas: 3, replication: dledger}, {name: broker-b, port: 26140}]
load: {topic: T8032, duration: 15s}
expect:
  issue: https://github.com/apache/rocketmq/issues/8032
  shows_on: [5.2.0]
  gone_in: [5.5.0]
  probes:
    - replica_queues_differ: {topic: T8032, group: broker-a}
"""


@pytest.mark.fast
def test_the_8032_scenario_validates_with_its_signature() -> None:
    if not rocketmq_dist.installed("5.2.0"):
        pytest.skip("RocketMQ 5.2.0 not resolved here yet (scripts/setup.sh resolves it)")
    s = load_scenario(SCENARIO)
    assert s.cluster.rocketmq_version == "5.2.0" and s.expect is not None
    assert (s.expect.shows_on, s.expect.gone_in) == (["5.2.0"], ["5.3.0", "5.5.0"])
    assert [f.target for f in s.faults] == ["master-of:broker-a"] and s.faults[0].kind == "kill"
    assert s.expect.probe_groups() == [(0, "broker-a")] and s.expect.probe_nodes() == []


@pytest.mark.fast
def test_replica_queues_differ_is_validated_strictly() -> None:
    s = parse_scenario(DOC, "t.yaml")
    assert s.expect is not None
    assert s.expect.probes[0].words() == "a replica of broker-a whose consume queues of T8032 differ from its master's"
    assert one_line(DOC.replace("group: broker-a", "group: broker-b")) == (
        "t.yaml:12: expect.probes[0]: no replicated group 'broker-b' in this cluster; replicated groups: broker-a")
    assert one_line(DOC.replace("group: broker-a}", "group: broker-a, node: broker-a-0}")) == (
        "t.yaml:12: expect.probes[0].replica_queues_differ.node: unknown key; allowed: topic, group")
    both = DOC.replace("    - replica_queues_differ: {topic: T8032, group: broker-a}\n",
                       "    - replica_queues_differ: {topic: T8032, group: broker-a}\n"
                       "      topic_absent: {topic: T8032, node: broker-a-0}\n")
    assert "a probe is exactly one of: topic_absent, topic_present, replica_queues_differ" in one_line(both)


@pytest.mark.fast
def test_the_verdict_reads_the_replica_queues_probe() -> None:
    s = parse_scenario(DOC, "t.yaml")
    assert s.expect is not None
    differ = [{"probe": 0, "holds": True, "seen": "after 60 s, broker-a-0 queue 0: 412..640 (master broker-a-1: "
                                                   "queue 0: 0..640)"}]
    agree = [{"probe": 0, "holds": False, "seen": "every replica of broker-a spans what its master broker-a-1 does"}]
    r = evaluate(s.expect, {"counts": {}}, differ, "5.2.0")
    assert (r["reproduced"], r["as_expected"]) == (True, True)
    assert r["words"].startswith("reproduced apache/rocketmq#8032 on 5.2.0, as expected") and "412..640" in r["words"]
    r = evaluate(s.expect, {"counts": {}}, agree, "5.5.0")
    assert (r["reproduced"], r["as_expected"]) == (False, True)
    r = evaluate(s.expect, {"counts": {}}, agree, "5.2.0")
    assert (r["reproduced"], r["as_expected"]) == (False, False) and "NOT as expected" in r["words"]
    unread = [{"probe": 0, "holds": None, "error": "a replica of broker-a did not answer: timed out"}]
    r = evaluate(s.expect, {"counts": {}}, unread, "5.2.0")
    assert (r["reproduced"], r["as_expected"]) == (None, None) and r["words"].endswith(
        "unknown: a replica of broker-a whose consume queues of T8032 differ from its master's (a replica of "
        "broker-a did not answer: timed out)")
