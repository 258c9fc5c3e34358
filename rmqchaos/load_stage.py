"""The load stage: create the load's topics, start the consumers, run the Locust load in a process
of its own, let the consumers drain until nothing new arrives for `settle`, stop them."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable

from cluster.local import LocalCluster
from cluster.procs import ProcRecord, now_ms, starttime
from cluster.rocketmq_tools import _child_setup
from rmqchaos import paths
from rmqchaos.consumer import ConsumerOptions, JavaConsumer
from rmqchaos.errors import UserError
from rmqchaos.ledgers import receive_ledger_path
from rmqchaos.progress import say
from rmqchaos.rundir import RunDir
from rmqchaos.spec import Scenario


def create_topics(c: LocalCluster, topics: list[str], queues: int, timeout: float = 30.0) -> None:
    admin = c.admin(timeout=15)  # a just-started broker on a starved 2-core host took >3 s to read one
    masters = set(admin.master_addrs())
    for t in topics:
        admin.create_topic_everywhere(t, queues=queues)
    deadline = time.monotonic() + timeout
    for t in topics:  # brokers register new topics with namesrv at once; wait until they route
        while {q["brokerName"] for q in (admin.topic_route(t) or {}).get("queueDatas", [])} < masters:
            if time.monotonic() > deadline:
                raise UserError(f"topic {t} does not route to every broker after {timeout:.0f}s",
                                "check `rmqchaos cluster status`")
            time.sleep(0.25)


def start_consumers(run: RunDir, c: LocalCluster, s: Scenario) -> list[JavaConsumer]:
    assert s.consumers is not None
    out: list[JavaConsumer] = []
    default_topics = s.load.topics() if s.load else []
    try:
        for inst in s.consumers.instances:
            topics = inst.topics or default_topics
            opts = ConsumerOptions(group=inst.group, topics=topics, mode=inst.mode, batch_size=inst.batch_size,
                                   delay_ms=inst.delay_ms, threads=inst.threads, consumer_id=inst.id,
                                   heap_mb=inst.heap_mb,
                                   duration_s=(s.load.duration if s.load else 0) + s.consumers.drain_timeout + 600)
            jc = JavaConsumer(c.namesrv_addr, opts, receive_ledger_path(run.path, inst.id), run.path / "consumers",
                              run_id=run.run_id, rocketmq_version=s.cluster.rocketmq_version,
                              cgroup=c.tools_cgroup(), proc_log=run.processes)
            say(f"consumer {inst.id}: group {inst.group}, topics {', '.join(topics)}, mode {inst.mode}")
            out.append(jc.start())
    except BaseException:
        stop_consumers(out)
        raise
    return out


def drain(consumers: list[JavaConsumer], settle: float, timeout: float,
          lag: Callable[[], int | None] | None = None) -> int:
    """Wait until every consumer group has consumed everything the brokers hold (lag 0: a restarted
    broker's queues come back to a consumer only after its next route poll and rebalance, up to
    ~50 s) and no new delivery was recorded for `settle` seconds; at most `timeout`."""
    t0 = time.monotonic()
    last, last_change, last_say, left = -1, t0, t0, None
    while True:
        n = sum(c.deliveries() for c in consumers)
        now = time.monotonic()
        if n != last:
            last, last_change = n, now
        if now - last_change >= settle:
            left = lag() if lag else 0
            if left == 0:
                say(f"drain: nothing left to consume and no new delivery for {settle:g}s; {n} deliveries")
                return n
        if now - t0 > timeout:
            say(f"drain: not drained after {timeout:g}s (lag {left}); stopping the consumers with {n} deliveries")
            return n
        if now - last_say >= 5:
            say(f"drain: {n} deliveries so far" + (f", {left} stored messages not consumed yet" if left else ""))
            last_say = now
        time.sleep(0.25)


def group_lag(c: LocalCluster, s: Scenario) -> Callable[[], int | None]:
    """Total lag of every consumer instance's group on its topics; None while a broker does not answer."""
    from rmqclient.admin import RemotingError
    assert s.consumers is not None
    default_topics = s.load.topics() if s.load else []

    def total() -> int | None:
        try:
            admin = c.admin()
            return sum(sum(admin.consumer_lag(i.group, i.topics or default_topics).values())
                       for i in s.consumers.instances)  # type: ignore[union-attr]
        except (RemotingError, OSError):
            return None
    return total


def stop_consumers(consumers: list[JavaConsumer]) -> None:
    for jc in consumers:
        if jc.running():
            jc.stop()


def run_loadgen(run: RunDir, c: LocalCluster, ledger: bool | None = None) -> None:
    """`python -m loadgen RUN_DIR` as a child in the run's tools cgroup, recorded for reaping."""
    s = run.scenario()
    assert s.load is not None
    cmd = [sys.executable, "-m", "loadgen", str(run.path)]
    if ledger is not None:
        cmd += ["--ledger", "on" if ledger else "off"]
    cg = c.tools_cgroup()
    env = dict(os.environ, PYTHONPATH=str(paths.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env, preexec_fn=_child_setup(cg.procs_files()))
    run.processes.record_start(ProcRecord(node="loadgen", pid=p.pid, starttime=starttime(p.pid) or 0, cmd=cmd,
                                          cgroup=cg.rel, ports=[], started_ms=now_ms()))
    bound = s.load.duration + s.load.timeout * 4 + 120
    try:
        rc = p.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise UserError(f"the load process did not end within {bound:.0f}s", "see its output above") from None
    finally:
        run.processes.record_exit("loadgen", p.pid, f"exit {p.returncode}")
    if rc != 0:
        raise UserError(f"the load process failed (exit {rc})", "see its output above")


def run_load_stage(run: RunDir, c: LocalCluster, ledger: bool | None = None) -> None:
    s = run.scenario()
    if s.load is None:
        say("no load configured")
        return
    create_topics(c, s.load.topics(), s.load.queues)
    (run.path / "ledgers").mkdir(exist_ok=True)
    consumers = start_consumers(run, c, s) if s.consumers else []
    faults = None
    try:
        t0 = now_ms()
        (run.path / "load").mkdir(exist_ok=True)
        (run.path / "load" / "started").unlink(missing_ok=True)
        if s.faults:
            from chaos.scheduler import FaultScheduler
            faults = FaultScheduler(run, c, s.faults)
            faults.start()
        try:
            run_loadgen(run, c, ledger)
        finally:
            if faults is not None:
                faults.stop()
                faults.join(timeout=max(f.timeout for f in s.faults) + 60)
            run.event("load", s.load.topic, t0, now_ms(), "done", rate=s.load.rate, users=s.load.users,
                      policy=s.load.policy.kind)
        if consumers:
            t1 = now_ms()
            n = drain(consumers, s.consumers.settle, s.consumers.drain_timeout,  # type: ignore[union-attr]
                      group_lag(c, s))
            run.event("drain", "consumers", t1, now_ms(), "done", deliveries=n)
    finally:
        stop_consumers(consumers)
    if faults is not None:
        faults.check()  # after the drain: what the ledgers hold is complete either way

