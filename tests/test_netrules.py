"""Partition rules (cluster/net/netrules.py) against the real iptables, probed with real TCP connections
between addresses of 127.0.77.0/24: listeners on .1 and .2, clients binding .3 and .4. No JVM; needs
root and iptables. Every test removes its chains in a fixture, so a failing test leaves no rule."""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest

from cluster.net import netrules
from cluster.net.netrules import RunRules
from rmqchaos.errors import UserError

pytestmark = [
    pytest.mark.fast,
    pytest.mark.skipif(shutil.which("iptables", path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")) is None,
                       reason="iptables is not installed (apt-get install iptables)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="iptables rules need root"),
]

NET = "127.0.77"
PORT = 19461  # below the ephemeral range, so no client's source port can equal it
L1, L2, C3, C4 = (f"{NET}.{i}" for i in (1, 2, 3, 4))
PROBE_S = 1.0  # a connect through a DROP times out; one that is let through takes microseconds


class Listener:
    """An echo server on addr:PORT in a thread; keeps its accepted sockets so a test can write from
    the server's side. Its loop ends on `close()` (checked every 0.1 s)."""

    def __init__(self, addr: str) -> None:
        self.sock = socket.create_server((addr, PORT))
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock, *self.conns], [], [], 0.1)
            for s in ready:
                if s is self.sock:
                    c, _ = self.sock.accept()
                    self.conns.append(c)
                    continue
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data:
                    s.sendall(data)
                else:
                    self.conns.remove(s)
                    s.close()

    def peer_of(self, client: socket.socket) -> socket.socket:
        """The server-side socket of `client`'s connection."""
        name = client.getsockname()
        for _ in range(20):  # accepted within a select round (0.1 s)
            for c in list(self.conns):
                if c.getpeername() == name:
                    return c
            self._stop.wait(0.05)
        raise AssertionError(f"{name} was not accepted")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in (self.sock, *self.conns):
            s.close()


@pytest.fixture
def listeners() -> Iterator[dict[str, Listener]]:
    ls = {a: Listener(a) for a in (L1, L2)}
    try:
        yield ls
    finally:
        for listener in ls.values():
            listener.close()


@pytest.fixture
def rules() -> Iterator[RunRules]:
    from rmqchaos.run.rundir import registry_dir
    before = _ipt_save()
    r = RunRules(f"t{uuid.uuid4().hex[:8]}-netrules")
    # registered like a run's (its owner file names this entry): a test beside it on the other worker
    # that reaps (any `up`) must leave the chain alone, as it does a live run's
    r.registered_at.parent.mkdir(parents=True, exist_ok=True)
    r.registered_at.touch()
    assert r.registered_at.parent == registry_dir()
    try:
        yield r
    finally:
        r.remove()
        assert r.chain not in _ipt_save()
        # nobody else's rules were there, and no test beside this one (make test's other worker) makes
        # any: none of the platform's may remain
        if "RMQC" not in before and not os.environ.get("PYTEST_XDIST_WORKER"):
            assert "RMQC" not in _ipt_save()


def _ipt_save() -> str:
    return subprocess.run(["iptables-save"], capture_output=True, text=True, timeout=30, check=True).stdout


def connects(src: str, dst: str) -> bool:
    """Whether a TCP connection from src to dst:PORT is established within PROBE_S."""
    try:
        with socket.create_connection((dst, PORT), timeout=PROBE_S, source_address=(src, 0)):
            return True
    except TimeoutError:
        return False


def matrix(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], bool]:
    """Every probe at once, so a matrix costs one PROBE_S however many pairs are cut."""
    with ThreadPoolExecutor(len(pairs)) as ex:
        return dict(zip(pairs, ex.map(lambda p: connects(*p), pairs)))


ALL = [(s, d) for s in (L1, L2, C3, C4) for d in (L1, L2)]


def test_drop_blocks_exactly_the_named_pair(listeners: dict[str, Listener], rules: RunRules) -> None:
    assert all(matrix(ALL).values())
    rules.drop(C3, L1, dport=PORT, tag="f1")
    got = matrix(ALL)
    assert got == {p: p != (C3, L1) for p in ALL}
    assert len(rules.rules()) == 1 and f'--comment "rmqchaos:{rules.run_id}:f1"' in rules.rules()[0]
    rules.remove()
    assert all(matrix(ALL).values())


def test_partition_inside_and_across_the_cut(listeners: dict[str, Listener], rules: RunRules) -> None:
    """{.1, .3} | {.2, .4}: every pair across the cut fails, every pair inside it connects."""
    side = {L1: 0, C3: 0, L2: 1, C4: 1}
    for a in (L1, C3):
        for b in (L2, C4):
            rules.cut(a, b, tag="part")
    got = matrix(ALL)
    assert got == {(s, d): side[s] == side[d] for s, d in ALL}
    assert len(rules.rules()) == 8
    assert rules.remove_tag("part") == 8 and rules.rules() == []
    assert all(matrix(ALL).values())


def test_one_way_drop_without_a_port_still_breaks_both_handshakes(listeners: dict[str, Listener],
                                                                  rules: RunRules) -> None:
    """TCP needs both directions: .2's connect to .1 waits for .1's SYN-ACK, which .1 -> .2 drops."""
    rules.drop(L1, L2, tag="oneway")
    assert matrix([(L1, L2), (L2, L1), (C3, L1), (C3, L2)]) == {
        (L1, L2): False, (L2, L1): False, (C3, L1): True, (C3, L2): True}


def _arrives(sock: socket.socket, data: bytes) -> bool:
    sock.settimeout(PROBE_S)
    try:
        return sock.recv(64) == data
    except TimeoutError:
        return False


def test_one_way_and_symmetric_cut_on_an_open_connection(listeners: dict[str, Listener], rules: RunRules) -> None:
    """With the listener's port, one-way drops the client's data and lets the server's through;
    symmetric drops both. The server's own connections to the client are not touched."""
    def open_pair() -> tuple[socket.socket, socket.socket]:
        c = socket.create_connection((L1, PORT), timeout=PROBE_S, source_address=(C3, 0))
        return c, listeners[L1].peer_of(c)

    c1, s1 = open_pair()
    rules.cut(C3, L1, port=PORT, symmetric=False, tag="oneway")
    c1.sendall(b"ping")
    assert not _arrives(c1, b"ping")  # the request is dropped, so no echo
    s1.sendall(b"push")
    assert _arrives(c1, b"push")  # the server's direction still flows
    assert connects(L1, L2) and not connects(C3, L1)

    rules.remove_tag("oneway")
    c2, s2 = open_pair()
    rules.cut(C3, L1, port=PORT, symmetric=True, tag="sym")
    s2.sendall(b"push")
    assert not _arrives(c2, b"push")
    c2.sendall(b"ping")
    assert not _arrives(c2, b"ping")
    assert len(rules.rules()) == 2
    for c in (c1, c2):
        c.close()


def test_non_loopback_address_is_refused_before_any_rule(rules: RunRules) -> None:
    before = _ipt_save().split("\n", 1)[1]  # without the "# Generated … on <time>" line
    for bad in ("10.0.0.1", "0.0.0.0", "::1", "192.168.1.1", "localhost", "127.0.0.1/8"):
        for src, dst in ((bad, L1), (L1, bad)):
            with pytest.raises(UserError) as e:
                rules.drop(src, dst, tag="bad")
            line = str(e.value)
            assert "\n" not in line and bad in line and "loopback" in line
        with pytest.raises(UserError):
            rules.cut(L1, bad, port=PORT, tag="bad")
    with pytest.raises(UserError, match="port"):
        rules.drop(L1, L2, dport=70000, tag="bad")
    with pytest.raises(UserError, match="fault id"):
        rules.drop(L1, L2, tag='x" -j ACCEPT')
    assert _ipt_save().split("\n", 1)[1] == before
    assert rules.rules() == [] and rules.chain not in netrules.chains()


def test_idempotent_add_and_remove(rules: RunRules) -> None:
    rules.drop(C3, L1, tag="f")
    rules.drop(C3, L1, tag="f")
    assert len(rules.rules()) == 1
    assert rules.remove() == 1
    assert rules.remove() == 0 and rules.remove_tag("f") == 0 and rules.rules() == []


def test_two_runs_share_the_parent_and_reap_keeps_the_live_one(rules: RunRules) -> None:
    live = rules
    dead = RunRules(f"t{uuid.uuid4().hex[:8]}-dead")
    stray = netrules.PREFIX + "0000deadbeef"  # a chain with neither jump nor rule: attributable to nobody
    try:
        live.drop(C3, L1, tag="f")
        dead.drop(C4, L2, tag="f")
        subprocess.run(["iptables", "-w", "-N", stray], check=True, timeout=30)
        assert {live.chain, dead.chain, stray} <= set(netrules.chains())
        assert netrules.owners()[dead.chain] == dead.run_id
        assert subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True,
                              check=True).stdout.count("-j RMQCHAOS") == 1

        # live: every run but the dead one (another suite's runs on this host must keep their chains)
        done = netrules.reap(lambda run: run != dead.run_id)
        assert sorted(done) == sorted([f"run {dead.run_id}: removed iptables chain {dead.chain} (1 rule(s))",
                                       f"run (unknown): removed iptables chain {stray} (0 rule(s))"])
        assert live.chain in netrules.chains() and dead.chain not in netrules.chains()
        assert len(live.rules()) == 1 and dead.rules() == []
        assert netrules.reap(lambda run: run != dead.run_id) == []
    finally:
        dead.remove()
        if stray in netrules.chains():
            subprocess.run(["iptables", "-w", "-X", stray], timeout=30)


def test_reap_keeps_a_chain_whose_run_is_registered_in_another_home(tmp_path: Path) -> None:
    """Two homes share the host's tables: a reaper whose own registry knows neither run removes the
    chain whose registry entry is gone and keeps the one whose entry exists in the other home (once,
    a helper's `up` reaped a running test's partition and the broker was never cut)."""
    ids = [f"t{uuid.uuid4().hex[:8]}-{w}" for w in ("otherhome", "gone")]
    entry = tmp_path / "other-home" / "active" / ids[0]
    entry.parent.mkdir(parents=True)
    entry.write_text("registered")
    other, gone = RunRules(ids[0], registered_at=entry), RunRules(ids[1], registered_at=tmp_path / "none" / ids[1])
    try:
        other.drop(C3, L1, tag="f")
        gone.drop(C4, L2, tag="f")
        assert (netrules.OWNERS / other.chain).read_text() == str(entry)
        # this home's registry knows neither (and says every other run is live: another suite's)
        done = netrules.reap_unregistered(lambda run: run not in ids)
        assert done == [f"run {gone.run_id}: removed iptables chain {gone.chain} (1 rule(s))"]
        assert other.chain in netrules.chains() and len(other.rules()) == 1
        assert not (netrules.OWNERS / gone.chain).exists()
        entry.unlink()  # the other home's `down --all` forgot the run: now it is an orphan
        assert netrules.reap_unregistered(lambda run: run not in ids) == [
            f"run {other.run_id}: removed iptables chain {other.chain} (1 rule(s))"]
        assert not (netrules.OWNERS / other.chain).exists()
    finally:
        other.remove()
        gone.remove()


def test_dnat_redirects_only_the_named_clients_new_connections_and_goes_with_the_run(
        listeners: dict[str, Listener], rules: RunRules) -> None:
    """nat table: C3's new connections to L1 land on L2's listener; C4's, and C3's open one, do not
    (without --syn the open one was reset: conntrack picked it up mid-stream and sent it to L2).
    remove_tag, remove and reap cover the nat chain like the filter one."""
    def served_by(c: socket.socket) -> str:
        for addr, listener in listeners.items():
            if any(s.getpeername() == c.getsockname() for s in list(listener.conns)):
                return addr
        return "?"

    old = socket.create_connection((L1, PORT), timeout=PROBE_S, source_address=(C3, 0))
    rule = rules.dnat(C3, L1, PORT, (L2, PORT), tag="lnk")
    assert rule.startswith(f"-t nat -A {rules.chain} ") and rule.endswith(f"--to-destination {L2}:{PORT}")
    new = socket.create_connection((L1, PORT), timeout=PROBE_S, source_address=(C3, 0))
    other = socket.create_connection((L1, PORT), timeout=PROBE_S, source_address=(C4, 0))
    for c in (old, new, other):
        c.sendall(b"hi")
        assert _arrives(c, b"hi") and c.getpeername() == (L1, PORT)  # the client sees L1 answer either way
    assert (served_by(old), served_by(new), served_by(other)) == (L1, L2, L1)
    assert len(rules.rules("nat")) == 1 and rules.rules() == []
    assert "-A OUTPUT -j RMQCHAOS" in subprocess.run(["iptables", "-w", "-t", "nat", "-S", "OUTPUT"],
                                                     capture_output=True, text=True, check=True).stdout
    assert rules.remove_tag("lnk") == 1 and rules.rules("nat") == []
    rules.dnat(C3, L1, PORT, (L2, PORT), tag="lnk")
    rules.drop(C4, L2, dport=PORT, tag="cut")
    assert netrules.owners("nat")[rules.chain] == rules.run_id
    assert netrules.remove_run(rules.run_id) == [f"removed iptables chain {rules.chain} (1 rule(s))",
                                                 f"removed iptables nat chain {rules.chain} (1 rule(s))"]
    rules.dnat(C3, L1, PORT, (L2, PORT), tag="lnk")
    assert netrules.reap(lambda run: run != rules.run_id) == [
        f"run {rules.run_id}: removed iptables nat chain {rules.chain} (1 rule(s))"]
    assert rules.chain not in netrules.chains("nat") and "RMQC" not in _ipt_save()
    for c in (old, new, other):
        c.close()


def test_a_run_of_another_home_keeps_its_chain_while_its_cgroups_hold_processes(rules: RunRules) -> None:
    """Orphan reaping (cluster.reap_lost_runs, at every `rmqchaos run` and `down --all`) takes a chain
    whose run this RMQCHAOS_HOME does not register only once nothing is left in that run's cgroups:
    every test and checkout has its own home, and reaping by registry alone removed a concurrent
    run's partition mid-cut."""
    from cluster.local import cgroups
    from cluster.local.orphans import has_processes
    cg = cgroups.Cgroup(f"{cgroups.PREFIX}/{rules.run_id}/broker-a")
    cg.create()
    p = subprocess.Popen(["sleep", "60"])
    try:
        for f in cg.procs_files():
            with open(f, "w") as fh:
                fh.write(str(p.pid))
        rules.drop(C3, L1, tag="f")
        assert has_processes(rules.run_id) and has_processes(f"{rules.run_id}:f")
        # reap_lost_runs' predicate for a run this home never registered (and every other run live:
        # another suite's chains on this host stay whatever their state)
        live = lambda run: run != rules.run_id or has_processes(run)  # noqa: E731
        assert netrules.reap(live) == [] and len(rules.rules()) == 1
        p.kill()
        p.wait()
        assert not has_processes(rules.run_id)
        assert netrules.reap(live) == [f"run {rules.run_id}: removed iptables chain {rules.chain} (1 rule(s))"]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        cg.remove()
        cgroups.remove_empty_parents(f"{cgroups.PREFIX}/{rules.run_id}/x")
