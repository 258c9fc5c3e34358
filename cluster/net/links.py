"""One link fault's machinery, without RocketMQ: Toxiproxy proxies placed between a client address
and a server's listeners by iptables DNAT (the `link` fault kind, chaos/kinds/link.py; docs/faults.md).

    client addr --(new connection to server:P)--> nat OUTPUT DNAT --> proxy addr:Q (toxics)
                                                              proxy --(from 127.0.0.1)--> server:P

- One proxy per listener port P of a server, listening on the cluster's proxy address (`plan.addresses`
  "links") and a free port Q; its upstream is server:P. Its own connection upstream comes from
  127.0.0.1 (the kernel's choice), so no DNAT rule (which names the client's address) matches it again.
- Only connections opened after the rules are in place go through the proxy: conntrack keeps an
  established connection's (absent) translation, so a client that keeps its connection is untouched.
  With `reconnect`, the links' established connections are broken (`ss -K`, cluster/net/conns.py) once
  the rules and proxies are in place, so a client that keeps one (every RocketMQ client) reconnects
  through the proxy; and again at stop, once the rules are gone, so it reconnects direct.
- One toxiproxy-server per run, started by the first link fault and stopped by the last one to stop
  (refcounted in this process: every fault of a run runs in the process that runs its load); it is
  recorded in the run's processes.jsonl, so `down` and orphan reaping end it if we die.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cluster.net import conns, netrules
from cluster.plan.nodes import free_port
from cluster.net.toxiproxy import API_HOST, Rtt, Toxic, Toxiproxy, measure_rtt
from rmqchaos.errors import UserError
from rmqchaos.machine.loopback import loopback, port
from rmqchaos.machine.procs import ProcessLog

NODE = "toxiproxy"  # its name in processes.jsonl


@dataclass(frozen=True)
class Link:
    """Connections from `client` to `server`'s listening `ports`."""
    client: str
    server: str
    ports: tuple[int, ...]

    def __post_init__(self) -> None:
        for a in (self.client, self.server):
            loopback(a)
        for p in self.ports:
            port(p)
        if not self.ports:
            raise UserError(f"link {self.client} -> {self.server} has no listener port", "name a member that listens")


@dataclass
class Probe:
    """How to measure a round trip to a server port: `request` and `reply` as `measure_rtt` takes them
    (default: an echo of `request`), on which port of the first link (default its first)."""
    request: bytes = b"ping\n"
    reply: Callable[[socket.socket], bytes] | None = None
    samples: int = 5
    timeout: float = 3.0
    port: int | None = None


# --- the run's toxiproxy-server ----------------------------------------------------------------------

_servers: dict[str, tuple[Toxiproxy, int]] = {}  # run id -> (server, users)
_servers_lock = threading.Lock()


def acquire(run_id: str, workdir: Path, log: ProcessLog | None) -> Toxiproxy:
    """The run's toxiproxy-server, started now if no link fault of the run holds it."""
    with _servers_lock:
        if run_id in _servers and _servers[run_id][0].alive():
            tp, n = _servers[run_id]
            _servers[run_id] = (tp, n + 1)
            return tp
        workdir.mkdir(parents=True, exist_ok=True)
        err: UserError | None = None
        for _ in range(3):  # a port taken between the probe and the bind: pick another
            tp = Toxiproxy(free_port(API_HOST), workdir / "toxiproxy.log")
            try:
                tp.start(log=log, node=NODE)
            except UserError as e:
                err = e
                if "in use" not in e.message:
                    raise
                continue
            _servers[run_id] = (tp, 1)
            return tp
        assert err is not None
        raise err


def release(run_id: str, log: ProcessLog | None) -> str | None:
    """One user fewer; the last one stops the server (by PID) and returns how it ended."""
    with _servers_lock:
        tp, n = _servers.get(run_id, (None, 0))
        if tp is None:
            return None
        if n > 1:
            _servers[run_id] = (tp, n - 1)
            return None
        del _servers[run_id]
    how = tp.stop()
    if log is not None and tp.pid is not None:
        log.record_exit(NODE, tp.pid, how)
    return how


# --- one fault -----------------------------------------------------------------------------------------

@dataclass
class LinkFault:
    """Proxies with `toxics` on every `links` port, DNAT rules sending the links' new connections
    there, in run `run_id`'s chain under comment tag `tag`. start() then stop(); both return evidence."""
    run_id: str
    tag: str
    links: list[Link]
    toxics: dict[str, Toxic]  # toxic name -> toxic, added to every proxy
    proxy_addr: str
    workdir: Path
    log: ProcessLog | None = None
    probe: Probe = field(default_factory=Probe)
    proxies: dict[str, dict[str, Any]] = field(default_factory=dict)  # proxy name -> {listen, upstream}
    rules: list[str] = field(default_factory=list)
    forgotten_flows: int = 0  # conntrack entries of the links' ports deleted before the DNATs (netrules.forget_flows)
    server: Toxiproxy | None = None
    reconnect: bool = False
    reconnect_wait: float = 3.0  # how long start and stop watch for the broken connections' successors

    def start(self) -> dict[str, Any]:
        loopback(self.proxy_addr)
        rr = netrules.RunRules(self.run_id)
        first = self.links[0]
        pport = self.probe.port or first.ports[0]
        before = self._measure(first.client, first.server, pport)
        self.server = acquire(self.run_id, self.workdir, self.log)
        try:
            for server, p in dict.fromkeys((ln.server, p) for ln in self.links for p in ln.ports):
                name = _proxy_name(self.tag, server, p)
                listen = self._create(name, f"{server}:{p}")
                self.proxies[name] = {"listen": listen, "upstream": f"{server}:{p}"}
                for tname, toxic in self.toxics.items():
                    self.server.add_toxic(name, tname, toxic)
            for ln in self.links:
                for p in ln.ports:
                    host, q = self.proxies[_proxy_name(self.tag, ln.server, p)]["listen"].rsplit(":", 1)
                    # before its DNAT: a stale flow of the same ports would take a new connection around it
                    self.forgotten_flows += netrules.forget_flows(ln.client, ln.server, p)
                    self.rules.append(rr.dnat(ln.client, ln.server, p, (host, int(q)), tag=self.tag))
        except BaseException:
            self.stop()
            raise
        during = self._measure(first.client, first.server, pport)
        ev: dict[str, Any] = {"reconnect": self.reconnect}
        if self.reconnect:
            try:
                ev["reconnect_at_start"] = self._break()
            except BaseException:
                self.stop()
                raise
        return {**ev, "proxies": self.proxies, "toxics": {n: t.body(n) for n, t in self.toxics.items()},
                "rules": self.rules, "forgotten_flows": self.forgotten_flows, "probe": f"{first.client} -> {first.server}:{pport}",
                "rtt_before_ms": before.get("median_ms"), "rtt_during_ms": during.get("median_ms"),
                "probe_before": before, "probe_during": during}

    def stop(self) -> dict[str, Any]:
        """Rules first (no new connection reaches a proxy that is going), then with `reconnect` the
        proxied connections broken (their clients reconnect direct), then the proxies (their
        connections end with them), then the server if no other fault of the run uses it."""
        # the connections open now: one may be reset by the rule's removal before `ss -K` finds it
        before = self._open() if self.reconnect and self.server is not None else []
        removed = netrules.RunRules(self.run_id).remove_tag(self.tag) if netrules.available() else 0
        ev: dict[str, Any] = {}
        if self.reconnect and self.server is not None:
            try:
                ev["reconnect_at_stop"] = self._break(before)
            except UserError as e:  # the proxies still go below: their connections end with them
                ev["reconnect_at_stop"] = {"error": e.message}
        if self.server is not None:
            for name in self.proxies:
                try:
                    self.server.delete_proxy(name)  # its toxics go with it
                except UserError:
                    pass  # the server is gone already: its proxies with it
        how = release(self.run_id, self.log) if self.server is not None else None
        self.server = None
        return {**ev, "rules_removed": removed, "proxies_removed": len(self.proxies), "toxiproxy": how or "still used"}

    def _pairs(self) -> list[tuple[str, str, int]]:
        return list(dict.fromkeys((ln.client, ln.server, p) for ln in self.links for p in ln.ports))

    def _open(self) -> list[tuple[Any, ...]]:
        """The links' established connections now (client, client port, server, server port)."""
        pairs = set(self._pairs())
        return [c for c in conns.established() if (c[0], c[2], c[3]) in pairs]

    def _break(self, before: list[tuple[Any, ...]] | None = None) -> dict[str, Any]:
        """Break the links' established connections (client side, `ss -K`), then watch up to
        `reconnect_wait` s for their successors: the same client to the same server port, each marked
        `via proxy` (the proxy holds a connection from that client port) or `direct`. `before`: the
        connections open before a step that may itself end some (the rules' removal at stop resets a
        proxied connection whose next packet goes direct): those gone by now count as broken too.
        Returns {broken, reconnected, waited_s, begin_ms, end_ms} with connections as 'a:p->b:q';
        begin_ms and end_ms (epoch ms) bracket the breaking: a request sent after end_ms cannot use a
        broken one."""
        pairs = self._pairs()
        begin_ms = int(time.time() * 1000)
        broken = [c for a, b, p in pairs for c in conns.break_conns(a, b, p)]
        if before:
            still = set(conns.established())
            broken += [c for c in before if c not in still and c not in broken]
        end_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        want = {(c[0], c[2], c[3]) for c in broken}  # every (client, server, port) that had one
        listens = {x["listen"] for x in self.proxies.values()}
        while True:
            now = conns.established()
            new = [c for c in now if (c[0], c[2], c[3]) in want and c not in broken]
            if {(c[0], c[2], c[3]) for c in new} >= want or time.monotonic() - t0 >= self.reconnect_wait:
                break
            time.sleep(0.1)
        # the proxy's side of a proxied connection: local = a proxy's listen address, peer = the client's port
        proxied = {(pa, pp) for la, lp, pa, pp in now if f"{la}:{lp}" in listens}
        return {"broken": sorted(map(conns.name, broken)), "begin_ms": begin_ms, "end_ms": end_ms,
                "waited_s": round(time.monotonic() - t0, 3),
                "reconnected": sorted(f"{conns.name(c)} {'via proxy' if (c[0], c[1]) in proxied else 'direct'}"
                                      for c in new)}

    def _create(self, name: str, upstream: str) -> str:
        assert self.server is not None
        err: UserError | None = None
        for _ in range(3):  # a free port taken before the proxy bound it: pick another
            listen = f"{self.proxy_addr}:{free_port(self.proxy_addr)}"
            try:
                self.server.create_proxy(name, listen, upstream)
                return listen
            except UserError as e:
                err = e
        assert err is not None
        raise err

    def _measure(self, client: str, server: str, p: int) -> dict[str, Any]:
        """A probe's round trips from the client's address (so a DNAT rule applies to it), or the
        error it met: a blackhole times out, a reset resets."""
        pr = self.probe
        try:
            r: Rtt = measure_rtt(f"{server}:{p}", pr.samples, request=pr.request, source=client,
                                 timeout=pr.timeout, reply=pr.reply)
        except (OSError, ConnectionError, UserError) as e:
            return {"error": f"{type(e).__name__}: {e}"}
        return r.summary()


def _proxy_name(tag: str, server: str, p: int) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{tag}-{server}-{p}")
