"""Bad input and a broken environment: one clear line, a non-zero exit, nothing left running."""
from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from conftest import cli, scenario_dict, write_scenario
from helpers import assert_nothing_left, started


def _first_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("rmqchaos: error:"))


@pytest.mark.fast
@pytest.mark.parametrize("body,where", [
    ("name: bad\ncluster:\n  namesrv:\n    prot: 9876\n", "bad.yaml:4: cluster.namesrv.prot: unknown key"),
    ("name: bad\ncluster:\n  brokers:\n    - name: broker-a\n      port: many\n", "bad.yaml:5: cluster.brokers[0].port:"),
    ("name: bad\ncluster:\n  namesrv:\n    jvm:\n      heap_mb: -128\n", "bad.yaml:5: cluster.namesrv.jvm.heap_mb:"),
])
def test_invalid_scenario_is_one_line_naming_file_line_and_key(tmp_path: Path, body: str, where: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(body)
    for args in (["cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd")],
                 ["run", str(f), "--out", str(tmp_path / "out")], ["validate", str(f)]):
        r = cli(*args)
        assert r.returncode != 0
        line = _first_line(r.stderr)
        assert where in line and str(f) in line, line
    assert not (tmp_path / "rd").exists() and not (tmp_path / "out").exists()


def test_port_in_use_is_named(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("busy", 31876, [31911, 31921]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 31911))
        s.listen()
        r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd"))
    assert r.returncode != 0
    assert "port 31911 (broker-a) is already in use" in _first_line(r.stderr)
    assert started(tmp_path / "rd") == []


def test_a_disk_too_full_for_a_broker_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """Stores on a disk above RocketMQ's 85 % (it deletes commit log files at once) or 90 % (it refuses
    every write): refused up front, not discovered as a run full of refused sends. A real small
    file system, filled."""
    import subprocess
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        f = write_scenario(tmp_path / "s.yaml", scenario_dict("fulldisk", 31876, [31911, 31921]))
        rd = small / "rd"
        rd.mkdir()
        (small / "fill").write_bytes(b"\0" * (7 * 1024 * 1024 + 600 * 1024))  # ~95 %
        r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(rd))
        assert r.returncode != 0
        line = _first_line(r.stderr)
        assert f"the disk under {rd} is" in line and "refuse every write above 90%" in line, line
        assert sum(x.startswith("rmqchaos: error:") for x in r.stderr.splitlines()) == 1
        assert started(rd) == []
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.mark.fast
def test_full_disk_thresholds_are_rocketmqs() -> None:
    from rmqchaos.machine.diskstats import full_disk_error
    assert full_disk_error("/x", 0.84) is None
    e85, e90 = full_disk_error("/x", 0.86), full_disk_error("/x", 0.93)
    assert e85 is not None and "86% full" in e85.message and "delete their oldest commit log files at once above 85%" \
        in e85.message
    assert e90 is not None and "refuse every write above 90%" in e90.message and "free space below 85%" in e90.hint


def _env_with_path(path: str) -> dict[str, str]:
    env = os.environ.copy()
    env.pop("JAVA_HOME", None)
    env["PATH"] = path
    return env


def test_missing_java_is_reported(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("nojava", 31876, [31911, 31921]))
    empty = tmp_path / "bin"
    empty.mkdir()
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd"), env=_env_with_path(str(empty)))
    assert r.returncode != 0
    line = _first_line(r.stderr)
    assert "java not found" in line and "JAVA_HOME" in line
    assert started(tmp_path / "rd") == []


def test_too_old_java_is_reported(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("oldjava", 31876, [31911, 31921]))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "java"  # stands in for an old JDK on PATH: only `java -version` is asked of it
    fake.write_text('#!/bin/sh\necho \'java version "1.7.0_80"\' >&2\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd"),
            env=_env_with_path(f"{bindir}:/usr/bin:/bin"))
    assert r.returncode != 0
    assert "Java 1.7.0_80, too old" in _first_line(r.stderr)
    assert started(tmp_path / "rd") == []


def test_broker_that_never_registers_is_named_with_its_log_tail(tmp_path: Path) -> None:
    # The namesrv frame limit of incident 002, turned down so far that every REGISTER_BROKER frame is
    # dropped (TooLongFrameException): the brokers run but never register.
    d = scenario_dict("noreg", 31876, [31911, 31921])
    d["cluster"]["namesrv"]["jvm"] = {"heap_mb": 128, "system_properties": {"com.rocketmq.remoting.frameMaxLength": 2048}}
    d["cluster"]["ready_timeout"] = "25s"
    f = write_scenario(tmp_path / "s.yaml", d)
    rd = tmp_path / "rd"
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(rd))
    assert r.returncode != 0
    line = _first_line(r.stderr)
    assert "broker-a did not become ready" in line or "broker-b did not become ready" in line, line
    assert "never registered" in line
    assert "--- tail of" in r.stderr and "broker.log" in r.stderr
    assert len(started(rd)) == 3
    assert_nothing_left(rd)


def _hostile_cases(tmp: Path) -> list[tuple[str, list[str], dict[str, str] | None, str]]:
    """(name, CLI args, env or None, what the one error line must say), each set up in `tmp`."""
    def scen(name: str, body: str) -> str:
        f = tmp / f"{name}.yaml"
        f.write_text(body)
        return str(f)
    out_file = tmp / "a-file"
    out_file.write_text("not a directory\n")
    corrupt = tmp / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "state.json").write_text('{"run_id": "x", "stages": {')
    ledgered = tmp / "ledgered-run"
    from pipeline.runs import create_run
    create_run(scen("ledgered", "name: ledgered\nload: {duration: 5s}\n"), ledgered)
    (ledgered / "ledgers").mkdir()
    (ledgered / "ledgers" / "send-w0-1.jsonl").write_text("")
    empty_bin = tmp / "empty-bin"
    empty_bin.mkdir(exist_ok=True)
    no_java = {**os.environ, "PATH": str(empty_bin)}
    no_java.pop("JAVA_HOME", None)
    bad_home = {**os.environ, "JAVA_HOME": str(tmp / "no-such-jdk")}
    return [
        ("port 65535", ["run", scen("p", "name: p\ncluster:\n  brokers: [{name: a, port: 65535}]\n")], None,
         "port 65535 also needs port+1 (65536, HA), beyond 65535"),
        ("slave port", ["validate", scen("s", "name: s\ncluster:\n  brokers: [{name: a, port: 65532, slave: {}}]\n")],
         None, "the slave's default port 65537"),
        ("recursive alias", ["run", scen("r", "name: r\nx: &a [*a]\n")], None, "recursive alias"),
        ("alias bomb", ["validate", scen("b", "a: &a [1,2,3,4,5,6,7,8,9,10]\n" + "".join(
            f"{n}: &{n} [{','.join(['*' + q] * 10)}]\n" for q, n in zip("abcd", "bcde")))], None, "alias bomb"),
        ("misspelt enum", ["run", scen("e", "name: e\ncluster:\n  broker_defaults:\n    config: "
                                           "{flushDiskType: SYNC_FLUSHH}\n")], None,
         "flushDiskType must be one of SYNC_FLUSH, ASYNC_FLUSH (got 'SYNC_FLUSHH')"),
        ("--out is a file", ["run", scen("o", "name: o\n"), "--out", str(out_file)], None,
         f"{out_file} exists and is not a directory"),
        ("corrupt state.json", ["analyze", str(corrupt)], None, "state.json is corrupt"),
        ("analyze without java", ["analyze", str(ledgered)], no_java, "java not found"),
        ("bad JAVA_HOME", ["cluster", "up", "--scenario", scen("j", "name: j\n"), "--run-dir", str(tmp / "jrd")],
         bad_home, f"JAVA_HOME={tmp / 'no-such-jdk'} has no executable bin/java"),
        ("stage on no run", ["stage", "load", str(tmp / "nothing")], None, "is not a run directory"),
    ]


@pytest.mark.fast
@pytest.mark.fast
@pytest.mark.parametrize("name,data,expect", [
    ("binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00name: x\n", "binary.yaml: not a scenario file (binary"),
    ("latin1.yaml", "name: x\ndescription: caf\u00e9\n".encode("latin-1"), "latin1.yaml:2: not UTF-8 text"),
    ("dur.yaml", b"name: x\nload: {duration: 40q}\n", "dur.yaml:2: load.duration: expected a duration"),
])
def test_a_scenario_file_that_is_not_text_or_not_utf8_is_one_line(tmp_path: Path, name: str, data: bytes,
                                                                 expect: str) -> None:
    f = tmp_path / name
    f.write_bytes(data)
    for args in (["validate", str(f)], ["run", str(f), "--out", str(tmp_path / "out")]):
        r = cli(*args)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and expect in lines[0] and str(f) in lines[0], r.stderr
        assert lines[0].count("(got ") <= 1, lines[0]  # no fragment said twice
    assert not (tmp_path / "out").exists()


def test_hostile_inputs_get_one_line_a_nonzero_exit_and_leave_nothing(tmp_path: Path) -> None:
    import time
    for name, args, env, expect in _hostile_cases(tmp_path):
        before = {p.name for p in tmp_path.iterdir()}
        t0 = time.monotonic()
        r = cli(*args, env=env, timeout=120)
        errors = [x for x in r.stderr.splitlines() if x.startswith("rmqchaos: error:")]
        assert r.returncode == 1, (name, r.returncode, r.stderr[-2000:])
        assert len(errors) == 1 and expect in errors[0], (name, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and r.stderr.count(expect) == 1, (name, r.stderr[-2000:])
        assert time.monotonic() - t0 < 60, name
        new = {p.name for p in tmp_path.iterdir()} - before
        assert new <= {"jrd"}, (name, new)  # no run directory for a run that never started
        assert not any(started(tmp_path / d) for d in new), name
