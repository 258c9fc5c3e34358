"""redis_noise: N real `redis-server` instances with `appendonly yes` + `appendfsync always` (as on
the incident's host: eight of them beside the broker), on loopback ports the run owns, their AOF
files in the run directory, each written at `rate` SETs/s by chaos/redis_driver.py. Its evidence's
`intent` gives each instance's SETs/s as the driver counted them over its active time against
`rate` (chaos/noise.py: `intent`)."""
from __future__ import annotations

import json
import shlex
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from chaos.intent import intent, measure
from chaos.noise import NoiseKind, NoiseParams, require
from chaos.protocol import register
from cluster.plan.nodes import HOST, plan, port_in_use
from rmqchaos.spec import Fault, Port, Scenario
from rmqchaos.machine.wait import poll_until

DRIVER = Path(__file__).resolve().parent.parent / "redis_driver.py"


class RedisNoiseParams(NoiseParams):
    instances: int = Field(8, ge=1, le=32)
    base_port: Port = 16379  # instance i listens on base_port + i
    rate: float = Field(200.0, gt=0, le=20_000)  # SETs per second per instance, each its own fsync
    value_bytes: int = Field(512, ge=1, le=1 << 20)
    # clients per instance sharing its rate (chaos/redis_driver.py): one alone is capped by its round
    # trip on a busy host; several, like an application's, keep the rate and may share an fsync
    connections: int = Field(4, ge=1, le=16)


def _command(port: int, *args: str) -> bytes:
    """One command, its raw reply (a status line, or a bulk string's body)."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(("*%d\r\n" % len(args) + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)).encode())
        f = s.makefile("rb")
        head = f.readline()
        if head.startswith(b"$"):
            return f.read(int(head[1:]))
        return head.strip()


def info(port: int, section: str = "default") -> dict[str, str]:
    body = _command(port, "INFO", section).decode()
    return dict(x.split(":", 1) for x in body.splitlines() if ":" in x and not x.startswith("#"))


@register
class RedisNoise(NoiseKind):
    name = "redis_noise"
    Params = RedisNoiseParams
    programs = ("redis-server",)
    install_hint = "apt-get install redis-server (make setup installs it)"

    @classmethod
    def check(cls, params: Any, fault: Fault, scenario: Scenario) -> list[tuple[tuple[Any, ...], str]]:
        errs = super().check(params, fault, scenario)
        ports = range(params.base_port, params.base_port + params.instances)
        if ports[-1] > 65535:
            errs.append((("base_port",), f"ports {ports[0]}-{ports[-1]} go past 65535"))
        cluster = {port for node in plan(scenario) for port in node.ports}
        if clash := sorted(cluster & set(ports)):
            errs.append((("base_port",), f"redis ports {ports[0]}-{ports[-1]} include the cluster's port(s) "
                                         f"{', '.join(map(str, clash))}: pick another base_port"))
        return errs

    @classmethod
    def compose_services(cls, params: Any, image: str, volume: str, root: str,
                         bound_s: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        out: dict[str, dict[str, Any]] = {}
        ports = [params.base_port + i for i in range(params.instances)]
        for port in ports:
            d = f"{root}/noise/redis-{port}"
            out[f"redis-noise-{port}"] = cls.compose_service(image, volume, root, [
                "sh", "-c", f"mkdir -p {d} && exec {shlex.join(['redis-server', *_server_args(port, d)])}"],
                healthcheck={"test": ["CMD", "redis-cli", "-h", HOST, "-p", str(port), "ping"],
                             "interval": "1s", "retries": 30})
        # the platform's own paced driver (stdlib Python), mounted from the checkout
        out["redis-noise-driver"] = cls.compose_service(image, volume, root, [
            "python3", "/opt/rmqchaos/redis_driver.py", ",".join(map(str, ports)), str(params.rate),
            str(params.value_bytes), str(bound_s), f"{root}/noise/redis-driver.json", str(params.connections)],
            volumes=["./chaos/redis_driver.py:/opt/rmqchaos/redis_driver.py:ro"],
            depends_on={f"redis-noise-{p}": {"condition": "service_healthy"} for p in ports})
        return out, {}

    def begin(self) -> None:
        p = self.params
        self.ports = [p.base_port + i for i in range(p.instances)]  # type: ignore[attr-defined]
        self.servers: dict[int, Any] = {}
        self.driver: Any = None
        taken = [x for x in self.ports if port_in_use(x)]
        require(not taken, f"redis_noise: port(s) {', '.join(map(str, taken))} already in use on {HOST}",
                "stop what holds them or set the fault's base_port")
        for port in self.ports:
            d = self.dir / f"redis-{port}"
            d.mkdir(parents=True, exist_ok=True)
            self.servers[port] = self.spawn(f"redis-{port}", ["redis-server", *_server_args(port, str(d))],
                                            d / "redis.log")
        for port, proc in self.servers.items():
            poll_until(lambda port=port: _ping(port), self.fault.timeout, f"redis-server on port {port}",
                       interval=0.05, check=lambda proc=proc, port=port: require(
                           proc.running(), f"redis_noise: redis-server on port {port} exited",
                           f"see {self.dir / f'redis-{port}' / 'redis.log'}"))
        # the driver is a client of the noise (as the load is of the cluster): a host process
        self.driver = self.spawn("driver", [sys.executable, str(DRIVER), ",".join(map(str, self.ports)), str(p.rate),
                                            str(p.value_bytes), str(self.bound_s()), str(self.dir / "driver.json"),
                                            str(p.connections)],
                                 self.dir / "driver.log", beside=False)

    def finish(self) -> dict[str, Any]:
        ev: dict[str, Any] = {"instances": len(getattr(self, "servers", {}))}
        if getattr(self, "driver", None) is not None:
            ev["driver_end"] = self.driver.end(signal.SIGTERM, 10)
            f = self.dir / "driver.json"
            ev["driver"] = json.loads(f.read_text()) if f.exists() else None
        stats = {}
        for port, proc in getattr(self, "servers", {}).items():
            try:
                i = info(port)
                stats[str(port)] = {"commands": int(i["total_commands_processed"]),
                                    "aof_bytes": int(i.get("aof_current_size", 0)), "set_calls": _set_calls(port)}
            except (OSError, KeyError, ValueError) as e:
                stats[str(port)] = {"error": f"{type(e).__name__}: {e}"}
            proc.end(signal.SIGTERM, 10)
            shutil.rmtree(self.dir / f"redis-{port}" / "appendonlydir", ignore_errors=True)  # noise data
        ev["redis"] = stats
        if ev.get("driver"):
            ev["sets"] = sum(r.get("sets", 0) for r in ev["driver"]["instances"].values())
        if getattr(self, "servers", None):
            ev["intent"] = redis_intent(self.params.rate, ev.get("driver"), stats,  # type: ignore[attr-defined]
                                        time.monotonic() - self.t0)
        return ev


def redis_intent(rate: float, driver: dict[str, Any] | None, servers: dict[str, dict[str, Any]],
                 seconds: float) -> dict[str, Any]:
    """Per instance: SETs/s as its driver counted them over its active time, against `rate`. An
    instance the driver did not report on (it died) is measured by the server's own count of SETs
    over the occurrence (`seconds`), or as 0 when that is missing too."""
    measures = []
    drv = (driver or {}).get("instances") or {}
    for port in sorted(set(servers) | set(drv), key=int):
        d, srv = drv.get(port) or {}, servers.get(port) or {}
        if "sets_per_s" in d:
            achieved = d["sets_per_s"]
        elif d.get("seconds"):
            achieved = d.get("sets", 0) / d["seconds"]
        else:
            achieved = (srv.get("set_calls") or 0) / max(seconds, 1e-9)
        measures.append(measure("SET/s", f"redis {port}", rate, achieved))
    return intent(measures, "Redis noise", of="instances")


def _server_args(port: int, directory: str) -> list[str]:
    """One redis-server as on the incident's host: every write appended and fsynced (AOF, always)."""
    return ["--bind", HOST, "--port", str(port), "--protected-mode", "yes", "--dir", directory, "--appendonly", "yes",
            "--appendfsync", "always", "--save", "", "--daemonize", "no", "--logfile", ""]


def _set_calls(port: int) -> int:
    """The SETs the server executed (INFO commandstats: cmdstat_set:calls=N,...)."""
    for k, v in info(port, "commandstats").items():
        if k == "cmdstat_set":
            return int(dict(x.split("=", 1) for x in v.split(","))["calls"])
    return 0


def _ping(port: int) -> bool:
    try:
        return _command(port, "PING") == b"+PONG"
    except OSError:
        return False
