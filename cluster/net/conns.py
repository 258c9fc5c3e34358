"""Established TCP connections on loopback, listed and broken with `ss` (iproute2).

`break_conns` ends a client's established connections to one listener with `ss -K` (SOCK_DESTROY:
the kernel aborts the socket, the client's next read or write fails with ECONNABORTED and the peer
gets a RST). It needs CONFIG_INET_DIAG_DESTROY and CAP_NET_ADMIN; measured on this platform's
kernel (6.18, CONFIG_INET_DIAG_DESTROY=y): an IPv4 socket and an IPv6 one with v4-mapped addresses
(as a JVM opens) are both matched by the IPv4 filter and aborted. The filter always names one
client address, one server address and its port, each checked to be inside 127.0.0.0/8
(`rmqchaos.machine.loopback`): only the client side of those connections matches (a server's accepted
socket has the server's address as its local one), and nothing off loopback can.
"""
from __future__ import annotations

import subprocess

from rmqchaos.errors import UserError
from rmqchaos.machine.loopback import loopback, port

#: (local address, local port, peer address, peer port)
Conn = tuple[str, int, str, int]


def _addr(s: str) -> tuple[str, int]:
    a, p = s.rsplit(":", 1)
    return a.strip("[]").removeprefix("::ffff:"), int(p)


def _parse(out: str) -> list[Conn]:
    conns = []
    for ln in out.splitlines():
        f = ln.split()
        if len(f) >= 4:
            (la, lp), (pa, pp) = _addr(f[2]), _addr(f[3])
            conns.append((la, lp, pa, pp))
    return conns


def _ss(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["ss", "-Htn", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise UserError("ss not found (iproute2)", "apt-get install iproute2") from None


def established() -> list[Conn]:
    """Every established TCP socket of this host's network namespace."""
    return _parse(_ss("state", "established").stdout)


def name(c: Conn) -> str:
    return f"{c[0]}:{c[1]}->{c[2]}:{c[3]}"


def break_conns(client: str, server: str, p: int) -> list[Conn]:
    """Abort every established connection from `client` (any port) to `server`:`p`, on the client's
    side; returns the ones aborted (`ss -K` prints only those it destroyed). UserError if `ss -K`
    is refused (no CAP_NET_ADMIN) or this kernel cannot destroy sockets (no CONFIG_INET_DIAG_DESTROY,
    where ss prints nothing and the connections stay: checked by listing them again)."""
    flt = ["state", "established", "src", loopback(client), "dst", f"{loopback(server)}:{port(p)}"]
    before = _parse(_ss(*flt).stdout)
    r = _ss("-K", *flt)
    if r.returncode != 0:
        raise UserError(f"ss -K {' '.join(flt)} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}",
                        "breaking connections needs root (CAP_NET_ADMIN)")
    killed = _parse(r.stdout)
    left = set(before) & set(_parse(_ss(*flt).stdout)) - set(killed)
    if left:
        raise UserError(f"ss -K left {len(left)} connection(s) to {server}:{p} open (e.g. {name(min(left))})",
                        "this kernel may lack CONFIG_INET_DIAG_DESTROY: set reconnect: false")
    return killed
