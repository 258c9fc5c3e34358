"""Issue 37, first steps: versions as a dimension (rmqchaos/rocketmq/dist.py) and the `expect:` block
(rmqchaos/spec/expect.py, analysis/judge/expect.py, cluster/watch/end_probes.py).

Fast: the validation lines (unknown field, unknown version, unknown figure, a probe on no node), the
evaluation and its verdict clause, the cache key shared with setup.sh's old digest.
Real, long (~145 s for both versions: a classic slave syncs when its last sync is 60 s old):
apache/rocketmq#9403 reproduces on 5.3.3 and does not on 5.5.0, on the pipeline's own path (up, the
load's attributed topic created as the load stage does, the probe, the evaluation).
Real, make test (~15 s): the same path on one master, the probes taken by the `down` stage itself.
Subnet 127.0.67.0/24, ports 20474..20517 and 20574..20582: no other test uses them."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from analysis.judge.expect import evaluate
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError
from helpers import one_line
from rmqchaos.spec import parse_scenario

REPO = Path(__file__).resolve().parent.parent
CORPUS_9403 = REPO / "scenarios" / "upstream" / "issue-9403-attributed-topic-slave-sync.yaml"

DOC = """name: t
cluster:
  subnet: 127.0.67.0/24
  namesrv: {port: 20476}
  brokers: [{name: broker-a, port: 20511, slave: {}}]
load: {topic: T9403, topic_attributes: {message.type: NORMAL}, duration: 15s}
expect:
  issue: https://github.com/apache/rocketmq/issues/9403
  shows_on: [5.3.3]
  gone_in: [5.5.0]
  conditions: ["lost == 0"]
  probes:
    - topic_absent: {topic: T9403, node: broker-a-s}
"""


@pytest.mark.fast
def test_an_expect_block_that_cannot_be_evaluated_is_refused_with_one_line() -> None:
    s = parse_scenario(DOC, "t.yaml")
    assert s.expect is not None and s.expect.probes[0].words() == "topic T9403 absent from broker-a-s"
    assert s.load is not None and s.load.topic_attributes == {"message.type": "NORMAL"}
    assert one_line(DOC.replace("  conditions:", "  conditionz:")) == (
        "t.yaml:11: expect.conditionz: unknown key; allowed: issue, shows_on, gone_in, measure_on, conditions, premise, probes, "
        "failovers")
    assert one_line(DOC.replace("topic_absent:", "topic_gone:")) == (
        "t.yaml:13: expect.probes[0].topic_gone: unknown key; allowed: topic_absent, topic_present, "
        "replica_queues_differ")
    assert one_line(DOC.replace("[5.3.3]", "[5.3.9]")).startswith(
        "t.yaml:9: expect.shows_on[0]: unknown RocketMQ version '5.3.9'; known: 4.6.0, 4.6.1, 4.7.0, ")
    assert "unknown figure 'lossed'; figures: keys, " in one_line(DOC.replace("lost ==", "lossed =="))
    assert "expected '<figure> <op> <integer>'" in one_line(DOC.replace("lost == 0", "lost is 0"))
    assert one_line(DOC.replace("node: broker-a-s", "node: broker-b")) == (
        "t.yaml:13: expect.probes[0]: no broker node 'broker-b' in this cluster; brokers: broker-a, broker-a-s")
    assert "at least one of conditions, probes" in one_line(DOC.split("  conditions:")[0])
    # the cluster's version: older than 4.6.0, or not a release number -> one line, before any Maven call
    line = one_line(DOC.replace("cluster:\n", "cluster:\n  rocketmq_version: 4.5.2\n"))
    assert line.startswith("t.yaml:3: cluster.rocketmq_version: RocketMQ version '4.5.2' cannot be resolved here "
                           "(the platform runs 4.x releases from 4.6.0 and 5.x releases")
    assert "versions known to resolve: 4.6.0, 4.6.1, 4.7.0, 4.7.1, 4.8.0, 4.9.0, " in line
    assert "cannot be resolved here" in one_line(DOC.replace("cluster:\n", "cluster:\n  rocketmq_version: 6.0.0\n"))


@pytest.mark.fast
def test_a_key_the_version_lacks_is_refused_against_that_versions_own_jars() -> None:
    if not rocketmq_dist.installed("5.3.3"):
        pytest.skip("RocketMQ 5.3.3 not resolved here yet (the real test resolves it)")
    conf = "  broker_defaults: {config: {enableAcceleratedRecovery: true}}\n"
    text = DOC.replace("cluster:\n", "cluster:\n" + conf)
    parse_scenario(text, "t.yaml")  # 5.5.0 (pinned) has the key
    assert one_line(text.replace("cluster:\n", "cluster:\n  rocketmq_version: 5.3.3\n")).endswith(
        "cluster.broker_defaults.config.enableAcceleratedRecovery: unknown broker.conf key 'enableAcceleratedRecovery'")


@pytest.mark.fast
def test_the_cache_key_is_the_digest_setup_sh_wrote_so_existing_caches_stay_valid() -> None:
    sh = subprocess.run(["bash", "-c", '(cat pom.xml; find java/src -type f | sort | xargs cat; echo "5.5.0") '
                                       "| sha256sum | cut -c1-16"], cwd=REPO, capture_output=True, text=True)
    assert rocketmq_dist.stamp_key("5.5.0") == sh.stdout.strip()
    with pytest.raises(UserError, match=r"'5\.x' cannot be resolved here"):
        rocketmq_dist.ensure("5.x")


@pytest.mark.fast
def test_a_fresh_checkout_links_the_build_another_checkout_left_in_the_user_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pom.xml and Java sources (the stamp): linked, no Maven; another stamp: built, and left
    for the next checkout (the two newest builds of a version kept)."""
    from rmqchaos.machine import paths
    monkeypatch.setattr(paths, "CACHE", tmp_path / "clone" / ".cache")
    monkeypatch.setenv("RMQCHAOS_CACHE", str(tmp_path / "user"))
    v = "5.5.0"
    shared = tmp_path / "user" / "rocketmq" / f"{v}-{rocketmq_dist.stamp_key(v)}"
    for d in ("lib", "grpc"):
        (shared / d).mkdir(parents=True)
    for f in ("rmqchaos-java.jar", "config-keys.json", "lib/rocketmq-broker.jar"):
        (shared / f).write_text(f)
    (shared / ".setup-stamp").write_text(rocketmq_dist.stamp_key(v) + "\n")
    built: list[str] = []
    monkeypatch.setattr(rocketmq_dist, "_build", built.append)
    home = rocketmq_dist.ensure(v)
    assert built == [] and home == tmp_path / "clone" / ".cache" / f"rocketmq-{v}" and rocketmq_dist.installed(v)
    assert (home / "lib" / "rocketmq-broker.jar").stat().st_ino == (shared / "lib" / "rocketmq-broker.jar").stat().st_ino
    # the user cache holds other stamps only (other Java sources): Maven builds here, and the build is
    # left in the user cache beside the newest other one
    import os
    import shutil
    shutil.rmtree(shared)
    for i, old in enumerate(("0000000000000001", "0000000000000002")):
        (shared.parent / f"{v}-{old}").mkdir()
        os.utime(shared.parent / f"{v}-{old}", (1_000_000 + i, 1_000_000 + i))
    (home / ".setup-stamp").write_text("0000000000000000\n")

    def build(version: str) -> None:
        built.append(version)
        (rocketmq_dist.home(version) / ".setup-stamp").write_text(rocketmq_dist.stamp_key(version) + "\n")
    monkeypatch.setattr(rocketmq_dist, "_build", build)
    assert rocketmq_dist.ensure(v) == home and built == [v]
    assert (shared / ".setup-stamp").read_text().strip() == rocketmq_dist.stamp_key(v)
    assert (shared / "lib" / "rocketmq-broker.jar").stat().st_ino == (home / "lib" / "rocketmq-broker.jar").stat().st_ino
    assert sorted(d.name for d in shared.parent.iterdir()) == sorted([f"{v}-0000000000000002", shared.name])


@pytest.mark.fast
def test_maven_reason_names_the_missing_artifact(tmp_path: Path) -> None:
    log = tmp_path / "mvn.log"
    log.write_text("\x1b[1;31m[ERROR] Failed to execute goal on project rmqchaos-java: Could not resolve dependencies "
                   "for project io.rmqchaos:rmqchaos-java:jar:0.1.0: Could not find artifact "
                   "org.apache.rocketmq:rocketmq-namesrv:jar:5.5.1 in central\n")
    assert rocketmq_dist.maven_reason(log) == "Could not find artifact org.apache.rocketmq:rocketmq-namesrv:jar:5.5.1"


@pytest.mark.fast
def test_the_verdict_says_reproduced_or_not_with_the_evidence() -> None:
    s = parse_scenario(DOC, "t.yaml")
    assert s.expect is not None
    absent = [{"probe": 0, "holds": True, "seen": "broker-a-s holds 13 topics, T9403 not among them"}]
    present = [{"probe": 0, "holds": False, "seen": "broker-a-s holds 14 topics, T9403 among them"}]
    summ = {"counts": {"lost": 0}, "store_check": None}
    r = evaluate(s.expect, summ, absent, "5.3.3")
    assert (r["reproduced"], r["expected"], r["as_expected"]) == (True, "reproduced", True)
    assert r["words"] == ("reproduced apache/rocketmq#9403 on 5.3.3, as expected (a version it was reported on): "
                          "lost == 0 (lost = 0), topic T9403 absent from broker-a-s (broker-a-s holds 13 topics, "
                          "T9403 not among them)")
    r = evaluate(s.expect, summ, present, "5.5.0")
    assert (r["reproduced"], r["as_expected"]) == (False, True)
    assert r["words"].startswith("did not reproduce apache/rocketmq#9403 on 5.5.0, as expected (a version with the fix)")
    # a bug gone from the version it was reported on is NOT as expected: a failure, never a pass
    r = evaluate(s.expect, summ, present, "5.3.3")
    assert (r["reproduced"], r["as_expected"]) == (False, False) and "NOT as expected" in r["words"]
    # evidence that could not be read: neither reproduced nor not
    r = evaluate(s.expect, {"counts": {"lost": 0}}, None, "5.3.3")
    assert (r["reproduced"], r["as_expected"]) == (None, None)
    assert r["words"].endswith("unknown: topic T9403 absent from broker-a-s (probe not taken: the cluster was not up "
                               "at the end of the run)")


@pytest.mark.fast
def test_the_9403_corpus_scenario_validates() -> None:
    from rmqchaos.spec import load_scenario
    if not rocketmq_dist.installed("5.3.3"):
        pytest.skip("RocketMQ 5.3.3 not resolved here yet")
    s = load_scenario(CORPUS_9403)
    assert s.cluster.rocketmq_version == "5.3.3" and s.expect is not None
    assert s.expect.issue == "https://github.com/apache/rocketmq/issues/9403"


def _corpus_9403_on(version: str, ns_port: int, broker_port: int) -> dict:
    import yaml
    d = yaml.safe_load(CORPUS_9403.read_text())
    d["name"] = f"i9403-{version.replace('.', '')}"
    d["cluster"].update({"rocketmq_version": version, "subnet": "127.0.67.0/24", "namesrv": {"port": ns_port},
                         "brokers": [{"name": "broker-a", "port": broker_port, "slave": {}}],
                         "ready_timeout": "90s", "stop_timeout": "3s"})
    return d


@pytest.mark.long
@pytest.mark.parametrize("version,reproduced", [("5.3.3", True), ("5.5.0", False)])
def test_9403_reproduces_on_533_and_not_on_550(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
                                               reproduced: bool) -> None:
    """The corpus scenario's cluster on each version; its load's topic created as the load stage creates
    it (with +message.type=NORMAL); the probe as `down` takes it (it waits until the slave holds its
    master's table version), evaluated as the analysis does."""
    import time

    from cluster.watch.end_probes import take
    from conftest import _start
    from pipeline.stages import down

    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    t0 = time.monotonic()
    run, c = _start(tmp_path, _corpus_9403_on(version, 20476, 20511))
    try:
        up_s = time.monotonic() - t0
        s = run.scenario()
        assert s.load is not None and s.expect is not None
        c.create_topics([s.load.topic], s.load.queues, attributes=s.load.topic_attributes)
        master = c.admin().topic_configs(c.plans["broker-a"].addr)[s.load.topic]
        assert master["attributes"] == {"message.type": "NORMAL"}  # the master took the attribute
        t1 = time.monotonic()
        probes = take(run, c)
        probe_s = time.monotonic() - t1
        assert probes is not None
        r = evaluate(s.expect, {}, probes, version)
        print(f"RocketMQ {version}: up {up_s:.1f}s, probe {probe_s:.1f}s: {r['words']}")
        assert "read after it synced from its master" in probes[0]["seen"]  # absent = dropped by the sync
        assert (r["reproduced"], r["as_expected"]) == (reproduced, True), r["words"]
    finally:
        down.run(run)


def test_the_probes_read_the_live_cluster_in_down_and_the_analysis_evaluates_them(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """make test's short form of the #9403 path (the long test above waits for a slave's 60 s sync): one
    master on the pinned version, the load's topic created with its attributes, the probes taken by the
    `down` stage itself (a master needs no sync wait), evaluated as the analysis does."""
    import json
    import time

    import yaml

    from analysis.judge.expect import read_probes
    from conftest import _start
    from pipeline.stages import down

    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    d = yaml.safe_load(DOC)
    d["cluster"].update({"namesrv": {"port": 20576}, "brokers": [{"name": "broker-a", "port": 20581}],
                         "broker_defaults": {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256,
                                                     "options": ["-XX:TieredStopAtLevel=1"]}},
                         "ready_timeout": "90s", "stop_timeout": "3s"})
    d["expect"].update({"conditions": [], "probes": [{"topic_present": {"topic": "T9403", "node": "broker-a"}},
                                                     {"topic_absent": {"topic": "T_NEVER", "node": "broker-a"}}]})
    t0 = time.monotonic()
    run, c = _start(tmp_path, d)
    try:
        s = run.scenario()
        assert s.load is not None and s.expect is not None
        c.create_topics([s.load.topic], s.load.queues, attributes=s.load.topic_attributes)
        assert c.admin().topic_configs(c.plans["broker-a"].addr)["T9403"]["attributes"] == {"message.type": "NORMAL"}
    finally:
        down.run(run)  # takes the probes before it stops the JVMs
    probes = read_probes(run.probes_file)
    assert probes is not None and [p["holds"] for p in probes] == [True, True], json.dumps(probes)
    r = evaluate(s.expect, {}, probes, s.cluster.rocketmq_version)
    assert (r["reproduced"], r["expected"], r["as_expected"]) == (True, "not reproduced", False)
    assert r["words"].startswith("reproduced apache/rocketmq#9403 on 5.5.0, NOT as expected (a version with the fix)")
    print(f"{time.monotonic() - t0:.1f}s: {r['words']}")
