"""`rmqchaos unit-repro` (issue 68): a reproduction without rmqchaos, a JUnit test against RocketMQ's own classes,
compiled and run against released jars. The fast tier reads JUnitCore's reports and refuses bad input; the real test
runs the allAckInSyncStateSet reproduction on 5.3.3 (passes) and 5.5.0 (fails on its SyncStateSet assertion)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import cli
from pipeline.workflows import upstream
from pipeline.workflows.repro import RECORD, line, markdown, parse_junit, unit_repro

REPO = Path(__file__).resolve().parent.parent
ALL_ACK = REPO / "java" / "repro" / "all-ack-sync-state-set"
FIX = REPO / "scenarios" / "upstream" / "patches" / "all-ack-sync-state-set.patch"  # the proposed fix

PASSED = "JUnit version 4.13.2\n.\nTime: 15.157\n\nOK (1 test)\n\n"
FAILED = """JUnit version 4.13.2
.E.E
Time: 10.376
There were 2 failures:
1) testShrink(org.apache.rocketmq.store.ha.autoswitch.ShrinkTest)
java.lang.AssertionError: SyncStateSet expected:<[1, 2]> but was:<[1]>
\tat org.junit.Assert.fail(Assert.java:89)
\tat org.apache.rocketmq.store.ha.autoswitch.ShrinkTest.testShrink(ShrinkTest.java:102)
2) testSetUp(org.apache.rocketmq.store.ha.autoswitch.ShrinkTest)
java.lang.IllegalStateException
\tat org.apache.rocketmq.store.DefaultMessageStore.start(DefaultMessageStore.java:300)
\tat org.apache.rocketmq.store.ha.autoswitch.ShrinkTest.setUp(ShrinkTest.java:70)

FAILURES!!!
Tests run: 2,  Failures: 2

"""


@pytest.mark.fast
def test_junitcores_report_gives_each_failure_with_its_line_in_the_test() -> None:
    assert parse_junit(PASSED) == (True, 1, [])
    passed, run, failures = parse_junit(FAILED)
    assert (passed, run) == (False, 2)
    assert failures == [
        {"test": "testShrink", "class": "ShrinkTest", "exception": "java.lang.AssertionError",
         "message": "SyncStateSet expected:<[1, 2]> but was:<[1]>", "at": "ShrinkTest.java:102"},
        {"test": "testSetUp", "class": "ShrinkTest", "exception": "java.lang.IllegalStateException", "message": "",
         "at": "ShrinkTest.java:70"}]
    rec = {"version": "5.5.0", "passed": False, "compiled": True, "tests_run": 2, "failures": failures}
    assert line(rec) == ("5.5.0: fails: testShrink: AssertionError: SyncStateSet expected:<[1, 2]> but was:<[1]> "
                         "(ShrinkTest.java:102); testSetUp: IllegalStateException (ShrinkTest.java:70)")
    # a JVM that never got to a report: its last line
    assert parse_junit("Error: Could not find or load main class org.junit.runner.JUnitCore\n") == \
        (False, 0, [{"test": None, "class": None, "exception": "no JUnit report",
                     "message": "Error: Could not find or load main class org.junit.runner.JUnitCore", "at": None}])


@pytest.mark.fast
def test_a_folder_without_tests_or_a_bad_version_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "Helper.java").write_text("class Helper {}\n")
    for args, says in ((["unit-repro", str(tmp_path), "--versions", "5.5.0"], "no JUnit test source here"),
                       (["unit-repro", str(ALL_ACK), "--versions", "5.5"], "RocketMQ version '5.5' cannot be resolved")):
        r = cli(*args, env={**os.environ, "RMQCHAOS_RUNS": str(tmp_path / "runs")})
        assert r.returncode != 0
        assert says in next(ln for ln in r.stderr.splitlines() if ln.startswith("rmqchaos: error:"))
    assert not (tmp_path / "runs").exists()


@pytest.mark.fast
def test_the_reports_section_says_what_the_test_shows_how_to_run_it_and_what_each_version_printed(tmp_path: Path) -> None:
    src = tmp_path / "repro" / "store" / "src" / "test" / "java" / "org" / "x"
    src.mkdir(parents=True)
    (src / "ShrinkTest.java").write_text("package org.x;\n\n/**\n * A shrink takes effect\n * once accepted.\n */\n"
                                         "public class ShrinkTest {\n}\n")
    failure = {"test": "testShrink", "class": "ShrinkTest", "exception": "java.lang.AssertionError",
               "message": "SyncStateSet expected:<[1, 2]> but was:<[1]>", "at": "ShrinkTest.java:102"}
    (tmp_path / RECORD).write_text(json.dumps({
        "source": str(tmp_path / "repro"), "tests": ["store/src/test/java/org/x/ShrinkTest.java"],
        "classes": ["org.x.ShrinkTest"], "date": "2026-12-07", "versions": [
            {"version": "5.3.3", "passed": True, "compiled": True, "tests_run": 1, "failures": []},
            {"version": "5.5.0", "passed": False, "compiled": True, "tests_run": 1, "failures": [failure]}]}))
    md = markdown(tmp_path)
    assert md.startswith("## Reproduction without rmqchaos\n")
    for part in (f"`{tmp_path}/repro/store/src/test/java/org/x/ShrinkTest.java` (rmqchaos repository): A shrink takes "
                 "effect once accepted.", f"cp -r {tmp_path}/repro/* <rocketmq>/",
                 "mvn -pl store -am test -Dtest=ShrinkTest -Dsurefire.failIfNoSpecifiedTests=false",
                 f"rmqchaos unit-repro {tmp_path}/repro --versions 5.3.3,5.5.0", "What it printed (2026-12-07):",
                 "5.3.3: passes (1 test)\n5.5.0: fails: testShrink: AssertionError: SyncStateSet expected:<[1, 2]> but "
                 "was:<[1]> (ShrinkTest.java:102)\n"):
        assert part in md, part
    # report-upstream puts it right after the versions
    rec = {"version": "5.5.0", "showed": True, "src": "name: x\n", "resolved": "name: x\n", "settings": {},
           "run_dir": "/r/x", "counts": {}, "how": "lost", "verdict": ""}
    report = upstream.render("t", [rec], [], [], repro=md)
    assert report.index("## Versions") < report.index("## Reproduction without rmqchaos") < report.index("## The scenario")
    with pytest.raises(Exception, match="no unit-repro record there"):
        markdown(tmp_path / "nowhere")


@pytest.mark.fast
def test_pinned_jars_already_there_are_not_asked_of_maven_and_without_mvn_it_is_one_line(tmp_path: Path,
                                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from rmqchaos.errors import UserError
    from rmqchaos.machine import paths
    from rmqchaos.rocketmq import dist, grpc_client
    monkeypatch.setattr(paths, "CACHE", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no mvn: any resolution would fail
    (tmp_path / "junit").mkdir()
    for jar in ("junit-4.13.2.jar", "hamcrest-core-1.3.jar"):
        (tmp_path / "junit" / jar).write_bytes(b"PK")
    assert dist.artifacts("junit", ("junit:junit:4.13.2", "org.hamcrest:hamcrest-core:1.3")) == tmp_path / "junit"
    (tmp_path / "rocketmq-client-java-5.0.8").mkdir()
    (tmp_path / "rocketmq-client-java-5.0.8" / "rocketmq-client-java-5.0.8.jar").write_bytes(b"PK")
    assert grpc_client.ensure("5.0.8") == tmp_path / "rocketmq-client-java-5.0.8"
    with pytest.raises(UserError, match=r"^junit:junit:4.13.1 not here and mvn is not on PATH: run `make setup`$"):
        dist.artifacts("junit", ("junit:junit:4.13.1",))
    with pytest.raises(UserError, match=r"^the gRPC client: org.apache.rocketmq:rocketmq-client-java:5.0.9 not here"):
        grpc_client.ensure("5.0.9")


@pytest.mark.fast
def test_a_compile_error_is_one_failure_naming_its_file_and_line_and_a_report_is_read(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.workflows import repro
    monkeypatch.setattr(repro.dist, "rocketmq_home", lambda v: tmp_path / f"rocketmq-{v}")
    monkeypatch.setattr(repro.dist, "artifacts", lambda name, coords: tmp_path / name)
    monkeypatch.setattr(repro.dist, "substituted", lambda v: {})
    monkeypatch.setattr(repro, "classpath", lambda v: f"{tmp_path}/rocketmq-{v}/lib/*")
    monkeypatch.setattr(repro.paths, "loopback_shim", lambda: tmp_path / "shim.so")
    answers: list[tuple[int, str] | None] = []
    cmds: list[list[str]] = []
    monkeypatch.setattr(repro, "run_bounded", lambda cmd, timeout, **kw: (cmds.append(list(cmd)), answers.pop(0))[1])
    answers[:] = [(1, f"{ALL_ACK}/store/src/X.java:12: error: cannot find symbol\n1 error\n")]
    rec = repro.run_unit_repro(ALL_ACK, "5.5.0", tmp_path / "a")
    assert (rec["compiled"], rec["passed"], rec["tests_run"]) == (False, False, 0)
    assert rec["failures"] == [{"test": None, "class": None, "exception": "javac",
                                "message": "X.java:12: error: cannot find symbol", "at": None}]
    assert line(rec) == "5.5.0: does not compile: javac: X.java:12: error: cannot find symbol"
    assert cmds[0][0].endswith("javac") and f"{tmp_path}/junit/*:{tmp_path}/rocketmq-5.5.0/lib/*" in cmds[0]
    answers[:] = [(0, ""), (1, FAILED)]
    rec = repro.run_unit_repro(ALL_ACK, "5.5.0", tmp_path / "b")
    assert (rec["compiled"], rec["passed"], rec["tests_run"], len(rec["failures"])) == (True, False, 2, 2)
    java = cmds[-1]
    assert java[-1] == "org.apache.rocketmq.store.ha.autoswitch.AllAckInSyncStateSetShrinkTest"
    assert java[-2] == repro.JUNIT_MAIN and f"-Djava.io.tmpdir={tmp_path / 'b' / 'tmp'}" in java
    assert (tmp_path / "b" / "junit.txt").read_text() == FAILED and (tmp_path / "b" / "javac.txt").read_text() == ""


def test_the_all_ack_reproduction_passes_on_5_3_3_fails_on_5_5_0_on_its_sync_state_set_and_passes_with_the_fix(
        tmp_path: Path) -> None:
    [old] = unit_repro(ALL_ACK, "5.3.3", tmp_path / "old")
    new, fixed = unit_repro(ALL_ACK, "5.5.0", tmp_path / "new", patches=[FIX])
    # the proposed fix (the local set left alone until the controller accepts) makes 5.5.0 pass
    assert fixed["version"].startswith("5.5.0+all-ack-sync-state-set.patch(") and fixed["passed"], fixed["output_tail"]
    assert (fixed["tests_run"], fixed["failures"]) == (1, [])
    assert (old["version"], old["passed"], old["tests_run"], old["failures"]) == ("5.3.3", True, 1, []), old["output_tail"]
    assert (new["version"], new["compiled"], new["passed"], new["tests_run"]) == ("5.5.0", True, False, 1), new["output_tail"]
    [f] = new["failures"]
    assert f["test"] == "testShrinkTakesEffectOnlyWhenControllerAcceptsIt" and f["exception"] == "java.lang.AssertionError"
    # the SyncStateSet assertion, not a setup step: the local set shrank before the controller answered, and the SYNC
    # put stored only on the master was acknowledged
    assert re.fullmatch(r"SyncStateSet before the controller accepted the shrink to \[1\] \(a SYNC put stored only on "
                        r"the master meanwhile was answered PUT_OK\) expected:<\[1, 2\]> but was:<\[1\]>", f["message"])
    src = (next(ALL_ACK.rglob("AllAckInSyncStateSetShrinkTest.java"))).read_text().splitlines()
    assert f["at"].startswith("AllAckInSyncStateSetShrinkTest.java:")
    assert 'assertEquals("SyncStateSet before' in src[int(f["at"].rsplit(":", 1)[1]) - 1]
    # RocketMQ's own log says what the master did: the shrink notified, the put waited (5.3.3) or not (5.5.0)
    for rec, timeouts in ((old, 1), (new, 0)):
        store_log = (Path(rec["dir"]) / "logs" / "rocketmqlogs" / "store.log").read_text()
        assert "Notify the syncStateSet has been changed into [1]." in store_log
        assert store_log.count("transfer message to slave timeout") == timeouts, rec["version"]
