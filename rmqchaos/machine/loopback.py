"""The one check that an address named in a network rule or a proxy is loopback (docs/safety.md).

Addresses are only ever named (by a scenario, a test, the platform's plan), never derived from the
host's interfaces; this refuses anything outside 127.0.0.0/8 before it reaches iptables or a proxy.
It lives in the core so that scenario validation can use it as well as the cluster layer.
"""
from __future__ import annotations

import ipaddress

from rmqchaos.errors import UserError

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def loopback(addr: str) -> str:
    """`addr` as a canonical IPv4 string if it is inside 127.0.0.0/8, else UserError (one line).

    Only literal addresses: iptables and Go would resolve a host name, which could name anything."""
    try:
        ip = ipaddress.ip_address(str(addr).strip())
    except ValueError:
        raise UserError(f"{addr!r} is not an IP address", "only loopback addresses (127.0.0.0/8) may be named") from None
    if ip.version != 4 or ip not in LOOPBACK:
        raise UserError(f"address {ip} is outside 127.0.0.0/8", "only loopback addresses may be named")
    return str(ip)


def port(p: object) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
        raise UserError(f"port {p!r} is not a TCP port", "give an integer 1..65535")
    return p


def endpoint(hostport: str) -> tuple[str, int]:
    """'127.0.x.y:port' -> (address, port), validated; UserError for anything else."""
    host, sep, p = str(hostport).rpartition(":")
    if not sep or not p.isdigit():
        raise UserError(f"{hostport!r} is not ADDRESS:PORT", "e.g. 127.0.78.2:19478")
    return loopback(host), port(int(p))
