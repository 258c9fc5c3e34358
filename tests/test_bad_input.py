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
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("busy", 49876, [49911, 49921]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 49911))
        s.listen()
        r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd"))
    assert r.returncode != 0
    assert "port 49911 (broker-a) is already in use" in _first_line(r.stderr)
    assert started(tmp_path / "rd") == []


def _env_with_path(path: str) -> dict[str, str]:
    env = os.environ.copy()
    env.pop("JAVA_HOME", None)
    env["PATH"] = path
    return env


def test_missing_java_is_reported(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("nojava", 49876, [49911, 49921]))
    empty = tmp_path / "bin"
    empty.mkdir()
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "rd"), env=_env_with_path(str(empty)))
    assert r.returncode != 0
    line = _first_line(r.stderr)
    assert "java not found" in line and "JAVA_HOME" in line
    assert started(tmp_path / "rd") == []


def test_too_old_java_is_reported(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "s.yaml", scenario_dict("oldjava", 49876, [49911, 49921]))
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
    d = scenario_dict("noreg", 49876, [49911, 49921])
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
