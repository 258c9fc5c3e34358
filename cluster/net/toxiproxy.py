"""Link faults through Toxiproxy (latency with jitter, bandwidth, blackhole, reset), on loopback.

The kernel here has no netem, so a slow or broken link is a TCP proxy placed between two nodes'
addresses: `toxiproxy-server` (built by scripts/setup.sh into .cache/toxiproxy/), started with the
one spawn helper and ended by PID, driven by a small urllib client of its REST API (v2.12.0:
api.go, toxics/*.go). Every listen and upstream address must be inside 127.0.0.0/8.

Facts from its source that matter here:
- toxics act per direction: `downstream` is upstream -> client (the reply path), `upstream` the other;
- latency is `latency` ± uniform `jitter` ms per chunk; bandwidth `rate` is KB/s (1000 bytes);
- `timeout` drops all data, and closes the connection after `timeout` ms (0: holds it forever);
- `reset_peer` fires on the first data in its direction: after `timeout` ms it closes with
  SO_LINGER 0, i.e. a TCP RST;
- if its API port cannot be bound the server logs it and keeps running without an API, so `start`
  refuses a port in use first and then waits for *this* process's API.
- its upstream connections come from the kernel's choice of source address (127.0.0.1 for a
  127.x destination), not from the client's address.
"""
from __future__ import annotations

import json
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cluster.plan.nodes import port_in_use
from rmqchaos.errors import UserError
from rmqchaos.machine.loopback import endpoint, loopback, port
from rmqchaos.machine.paths import CACHE
from rmqchaos.machine.procs import ProcessLog, alive, record_spawn, spawn, starttime, stop
from rmqchaos.machine.wait import poll_until

VERSION = "v2.12.0"  # scripts/setup.sh builds this one
BINARY = CACHE / "toxiproxy" / "bin" / "toxiproxy-server"
API_HOST = "127.0.0.1"
STREAMS = ("downstream", "upstream")


@dataclass(frozen=True)
class Toxic:
    """One toxic as Toxiproxy's API takes it (`type`, `stream`, `toxicity`, `attributes`)."""
    type: str
    attributes: dict[str, int]
    stream: str = "downstream"
    toxicity: float = 1.0

    def body(self, name: str) -> dict[str, Any]:
        if self.stream not in STREAMS:
            raise UserError(f"toxic stream {self.stream!r} is not one of {', '.join(STREAMS)}", "pick one")
        if not 0.0 <= self.toxicity <= 1.0:
            raise UserError(f"toxicity {self.toxicity} is outside 0..1", "the share of connections it acts on")
        return {"name": name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": self.attributes}


def latency(ms: int, jitter_ms: int = 0, stream: str = "downstream") -> Toxic:
    return Toxic("latency", {"latency": _ms(ms), "jitter": _ms(jitter_ms)}, stream)


def bandwidth(kb_s: int, stream: str = "downstream") -> Toxic:
    return Toxic("bandwidth", {"rate": _ms(kb_s)}, stream)


def blackhole(timeout_ms: int = 0, stream: str = "downstream") -> Toxic:
    """Data dropped, connection held; closed after `timeout_ms` (0: never)."""
    return Toxic("timeout", {"timeout": _ms(timeout_ms)}, stream)


def reset(timeout_ms: int = 0, stream: str = "downstream") -> Toxic:
    """The connection reset (RST) `timeout_ms` after the first data in `stream`'s direction."""
    return Toxic("reset_peer", {"timeout": _ms(timeout_ms)}, stream)


def _ms(v: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise UserError(f"toxic setting {v!r} must be an integer >= 0", "milliseconds or KB/s")
    return v


class Toxiproxy:
    """One toxiproxy-server process with its API on 127.0.0.1:`api_port`."""

    def __init__(self, api_port: int, log_file: Path, binary: Path = BINARY) -> None:
        self.api_port = port(api_port)
        self.log_file = log_file
        self.binary = binary
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self._proc: Any = None

    @property
    def url(self) -> str:
        return f"http://{API_HOST}:{self.api_port}"

    def start(self, timeout: float = 15, log: ProcessLog | None = None, node: str = "toxiproxy") -> "Toxiproxy":
        """Spawn it and return once its API answers. `log`: record it in a run's processes.jsonl,
        so `down` and the reaping of a killed run end it like any other process of the run."""
        if not self.binary.is_file():
            raise UserError(f"{self.binary} is not built (link faults need Toxiproxy)",
                            "run scripts/setup.sh with Go installed (apt-get install golang-go)")
        if port_in_use(self.api_port):
            raise UserError(f"port {self.api_port} for Toxiproxy's API is in use", "pick another api port")
        cmd = [str(self.binary), "-host", API_HOST, "-port", str(self.api_port)]
        self._proc = spawn(cmd, log_file=self.log_file)
        self.pid, self.start_ticks = self._proc.pid, starttime(self._proc.pid)
        if log is not None:
            record_spawn(log, node, self._proc, cmd, ports=[self.api_port])

        def exited() -> None:
            if self._proc.poll() is not None:
                raise UserError(f"toxiproxy-server exited with {self._proc.returncode} before its API answered",
                                f"see {self.log_file}", detail=_tail(self.log_file))
        try:
            poll_until(self._version, timeout, f"Toxiproxy's API on {API_HOST}:{self.api_port}", interval=0.05,
                       check=exited, hint=f"see {self.log_file}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 5) -> str:
        """SIGTERM (it shuts its HTTP server down and exits), SIGKILL after `grace`; by PID only."""
        if self.pid is None:
            return "not-started"
        how = stop(self.pid, self.start_ticks, grace)
        if self._proc is not None:
            # collect its exit status (no zombie left behind). wait, not poll: a Go server's leader
            # thread is a zombie before its other threads are gone, and cannot be reaped until they are
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # reaped later by the next poll; the process itself has exited
        return how

    def alive(self) -> bool:
        return self.pid is not None and alive(self.pid, self.start_ticks)

    # --- the REST API ---------------------------------------------------------------------------

    def _version(self) -> str | None:
        try:
            return str(self._call("GET", "/version")["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def create_proxy(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        """A proxy listening on `listen` ('127.0.x.y:port') that forwards to `upstream`."""
        (lh, lp), (uh, up) = endpoint(listen), endpoint(upstream)
        return self._call("POST", "/proxies", {"name": name, "listen": f"{lh}:{lp}", "upstream": f"{uh}:{up}",
                                               "enabled": True})

    def delete_proxy(self, name: str) -> None:
        """Delete it (its listener closes, its connections end); no error if it is already gone."""
        self._call("DELETE", f"/proxies/{name}", ok_missing=True)

    def proxies(self) -> dict[str, dict[str, Any]]:
        return self._call("GET", "/proxies")

    def add_toxic(self, proxy: str, name: str, toxic: Toxic) -> dict[str, Any]:
        """Add a toxic; it acts on the proxy's open connections too, not only on new ones."""
        return self._call("POST", f"/proxies/{proxy}/toxics", toxic.body(name))

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}", ok_missing=True)

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/proxies/{proxy}/toxics")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, ok_missing: bool = False) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            if ok_missing and e.code == 404:
                return None
            hint = {404: "no such proxy or toxic", 409: "a proxy or toxic of that name exists already"}.get(
                e.code, "check the toxic's type and attributes and the proxy's addresses")
            raise UserError(f"Toxiproxy {method} {path} answered {e.code}: {_api_error(e)}", hint) from None
        return json.loads(raw) if raw.strip() else None


def _api_error(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read())["error"])  # ApiError: {"error": "...", "status": N}
    except (ValueError, KeyError, TypeError, OSError):
        return e.reason


def _tail(f: Path, n: int = 20) -> str:
    try:
        return "\n".join(f.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# --- measuring what a link fault did ---------------------------------------------------------------

@dataclass
class Rtt:
    """Round trips over one TCP connection, in milliseconds."""
    samples_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def max_ms(self) -> float:
        return max(self.samples_ms)

    @property
    def stdev_ms(self) -> float:
        return statistics.pstdev(self.samples_ms)

    def summary(self) -> dict[str, float]:
        return {"n": len(self.samples_ms), "median_ms": round(self.median_ms, 2), "min_ms": round(self.min_ms, 2),
                "max_ms": round(self.max_ms, 2), "stdev_ms": round(self.stdev_ms, 2)}


def _read_echo(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:  # bounded by the socket's timeout and by n
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def measure_rtt(addr: str, n: int = 10, *, request: bytes = b"ping\n", source: str | None = None,
                timeout: float = 5, reply: Callable[[socket.socket], bytes] | None = None) -> Rtt:
    """`n` request/response round trips over one TCP connection to `addr` ('127.x.y.z:port').

    reply: reads one answer (default: as many bytes as the request, i.e. an echo peer). Nagle is off
    so each request leaves at once; the connection is opened before the first sample, so the
    handshake is not counted."""
    host, p = endpoint(addr)
    src = (loopback(source), 0) if source is not None else None
    read = reply or (lambda s: _read_echo(s, len(request)))
    out = Rtt()
    with socket.create_connection((host, p), timeout=timeout, source_address=src) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(max(1, min(n, 10_000))):
            t0 = time.perf_counter()
            s.sendall(request)
            read(s)
            out.samples_ms.append((time.perf_counter() - t0) * 1000)
    return out
