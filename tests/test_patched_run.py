"""Issue 68, item 1, real: a one-line patch to 5.5.0's BrokerStartup (a line printed at the broker's
start), built from the release's rocketmq-broker sources jar (rmqchaos/rocketmq/patched.py), its
cluster (namesrv + one broker, no load) up through the pipeline's `up`, the line in the broker's
stdout, the patch named in versions.json, the `up` progress line and report.txt; torn down. And a
patch whose hunk does not match 5.5.0's sources: one line naming the patch, the file and the hunk.

The build is the `built` fixture: the first one fetches the sources jar and compiles rocketmq-broker
(8-9 s here on 2 cores), then .cache/rocketmq-5.5.0+p<hash12>/ (and the user cache, which a fresh
clone links) holds it, keyed by the patch's bytes, so later runs skip it.
Subnet 127.0.111.0/24, ports 21886 (namesrv) and 21839..21842 (broker-a): no other test uses them."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import assert_nothing_left
from rmqchaos.rocketmq import dist, patched
from rmqchaos.spec import SpecError, parse_scenario

VERSION = "5.5.0"
STARTUP = "broker/src/main/java/org/apache/rocketmq/broker/BrokerStartup.java"
LINE = "rmqchaos test patch: "
PATCH = f"""diff --git a/{STARTUP} b/{STARTUP}
index aa51754..17d0a7c 100644
--- a/{STARTUP}
+++ b/{STARTUP}
@@ -64,6 +64,7 @@ public class BrokerStartup {{
 
             log.info(tip);
             System.out.printf("%s%n", tip);
+            System.out.printf("{LINE}%s%n", tip);
             return controller;
         }} catch (Throwable e) {{
             e.printStackTrace();
"""


def _patch(d: Path, text: str = PATCH, name: str = "fix.patch") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)
    return d / name


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The patched release, built once per key (the heavy part: cached in .cache across runs)."""
    p = _patch(tmp_path_factory.mktemp("patch"))
    t0 = time.monotonic()
    home = patched.ensure(VERSION, [p])
    print(f"patched {VERSION} ready in {time.monotonic() - t0:.1f}s: {home}")
    return p


def test_a_patched_broker_runs_the_patch_and_the_run_names_it(built: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    from conftest import _start, scenario_dict
    from pipeline.stages import down, report

    monkeypatch.setenv("RMQCHAOS_HOME", str(tmp_path / "home"))
    k, label = patched.key(VERSION, [built]), patched.label(VERSION, [built])
    home, release = dist.home(k), dist.home(VERSION)
    jar = "rocketmq-broker-5.5.0.jar"
    assert (home / "lib" / jar).stat().st_ino != (release / "lib" / jar).stat().st_ino  # rebuilt
    assert (home / "lib" / "rocketmq-store-5.5.0.jar").stat().st_ino == (release / "lib" / "rocketmq-store-5.5.0.jar").stat().st_ino
    d = scenario_dict("patched", 21886, [21841])
    d["cluster"].update({"rocketmq_version": VERSION, "patches": [str(built)], "subnet": "127.0.111.0/24",
                         "broker_defaults": {"jvm": {"heap_mb": 256, "max_direct_memory_mb": 256,
                                                     "options": ["-XX:TieredStopAtLevel=1"]}}})
    t0 = time.monotonic()
    run, c = _start(tmp_path, d)
    try:
        up_s = time.monotonic() - t0
        out = (run.path / "cluster" / "broker-a" / "stdout.log").read_text()
        assert f"{LINE}The broker[broker-a, 127.0.111." in out, out[-2000:]
        v = run.versions()
        assert v["rocketmq"] == label and [x["name"] for x in v["rocketmq_patches"]] == ["fix.patch"]
        assert v["rocketmq_patches"][0]["files"] == [STARTUP]
        assert (run.path / "patches" / "fix.patch").read_text() == PATCH
        assert f"(RocketMQ {label})" in capfd.readouterr().err  # the `up` progress line
    finally:
        down.run(run)
    assert_nothing_left(run.path)
    report.run(run)
    assert f"scenario patched  RocketMQ {label}" in run.report_txt.read_text()
    print(f"{label}: up {up_s:.1f}s")


def test_a_patch_that_does_not_apply_to_the_release_is_one_line(tmp_path: Path) -> None:
    bad = _patch(tmp_path, PATCH.replace('System.out.printf("%s%n", tip);', 'System.out.println(tip);'), "stale.patch")
    doc = f"name: t\ncluster:\n  rocketmq_version: {VERSION}\n  patches: [{bad}]\n"
    with pytest.raises(SpecError) as e:
        parse_scenario(doc, "t.yaml")
    assert len(e.value.lines) == 1 and e.value.lines[0].startswith(
        f"t.yaml:4: cluster.patches[0]: {bad}: does not apply to RocketMQ {VERSION}'s sources: "
        f"{STARTUP}: hunk `@@ -64,6 +64,7 @@` (line 5 of the patch) does not match"), e.value.lines
    assert not dist.home(patched.key(VERSION, [bad])).exists()
    assert not list(dist.home(VERSION).parent.glob(f"build-{patched.key(VERSION, [bad])}*"))  # no scratch tree or log left
