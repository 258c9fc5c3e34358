"""Shared fixtures. Tests run against a real RocketMQ (the jars `make setup` resolved).

- `cluster`: one session-scoped cluster for tests that only read it.
- `fresh_cluster`: a new cluster per test, for tests that break one.
Each uses its own ports, so they can coexist, all below 32768: outside Linux's ephemeral range
(ip_local_port_range 32768-60999), where any outgoing connection may hold one for a while; every test gets its own RMQCHAOS_HOME registry so
nothing here touches a developer's own clusters.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

import _outcomes

REPO = Path(__file__).resolve().parent.parent
RMQCHAOS = [sys.executable, "-m", "cli"]


def pytest_configure(config: pytest.Config) -> None:
    _outcomes.register(config)  # each session's outcomes and durations: .cache/test-runs/<UTC start>.json


def scenario_dict(name: str, ns_port: int, broker_ports: list[int], **extra: object) -> dict:
    d: dict = {
        "name": name,
        "cluster": {
            "namesrv": {"port": ns_port},
            "brokers": [{"name": f"broker-{chr(ord('a') + i)}", "port": p} for i, p in enumerate(broker_ports)],
            "ready_timeout": "90s",
            "stop_timeout": "3s",
        },
    }
    for k, v in extra.items():
        d[k] = v
    return d


def write_scenario(path: Path, d: dict) -> Path:
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*RMQCHAOS, *args], cwd=REPO, env=env or os.environ.copy(), capture_output=True,
                          text=True, timeout=timeout)


SHARED = ("cluster", "strict_cluster")  # session clusters, each stopped after its last user (_stop_after)
# each cluster fixture's (namesrv port, broker ports): tests/_groups.py keeps a module that names one
# of them on the worker of the fixture's users
CLUSTER_PORTS = {"cluster": (19876, [19911, 19921]), "strict_cluster": (23876, [23911, 23921]),
                 "fresh_cluster": (29876, [29911, 29921])}
_last_user: dict[str, str] = {}  # fixture -> node id of the last test that uses it
_stoppers: dict[str, Callable[[], None]] = {}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (make test): tests/_groups.py's groups. (pytest-xdist 3.8's own loadgroup
    puts a test's group into its node id, which pytest 9 no longer lets a plugin change.)"""
    if config.getoption("dist") == "loadgroup":
        from _groups import scheduler
        return scheduler(config, log)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast tier (pure logic, no JVM) runs first: a broken spec or schema fails in seconds. Then
    the modules that use a shared cluster, so those (four idle brokers) can stop early and leave
    both cores to the tests that start clusters of their own.

    Under pytest-xdist's `--dist loadgroup` (`make test`: two workers) the tests that may collide (a
    port, a shared cluster, the docker engine) are one group, run by one worker (tests/_groups.py),
    and the groups go out longest first."""
    shared = {it.module.__name__ for it in items if set(SHARED) & set(getattr(it, "fixturenames", ()))}
    items.sort(key=lambda it: (it.get_closest_marker("fast") is None, it.module.__name__ not in shared))
    # a worker's own `dist` is "no"; xdist keeps `--dist loadgroup` as its `loadgroup` option
    if getattr(config.option, "loadgroup", False):
        from _groups import longest_first
        longest_first(items)
    for it in items:
        for name in SHARED:
            if name in getattr(it, "fixturenames", ()):
                _last_user[name] = it.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for name, nodeid in _last_user.items():
        if item.nodeid == nodeid and name in _stoppers:
            _stoppers.pop(name)()


def _stop_after(name: str, stop: Callable[[], None]) -> Callable[[], None]:
    """`stop` runs once: after the last test that uses fixture `name`, or at the session's end."""
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            stop()
    _stoppers[name] = once
    return once


def _descendants() -> dict[int, float]:
    """This process's descendants: pid -> kernel start time (psutil's create_time), zombies left out."""
    import psutil
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out[p.pid] = p.create_time()
        except psutil.Error:
            continue
    return out


def _reap_new_zombies(before: dict[int, float]) -> None:
    """Collect the exit status of our children that ended during the test (not those of before: a
    session fixture's Popen may still want its own)."""
    import psutil
    for p in psutil.Process().children():
        try:
            if p.pid not in before and p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue


_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


@contextmanager
def reaped(grace: float = 5) -> Iterator[None]:
    """Fails (pytest.fail) if a process started inside outlives the block; each such process is
    killed first (SIGKILL, by pid and start time), so the rest of the suite runs on a clean machine.

    Inside, this process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process whose parent
    exits (the daemons `rmqchaos airflow start` leaves behind, the LocalExecutor workers of a scheduler
    that died) becomes our child rather than init's, so it is still among our descendants. Only those
    are ever ended, never a process found by name."""
    import ctypes
    import time

    import psutil
    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    before = _descendants()
    left: list[str] = []
    try:
        yield
    finally:
        deadline = time.monotonic() + grace  # room for a process in the middle of exiting
        while True:
            _reap_new_zombies(before)
            new = {pid: t for pid, t in _descendants().items() if before.get(pid) != t}
            if not new or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        procs = []
        for pid, t in sorted(new.items()):
            try:
                p = psutil.Process(pid)
                if p.create_time() != t:
                    continue
                left.append(f"pid {pid} (parent {p.ppid()}, cwd {_cwd(p)}): {' '.join(p.cmdline())[:300]}")
                p.kill()
                procs.append(p)
            except psutil.Error:
                continue
        psutil.wait_procs(procs, timeout=10)
        _reap_new_zombies(before)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, was.value, 0, 0, 0)
    if left:
        pytest.fail(f"{len(left)} process(es) started by the test outlived it (now killed):\n" + "\n".join(left),
                    pytrace=False)


@pytest.fixture
def no_survivors() -> Iterator[None]:
    """The test fails if a process it started outlives it (`reaped`): a module opts in with
    pytestmark = pytest.mark.usefixtures("no_survivors")."""
    with reaped():
        yield


def _cwd(p: Any) -> str:
    try:
        return p.cwd()
    except Exception:  # psutil.Error, or a cwd under a deleted directory
        return "?"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("rmqchaos-home")
    monkeypatch.setenv("RMQCHAOS_HOME", str(home))
    monkeypatch.setenv("RMQCHAOS_RUNS", str(home / "runs"))


def _start(tmp: Path, d: dict):
    from cluster import get_backend
    from pipeline.stages import down, up
    from pipeline.runs import create_run

    f = write_scenario(tmp / "scenario.yaml", d)
    run = create_run(f, tmp / "run", mode="owned")
    try:
        up.run(run)
    except BaseException:
        down.run(run)
        raise
    return run, get_backend(run)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A shared 2-group cluster (namesrv 19876, brokers 19911/19921) for tests that only read."""
    from pipeline.stages import down
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("session-home")
    mp.setenv("RMQCHAOS_HOME", str(home))
    run, c = _start(tmp_path_factory.mktemp("session-cluster"), scenario_dict("session", *CLUSTER_PORTS["cluster"]))
    stop = _stop_after("cluster", lambda: down.run(run))
    yield c
    stop()
    mp.undo()


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator:
    """A cluster of its own (namesrv 29876, brokers 29911/29921) for a test that breaks it."""
    from pipeline.stages import down
    run, c = _start(tmp_path, scenario_dict("fresh", *CLUSTER_PORTS["fresh_cluster"]))
    yield c
    down.run(run)


@pytest.fixture(scope="session")
def strict_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A cluster that answers with errors (ports 23876/23911/23921): auto-create off, a 64 KiB message
    limit, one send thread failing fast on any wait in its queue (waitTimeMillsInSendQueue 0:
    BrokerFastFailure rejects every queued request every 10 ms), and SYNC_FLUSH with a 1 ms
    syncFlushTimeout, so stored messages are answered FLUSH_DISK_TIMEOUT. Tests may pause and
    resume its brokers, never kill them."""
    from pipeline.stages import down
    from rmqclient.admin import AdminClient
    mp = pytest.MonkeyPatch()
    mp.setenv("RMQCHAOS_HOME", str(tmp_path_factory.mktemp("strict-home")))
    d = scenario_dict("strict", *CLUSTER_PORTS["strict_cluster"])
    d["cluster"]["broker_defaults"] = {"config": STRICT_BROKER_CONFIG}
    run, c = _start(tmp_path_factory.mktemp("strict-cluster"), d)
    AdminClient(c.namesrv_addr).create_topic_everywhere("T_STRICT", queues=4)
    stop = _stop_after("strict_cluster", lambda: down.run(run))
    yield c
    stop()
    mp.undo()


STRICT_BROKER_CONFIG = {"autoCreateTopicEnable": False, "maxMessageSize": 65536, "sendMessageThreadPoolNums": 1,
                        "waitTimeMillsInSendQueue": 0, "flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": 1}


def load_run(tmp: Path, cluster, load: dict, consumers: dict | None = None, name: str = "load"):
    """A run directory whose scenario drives `load` through an already running cluster fixture."""
    from pipeline.runs import attach_run
    d = yaml.safe_load((cluster.run.path / "scenario.yaml").read_text())
    d["name"] = name
    d["checks"] = {}
    d["load"] = load
    if consumers is not None:
        d["consumers"] = consumers
    else:
        d.pop("consumers", None)  # the default: one consumer acking everything
    f = write_scenario(tmp / f"{name}.yaml", d)
    run = attach_run(f, tmp / f"run-{name}", cluster.run)
    # what `up` would have written: versions and the rendered and effective broker configs
    shutil.copy(cluster.run.path / "versions.json", run.path / "versions.json")
    for conf in [*cluster.run.path.glob("cluster/*/broker.conf"), *cluster.run.path.glob("cluster/*/effective.conf")]:
        (run.path / "cluster" / conf.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(conf, run.path / "cluster" / conf.parent.name / conf.name)
    return run


@pytest.fixture
def kept_spark() -> Any:
    """The suite's local Spark session: analysis/ledgers/session.py keeps one per process, so every analysis
    in this process after the first skips Spark's start-up and runs on a warm JVM (a cold `analyze`
    took ~35 s here against ~11 s warm). Stopped at exit, or when a test asks for another master."""
    from analysis.ledgers.session import spark_session
    return spark_session()


def run_here(scenario_file: Path, out: Path, timeout: float = 900) -> tuple[Path, dict[str, Any]]:
    """A whole run, as `rmqchaos run FILE --out OUT` makes it (pipeline.scenario.run_scenario, every
    stage), in this process: its analysis gets the kept session (`kept_spark`). The CLI's own path
    (its exit code, its output, a signal to it) is tested end to end in test_lifecycle.py and
    test_interruptions.py. Returns the run directory and its summary.json; nothing may be left running."""
    import json
    import signal
    from pipeline.scenario import run_scenario
    from pipeline.stages.stage import error_line
    from helpers import assert_nothing_left

    def too_long(*_: Any) -> None:
        raise TimeoutError(f"the run took over {timeout:.0f} s")
    prev = signal.signal(signal.SIGALRM, too_long)  # bounded like cli()'s timeout; down still runs
    signal.alarm(int(timeout))
    try:
        o = run_scenario(scenario_file, out)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, prev)
    assert o.failure is None, error_line(o.failure)
    assert_nothing_left(out)
    return out, json.loads((out / "analysis" / "summary.json").read_text())


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    """The engine the tests use: a dockerd this checkout runs (started here, stopped at the end, if
    it was not running), or the one DOCKER_HOST names; the image built offline if it is missing."""
    import docker
    from cluster.plan.compose import image_tag
    from cluster.container import engine as eng, image
    from rmqchaos.errors import UserError
    from rmqchaos.spec import load_scenario
    ours = not os.environ.get("DOCKER_HOST") and eng.started_here() is None
    if ours:
        eng.up()
    try:
        c = eng.client()
        try:
            image.check_current(c.images.get(image_tag(load_scenario(REPO / "scenarios" / "smoke.yaml")
                                                       .cluster.rocketmq_version)))
        except (docker.errors.ImageNotFound, UserError):  # missing, or built by an older rmqchaos
            image.build()
        yield c
        assert not [n.name for n in c.networks.list() if n.attrs.get("Driver") not in ("host", "null")]
        assert not c.containers.list(all=True, filters={"label": "rmqchaos.run_id"})
    finally:
        if ours:
            eng.down()
            assert eng.started_here() is None and eng.mounts() == []  # nothing left behind, not even a mount
