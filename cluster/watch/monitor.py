"""The cluster monitor: once a second while a run's cluster is up, what RocketMQ itself says about
its topics, groups, backlog and routes, appended to `monitor/cluster.jsonl` on the run's clock.

Started by `up` as a client process of the run (so `down` reaps it, by PID); `python -m
cluster.watch.monitor RUN_DIR`. Each sample asks every broker of the plan directly (not through namesrv's
route: a broker that left the route is exactly what must still be seen), and namesrv separately:

- `namesrv`: whether it answers, its topics by type, the broker groups it lists;
- `brokers[node]`: whether it answers, registered (namesrv lists it at its address), routed (the
  load's topic routes to its group), its own topics by type and subscription groups, and from its
  log the registrations to namesrv completed/failed so far and the last of each;
- `frame_errors`: frames namesrv refused as too long so far (its remoting.log; 4.x: namesrv.log),
  the last one's length and limit, and the count per namesrv (`by_namesrv`);
- `namesrvs` (several namesrvs only): the broker groups each lists (null: it did not answer); a
  broker's `registered` is then "listed by any", so out of the route means out of every namesrv's;
- `brokers[node].commit_max`: the end of its commit log (runtime info's `commitLogMaxOffset`), on
  masters and slaves: a slave's distance behind its master is their difference;
- `brokers[node].delayed`: messages waiting in the broker's delay levels (a message sent back for
  a later retry sits there, in no group's backlog, until its time);
- `backlog[group]`: per topic (the load's, and `%RETRY%<group>`) the messages stored but not yet
  consumed (max offset minus committed offset, summed over queues), the `%RETRY%` messages stored
  so far, and per consumer instance its lag on the group's own topics: the queues RocketMQ's
  default allocation (AllocateMessageQueueAveragely) gives it among the group's online clients;
- `links` (only in a scenario with `partition` or `link` faults): {"<from> -> <to>": rtt_ms or null}
  for every link those faults name (cluster/net/roundtrip.py `fault_links`: a partition's cross-group pairs
  where one side listens, a link fault's from -> to), member names as keys: one PROBE_CODE round trip
  on a fresh connection from the client's own address to the server's remoting port, so the fault's
  iptables rules and proxies apply to it; null when nothing answered within 0.5 s. The probes run
  concurrently with the rest of the sample, so a cut link does not stretch it;
- the brokers are asked all at once, each request with ASK_TIMEOUT_S (2 s): a SIGSTOPped broker
  stretches a sample to about 2 s (a dead one refuses at once);
- `groups[broker group]`: its mode, master (elected by the controllers, or namesrv's id 0), master
  epoch and SyncStateSet (controller mode), the master namesrv routes to, and each replica's own
  view: up, role, commit-log max offset (cluster/watch/groups.py; asked concurrently with the rest), and
  in controller mode the confirm offset each replica last sent the controllers in its heartbeat
  (cluster/watch/heartbeats.py: read off lo by a tcpdump the monitor starts as a client of the run;
  `heartbeat_tap_error` says when it could not).

A sample that cannot ask something records it as null: the monitor never stops the run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.watch.groups import GroupSampler
from cluster.watch.heartbeats import HeartbeatTap
from cluster.plan.nodes import NodePlan, controller_addrs
from cluster.net.roundtrip import fault_links, probe_all
from cluster.plan.rmqlog import line_ms, log_dir
from rmqchaos.rocketmq.dist import major
from rmqchaos.run.rundir import RunDir
from rmqclient.admin import AdminClient, RemotingError

INTERVAL_S = 1.0
# per request. Not shorter: on this 2-core host under load a live broker's answer can take a second
# (a shorter timeout called it down), and one rewriting a huge topic table must count as up (a route
# outage is a broker namesrv dropped while it answered). The asks run concurrently, so a SIGSTOPped
# node stretches a sample to about this once; a dead one refuses at once.
ASK_TIMEOUT_S = 2.0
SYSTEM_TOPICS = {"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "SCHEDULE_TOPIC_XXXX",
                 "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "rmq_sys_REVIVE_LOG", "rmq_sys_SYNC_BROKER_MEMBER"}
# broker.log (BrokerOuterAPI.registerBrokerAll: 5.x's words, then 4.x's) and namesrv's remoting.log
# (NettyDecoder; 4.x logs it to namesrv.log)
REG_OK = ("Registering current broker to name server completed", "]to name server ")
REG_FAILED = ("Failed to register current broker to name server", "registerBroker Exception")
# a broker's topic table over this many topics is read whole at most every BIG_TABLE_EVERY_S (incident
# 002's 71,000 topics are a 16 MiB answer: once a second per node would take the host's CPU)
BIG_TABLE, BIG_TABLE_EVERY_S = 20_000, 15.0
TOO_LONG = re.compile(r"TooLongFrameException: Adjusted frame length exceeds (\d+): (\d+)")


def topic_type(topic: str) -> str:
    if topic.startswith("%RETRY%"):
        return "retry"
    if topic.startswith("%DLQ%"):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "RMQ_SYS_", "%SYS%")) or topic.startswith("rmqchaos_sys"):
        return "system"
    # a broker's own topic (its name, its cluster's name) is a system topic too: handled by the caller
    return "normal"


def by_type(topics: list[str], own: set[str]) -> dict[str, int]:
    out = {"normal": 0, "retry": 0, "dlq": 0, "system": 0}
    for t in topics:
        out["system" if t in own else topic_type(t)] += 1
    return out


def allocate(queues: list[tuple[str, int]], clients: list[str], me: str) -> list[tuple[str, int]]:
    """RocketMQ's AllocateMessageQueueAveragely: `me`'s share of the sorted queues among the sorted
    client ids (rocketmq-client .../rebalance/AllocateMessageQueueAveragely.java)."""
    mq, cids = sorted(queues), sorted(clients)
    if me not in cids or not mq:
        return []
    i, n, k = cids.index(me), len(mq), len(cids)
    mod = n % k
    size = 1 if n <= k else (n // k + 1 if mod > 0 and i < mod else n // k)
    start = i * size if mod > 0 and i < mod else i * size + mod
    return [mq[(start + j) % n] for j in range(min(size, n - start))] if start < n else []


class LogTail:
    """New complete lines of a growing file since the last call (from its start again when the
    file was rolled over: a new inode, or shorter than what was read)."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos, self.rest, self.inode = path, 0, b"", 0

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_ino != self.inode or st.st_size < self.pos:
                    self.inode, self.pos, self.rest = st.st_ino, 0, b""
                f.seek(self.pos)
                data = f.read(8 << 20)
        except OSError:
            return []
        self.pos += len(data)
        data = self.rest + data
        *done, self.rest = data.split(b"\n")
        return [d.decode("utf-8", "replace") for d in done]


class Monitor:
    def __init__(self, run: RunDir) -> None:
        from cluster import get_backend  # the plan every backend renders, and its namesrv helpers

        self.run = run
        self.cluster = get_backend(run)
        s = self.cluster.scenario
        self.nodes = [p for p in self.cluster.plans.values() if p.is_broker]
        self.admin = AdminClient(self.cluster.namesrv_addr, timeout=ASK_TIMEOUT_S)
        self.broker_pool = ThreadPoolExecutor(max(1, min(32, len(self.nodes))), "broker")
        self.load_topics = s.load.topics() if s.load else []
        self.groups: dict[str, list[str]] = {}
        for c in (s.consumers.instances if s.consumers else []):
            self.groups.setdefault(c.group, [])
            for t in c.topics or self.load_topics:
                if t not in self.groups[c.group]:
                    self.groups[c.group].append(t)
        self.own = {s.cluster.name} | {b.name for b in s.cluster.brokers}
        logs = run.path / "cluster"
        self.reg_tails = {p.name: LogTail(log_dir(logs, p.name) / "broker.log") for p in self.nodes}
        self.reg = {p.name: {"ok": 0, "failed": 0, "last_ok_ms": None, "last_failed_ms": None} for p in self.nodes}
        ns_log = "namesrv.log" if major(s.cluster.rocketmq_version) == 4 else "remoting.log"
        self.namesrvs = [p.name for p in self.cluster.namesrv_nodes()]
        self.frame_tails = {n: LogTail(log_dir(logs, n) / ns_log) for n in self.namesrvs}
        self.frames: dict[str, Any] = {"count": 0, "last_length": None, "limit": None, "last_ms": None,
                                       "by_namesrv": dict.fromkeys(self.namesrvs, 0)}
        self.frame_line_ms: dict[str, int | None] = dict.fromkeys(self.namesrvs)
        self.tables: dict[str, tuple[float, dict[str, dict[str, Any]]]] = {}  # node -> (read at, big table)
        self.ns_topics: tuple[float, dict[str, int]] = (0.0, {})
        self.links = fault_links(s)  # none without network faults: no probes, no `links` field
        self.pool = ThreadPoolExecutor(min(32, len(self.links)), "probe") if self.links else None
        ctl = controller_addrs(s)
        # the confirm offsets of controller-mode replicas, from their heartbeats (cluster/watch/heartbeats.py);
        # started here, in the main thread, which tcpdump dies with
        self.group_sampler = GroupSampler(self.cluster.plans.values(), ctl, ASK_TIMEOUT_S)
        self.tap = HeartbeatTap(ctl, self._spawn_tap) if self.group_sampler.ctl_groups else None
        if self.tap is not None:
            self.group_sampler.heartbeats = self.tap.latest
            if not self.tap.start():
                print(f"monitor: {self.tap.error}", file=sys.stderr, flush=True)

    def _spawn_tap(self, cmd: list[str]) -> subprocess.Popen:
        # monitor/ exists: `up` makes it before it starts the monitor, and main() before Monitor()
        with open(self.run.path / "monitor" / "tcpdump.log", "ab") as err:
            return self.cluster.spawn_client("heartbeats", cmd, cwd=self.run.path, stdout=subprocess.PIPE, stderr=err)

    # ------------------------------------------------------------ one sample
    def sample(self) -> dict[str, Any]:
        now = int(time.time() * 1000)
        out: dict[str, Any] = {"ts_ms": now}
        links = probe_all(self.pool, self.links) if self.pool is not None else None
        groups = self.group_sampler.start()
        if self.tap is not None and self.tap.error:
            out["heartbeat_tap_error"] = self.tap.error
        # with several namesrvs, each asked: a broker one refused may be listed by the others
        each = self.cluster.registered_in_each() if len(self.namesrvs) > 1 else None
        reg = self.cluster.registered() if each is None else _union(each)
        if each is not None:
            out["namesrvs"] = {n: None if r is None else sorted(r) for n, r in each.items()}
        try:
            out["namesrv"] = {"up": True, "topics": self._namesrv_topics(), "brokers": sorted(reg or {})}
        except RemotingError:
            out["namesrv"] = {"up": False}
        routed = self.cluster.routed_groups(self.load_topics[0]) if reg is not None and self.load_topics else None
        for n, tail in self.frame_tails.items():
            for line in tail.lines():
                self.frame_line_ms[n] = line_ms(line) or self.frame_line_ms[n]  # the exception's own line has no stamp
                if m := TOO_LONG.search(line):
                    self.frames["by_namesrv"][n] += 1
                    self.frames.update(count=self.frames["count"] + 1, limit=int(m.group(1)),
                                       last_length=int(m.group(2)), last_ms=self.frame_line_ms[n])
        out["frame_errors"] = {**self.frames, "by_namesrv": dict(self.frames["by_namesrv"])}
        for p in self.nodes:
            for line in self.reg_tails[p.name].lines():
                for key, texts in (("ok", REG_OK), ("failed", REG_FAILED)):
                    if any(t in line for t in texts):
                        self.reg[p.name][key] += 1
                        self.reg[p.name][f"last_{key}_ms"] = line_ms(line)
        # every broker at once: stopped brokers cost the sample one timeout together, not one each
        asked = {p.name: self.broker_pool.submit(self._broker, p, reg, routed, each) for p in self.nodes}
        brokers = {n: f.result() for n, f in asked.items()}
        out["brokers"] = brokers
        out["backlog"] = merge_backlog(brokers)
        out["groups"] = groups(reg)
        if links is not None:
            out["links"] = links()
        return out

    def _broker(self, p: NodePlan, reg: dict[str, dict[int, str]] | None, routed: set[str] | None,
                each: dict[str, dict[str, dict[int, str]] | None] | None) -> dict[str, Any]:
        """One broker's part of the sample, asked of the broker itself. `each`: every namesrv's
        registrations when there are several (the backend's listed_anywhere: listed by any of them)."""
        listed = self.cluster.listed_anywhere(p.name, each) if each is not None else \
            None if reg is None else p.listed_in(reg)
        b: dict[str, Any] = {"registered": listed,
                             "routed": None if routed is None else p.broker_name in routed,
                             "registrations": dict(self.reg[p.name])}
        try:
            topics = self._topics(p, b)
            b.update(up=True, topics=by_type(list(topics), self.own), groups=len(self.admin.group_configs(p.addr)))
        except RemotingError:
            b["up"] = False
            return b
        try:  # a question that failed is unknown (null), not a broker that is down
            runtime = self.admin.runtime_info(p.addr)
            b["commit_max"] = int(runtime["commitLogMaxOffset"]) if "commitLogMaxOffset" in runtime else None
        except (RemotingError, ValueError):
            runtime, b["commit_max"] = None, None
        # a classic master, or the replica namesrv lists as id 0 now (controller mode, DLedger)
        if p.role == "master" or (reg is not None and reg.get(p.broker_name or "", {}).get(0) == p.addr):
            try:
                b["delayed"] = None if runtime is None else delayed(runtime)
                b["backlog"] = self._backlog(p.addr, p.broker_name or "", topics)
            except RemotingError:
                b.setdefault("delayed", None)
                b["backlog"] = None
        return b

    def _namesrv_topics(self) -> dict[str, int]:
        """namesrv's topics by type; a list over BIG_TABLE asked again only every BIG_TABLE_EVERY_S."""
        read_at, counts = self.ns_topics
        if sum(counts.values()) > BIG_TABLE and time.monotonic() - read_at < BIG_TABLE_EVERY_S:
            return counts
        self.ns_topics = (time.monotonic(), by_type(self.admin.topic_list(), self.own))
        return self.ns_topics[1]

    def _topics(self, p: NodePlan, b: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The broker's topic table: asked every sample, but a big one (BIG_TABLE) only every
        BIG_TABLE_EVERY_S, its age in `topics_age_s` meanwhile."""
        read_at, table = self.tables.get(p.name, (0.0, {}))
        age = time.monotonic() - read_at
        if table and age < BIG_TABLE_EVERY_S:
            b["topics_age_s"] = round(age, 1)
            return table
        table = self.admin.topic_configs(p.addr)
        if len(table) > BIG_TABLE:
            self.tables[p.name] = (time.monotonic(), table)
        else:
            self.tables.pop(p.name, None)
        return table

    def _backlog(self, addr: str, broker: str, topics: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Per group on this broker: {"topic|broker|queue": (max offset, committed offset)}, its
        online client ids."""
        out: dict[str, Any] = {}
        for group, subscribed in self.groups.items():
            queues = [(t, q) for t in [*subscribed, f"%RETRY%{group}"]
                      for q in range(int((topics.get(t) or {}).get("readQueueNums") or 0))]
            got = self.admin.offsets(addr, group, queues)
            out[group] = {"queues": {f"{t}|{broker}|{q}": v for (t, q), v in got.items()},
                          "clients": self.admin.consumer_client_ids(addr, group)}
        return out


def _union(each: dict[str, dict[str, dict[int, str]] | None]) -> dict[str, dict[int, str]] | None:
    """The brokers any namesrv lists (None: none answered), for the group names and the id-0 master
    check; whether a node is listed is the backend's listed_anywhere (a union of the maps would let one
    namesrv's id overwrite another's)."""
    answered = [r for r in each.values() if r is not None]
    if not answered:
        return None
    out: dict[str, dict[int, str]] = {}
    for r in answered:
        for name, ids in r.items():
            out.setdefault(name, {}).update(ids)
    return out


def delayed(runtime: dict[str, str]) -> int:
    """Messages waiting in the broker's delay levels (SCHEDULE_TOPIC_XXXX, where a message sent back
    for a later retry sits until its time): per level `scheduleMessageOffset_<level>` is
    "<delivered up to>,<max offset>" (ScheduleMessageService.buildRunningStats)."""
    n = 0
    for k, v in runtime.items():
        if k.startswith("scheduleMessageOffset_") and "," in v:
            done, mx = (int(x) for x in v.split(",", 1))
            n += max(0, mx - done)
    return n


def merge_backlog(brokers: dict[str, Any]) -> dict[str, Any]:
    """Per group over every broker: lag per topic, `total` (the group's topics and its %RETRY%),
    `retry_lag`, `retry_stored` (%RETRY% messages stored so far), and `instances`: each online
    consumer's lag on the group's own topics, by the queues RocketMQ's allocation gives it."""
    merged: dict[str, Any] = {}
    for b in brokers.values():
        for group, g in (b.get("backlog") or {}).items():
            m = merged.setdefault(group, {"queues": {}, "clients": set()})
            m["queues"].update(g["queues"])
            m["clients"].update(g["clients"])
    out: dict[str, Any] = {}
    for group, m in merged.items():
        retry = f"%RETRY%{group}"
        per_topic: dict[str, int] = {}
        by_topic: dict[str, list[tuple[str, int]]] = {}
        for key, (mx, consumed) in m["queues"].items():
            t, b, q = key.split("|")
            per_topic[t] = per_topic.get(t, 0) + max(0, mx - consumed)
            by_topic.setdefault(t, []).append((b, int(q)))
        clients = sorted(m["clients"])
        instances = {cid: 0 for cid in clients}
        for t, qs in by_topic.items():
            if t == retry:
                continue
            for cid in clients:
                for b, q in allocate(qs, clients, cid):
                    mx, consumed = m["queues"][f"{t}|{b}|{q}"]
                    instances[cid] += max(0, mx - consumed)
        out[group] = {"topics": per_topic, "total": sum(per_topic.values()), "retry_lag": per_topic.get(retry, 0),
                      "retry_stored": sum(mx for k, (mx, _) in m["queues"].items() if k.startswith(retry + "|")),
                      "instances": instances}
    return out


def main(argv: list[str]) -> int:
    run = RunDir.open(argv[0])
    out = run.path / "monitor" / "cluster.jsonl"
    out.parent.mkdir(exist_ok=True)
    m = Monitor(run)
    # bounded: a monitor whose run was never taken down still ends (down reaps it long before)
    deadline = time.monotonic() + float(argv[1] if len(argv) > 1 else 6 * 3600)
    with open(out, "a") as fh:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                rec = m.sample()
            except Exception as e:  # noqa: BLE001 - a sample that failed is recorded, the next one tried
                rec = {"ts_ms": int(time.time() * 1000), "error": f"{type(e).__name__}: {e}"}
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            fh.flush()
            time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - t0)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
