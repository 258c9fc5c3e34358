"""The receive side of a load: start the scenario's Java consumers before the load, drain them after
it (until every group's lag is 0 and nothing new arrived for `settle`), stop them; and the load
process itself (`python -m loadgen RUN_DIR`) as a recorded child of the run."""
from __future__ import annotations

import functools
import os
import sys
import time
from typing import Callable

from cluster.backend import ClusterBackend
from cluster.plan.nodes import addresses
from loadgen import grpc_load
from loadgen.consumer import ConsumerOptions, GrpcOptions, JavaConsumer
from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.ledger.schema import ledger_files, receive_ledger_path
from rmqchaos.machine.procs import now_ms
from rmqchaos.progress import say
from rmqchaos.run.rundir import RunDir
from rmqchaos.ledger.seal import seal_closed
from rmqchaos.spec import ConsumerInstance, Scenario
from rmqclient.admin import RemotingError


def _consumers(run: RunDir, c: ClusterBackend, s: Scenario) -> list[JavaConsumer]:
    """The scenario's consumer instances (not started)."""
    assert s.consumers is not None
    default_topics = s.load.topics() if s.load else []
    # a detached run's consumers outlive the process that starts them (a DAG's load task): the
    # drain stage, maybe in another process, stops them; `down` reaps them if it never runs
    launcher = functools.partial(c.spawn_client, outlive=run.state().get("mode") == "detached")
    out, at = [], addresses(s)
    for inst in s.consumers.instances:
        opts = ConsumerOptions(group=inst.group, topics=inst.topics or default_topics, mode=inst.mode, listener=inst.listener,
                               batch_size=inst.batch_size, delay_ms=inst.delay_ms, threads=inst.threads,
                               max_reconsume_times=inst.max_reconsume_times,
                               route_refresh_ms=round(s.consumers.route_refresh * 1000),
                               consumer_id=inst.id, heap_mb=inst.heap_mb, address=at[f"consumer-{inst.id}"],
                               faketime=inst.faketime, grpc=_grpc_options(c, s, inst),
                               duration_s=(s.load.duration if s.load else 0) + s.consumers.drain_timeout + 600)
        out.append(JavaConsumer(c.namesrv_addr, opts, receive_ledger_path(run.path, inst.id), run.consumers_dir,
                                run_id=run.run_id, rocketmq_version=s.cluster.dist,
                                launcher=launcher, proc_log=c.run.processes))
    return out


def _grpc_options(c: ClusterBackend, s: Scenario, inst: ConsumerInstance) -> GrpcOptions | None:
    g = inst.grpc
    if g is None:
        return None
    return GrpcOptions(endpoints=c.proxy_grpc_addr(), kind=g.kind, invisible_ms=round(g.invisible * 1000),
                       await_ms=round(g.long_polling * 1000),
                       change_ms=round(g.change_invisible * 1000) if g.change_invisible else 0,
                       last_ack_delay_ms=round(g.last_ack_delay * 1000),
                       client_version=s.cluster.proxy.client_version)


def settle_of(s: Scenario) -> float:
    """How long the drain waits for no new delivery. A POP consumer's message that was not acked comes
    back only after its invisible time (plus the broker's revive scan), and the group's lag cannot see
    it (the pop moved the offset): with gRPC SimpleConsumers the settle covers the longest invisible
    time plus `consumers.revive_wait` (60 s by default: 39 s was seen on an idle broker)."""
    assert s.consumers is not None
    inv = [(i.grpc.change_invisible or 0.0) + i.grpc.invisible for i in s.consumers.instances
           if i.grpc is not None and i.grpc.kind == "simple"]
    return max([s.consumers.settle] + [x + s.consumers.revive_wait for x in inv])


def start_consumers(run: RunDir, c: ClusterBackend, s: Scenario) -> list[JavaConsumer]:
    """Every consumer of the scenario, started side by side (a JVM with the client takes ~5 s to start on
    2 cores; one after another, a run's two consumers took 14 s), returned once each has started."""
    out: list[JavaConsumer] = []
    try:
        for jc in _consumers(run, c, s):
            o = jc.opts
            say(f"consumer {o.consumer_id}: group {o.group}, topics {', '.join(o.topics)}, mode {o.mode}")
            out.append(jc.spawn())
        for jc in out:
            jc.wait_started()
    except BaseException:
        stop_consumers(out)
        raise
    return out


def started_consumers(run: RunDir, c: ClusterBackend, s: Scenario) -> list[JavaConsumer]:
    """The consumers an earlier stage started and nothing has stopped yet. Their records are where
    the backend's spawn helper writes them: the cluster's run, which for a run attached to another
    run's cluster is that run, shared with other attached runs, so a record is this run's when its
    JVM's user.home is in this run's consumers directory (JavaConsumer.home)."""
    log = c.run.processes
    exited = log.exited()
    mine = f"-Duser.home={run.consumers_dir}"
    out = []
    for jc in _consumers(run, c, s):
        recs = [r for r in log.starts() if r.node == jc.node
                and any(a == mine or a.startswith(mine + "/") for a in r.cmd)]
        if recs and (recs[-1].node, recs[-1].pid) not in exited:
            out.append(jc.attach(recs[-1]))
    return out


def drain(consumers: list[JavaConsumer], settle: float, timeout: float,
          lag: Callable[..., int | None] | None = None,
          out_of_reach: Callable[[], list[str]] | None = None,
          not_before: float | None = None) -> tuple[int, bool, list[str]]:
    """Wait until every consumer group has consumed everything the brokers hold (lag 0: a restarted
    broker's queues come back to a consumer only after its next route poll and rebalance, up to
    ~50 s) and no new delivery was recorded for `settle` seconds; at most `timeout`. Stops early,
    not drained, when broker groups have no running node (`out_of_reach`: after the load nothing
    restarts them, so their stored messages stay out of reach) and the other groups' lag
    (`lag(skip)`) is 0. `not_before` (wall clock): a timer load's last due time plus its wait; lag
    cannot see a message still in the brokers' timer wheel or delay queues, so the drain does not stop
    before then, and `timeout` counts from then. Returns (deliveries, drained, the groups out of reach)."""
    hold = max(0.0, (not_before or 0.0) - time.time())
    t0 = time.monotonic() + hold
    last, last_change, last_say, left = -1, t0, time.monotonic(), None
    while True:
        n = sum(c.deliveries() for c in consumers)
        now = time.monotonic()
        if n != last:
            last, last_change = n, now
        if now < t0:  # a timer load: messages may still be due
            if now - last_say >= 5:
                say(f"drain: {n} deliveries so far; waiting {t0 - now:.0f}s more for scheduled messages to be due")
                last_say = now
            time.sleep(0.25)
            continue
        if now - last_change >= settle:
            left = lag() if lag else 0
            if left == 0:
                say(f"drain: nothing left to consume and no new delivery for {settle:g}s; {n} deliveries")
                return n, True, []
            gone = out_of_reach() if left is None and lag and out_of_reach else []
            if gone and lag(frozenset(gone)) == 0:
                say(f"drain: broker group(s) {', '.join(gone)} have no running node, so their stored messages are "
                    f"out of reach; no new delivery for {settle:g}s; stopping the consumers with {n} deliveries")
                return n, False, gone
        if now - t0 > timeout:
            say(f"drain: not drained after {timeout:g}s (lag {left}); stopping the consumers with {n} deliveries")
            return n, False, []
        if now - last_say >= 5:
            say(f"drain: {n} deliveries so far" + (f", {left} stored messages not consumed yet" if left else ""))
            last_say = now
        time.sleep(0.25)


def group_lag(c: ClusterBackend, s: Scenario) -> Callable[..., int | None]:
    """Total lag of every consumer instance's group on its topics; None (unknown) while a broker does
    not answer or a broker group of the cluster has no master in a topic's route: a dead broker drops
    out of the route, and its stored messages must not count as drained (they are only out of reach).
    `total(skip)` leaves the broker groups in `skip` out.

    A group read only through the proxy (POP) is left out: the broker keeps a POP group's offsets
    itself, and after a broker kill -9 one held a lag of 937 with every acknowledged key delivered
    (grpc-broker-kill); such a group's drain rests on `settle_of` (its invisible time and more
    without a new delivery), and the analysis looks any key never delivered up in the stores."""
    assert s.consumers is not None
    default_topics = s.load.topics() if s.load else []
    groups = _broker_groups(c)
    pop_only = {i.group for i in s.consumers.instances} - {i.group for i in s.consumers.instances if i.grpc is None}

    def total(skip: frozenset[str] = frozenset()) -> int | None:
        try:
            admin = c.admin()
            n = 0
            for g in sorted({i.group for i in s.consumers.instances} - pop_only):  # type: ignore[union-attr]
                topics = sorted({t for i in s.consumers.instances if i.group == g  # type: ignore[union-attr]
                                 for t in i.topics or default_topics})
                n += sum(admin.consumer_lag(g, topics, groups - skip, set(skip)).values())
                # what was sent back and is due again: on whichever brokers hold the group's %RETRY%
                # topic (a heartbeat or a send-back creates it), not required on every one
                n += sum(admin.consumer_lag(g, [f"%RETRY%{g}"], None, set(skip)).values())
            return n
        except (RemotingError, OSError):
            return None
    return total


def _broker_groups(c: ClusterBackend) -> set[str]:
    return {p.broker_name for p in c.masters() if p.broker_name}


def dead_groups(c: ClusterBackend) -> Callable[[], list[str]]:
    """The broker groups none of whose broker nodes is running."""
    groups = sorted(_broker_groups(c))

    def gone() -> list[str]:
        try:
            alive = {n.plan.broker_name for n in c.nodes() if n.plan.is_broker and n.running()}
        except Exception:  # noqa: BLE001 - an engine that does not answer: nothing known to be gone
            return []
        return [g for g in groups if g not in alive]
    return gone


def stop_consumers(consumers: list[JavaConsumer], run: RunDir | None = None) -> None:
    """SIGTERM each (offsets persisted, ledger fsync'd); `consumer_stop` events say how each ended
    (the analysis trusts a receive ledger only from a consumer that stopped cleanly)."""
    for jc in consumers:
        t0 = now_ms()
        how = jc.stop().get("how", "not-started") if jc.pid is not None else "not-started"
        if run is not None:
            run.event("consumer_stop", jc.node, t0, now_ms(), how, deliveries=jc.deliveries())
        if how == "terminated" and jc.out.is_file():  # its writer closed: seal the journal now
            seal_closed([jc.out], "receive")


def run_loadgen(run: RunDir, c: ClusterBackend, ledger: bool | None = None,
                beside: Callable[[Callable[[], bool]], None] | None = None) -> None:
    """`python -m loadgen RUN_DIR` as a recorded child of the run (the backend's client side).
    `beside(running)` runs once the process is started (the serving gate, then the faults); an
    exception from it ends the load at once and is raised."""
    import subprocess
    s = run.scenario()
    assert s.load is not None
    if s.load.client == "grpc":  # the 5.x Java client through the proxy, from the producers' address
        cmd = grpc_load.command(run, c, s, user_home=run.load_dir)
        env = {**os.environ, "RMQCHAOS_NODE_ADDR": addresses(s)["producers"], "LD_PRELOAD": str(paths.loopback_shim())}
    else:
        cmd = [sys.executable, "-m", "loadgen", str(run.path)]
        if ledger is not None:
            cmd += ["--ledger", "on" if ledger else "off"]
        env = paths.module_env()
    p = c.spawn_client("loadgen", cmd, cwd=run.path, env=env)
    bound = s.load.duration + s.load.timeout * 4 + 120
    t0 = time.monotonic()
    try:
        if beside is not None:
            beside(lambda: p.poll() is None)
        rc = p.wait(timeout=max(1.0, bound - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise UserError(f"the load process did not end within {bound:.0f}s", "see its output above") from None
    except BaseException:  # interrupted, or the gate refused: end the load now (it ignores SIGINT; SIGTERM ends it)
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        raise
    finally:
        run.processes.record_exit("loadgen", p.pid, f"exit {p.returncode}")
    if rc != 0:
        raise UserError(f"the load process failed (exit {rc})", "see its output above")
    seal_closed(ledger_files(run.path, "send"), "send")  # every producer closed its journal
