"""The Docker engine the container parts use: the user's (DOCKER_HOST or the default socket), or one
this platform starts by PID (`rmqchaos docker up`) from Debian's docker.io, never with a bridge:

    dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false

listening only on a unix socket, data and exec roots under the project's build directory
(.cache/docker), stopped by PID (`rmqchaos docker down`; its containerd child goes with it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.machine.procs import ProcessLog, record_spawn, spawn, stop as stop_pid
from rmqchaos.progress import say
from rmqchaos.machine.wait import poll_until

SAFE_FLAGS = ["--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--ip-forward=false"]
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def home() -> Path:
    return paths.CACHE / "docker"


def socket_url() -> str:
    return f"unix://{home() / 'docker.sock'}"


def _log() -> ProcessLog:
    return ProcessLog(home() / "processes.jsonl")


def started_here() -> int | None:
    """The pid of the dockerd this checkout started, if it is alive."""
    r = _log().running().get("dockerd")
    return r[0] if r else None


def docker_host() -> str:
    """Where the container parts talk to an engine: $DOCKER_HOST, else ours if running, else the default."""
    return os.environ.get("DOCKER_HOST") or (socket_url() if started_here() else DEFAULT_SOCKET)


def _answers(url: str) -> Any | None:
    import docker
    try:
        c = docker.DockerClient(base_url=url, timeout=10)
        c.ping()
        return c
    except Exception:  # docker.errors.DockerException, requests' ConnectionError, FileNotFoundError
        return None


def client() -> Any:
    """A docker SDK client of a reachable engine, or the one line saying none is and how to get one."""
    url = docker_host()
    c = _answers(url)
    if c is None:
        raise UserError(f"no Docker engine answers at {url}",
                        "start one with `rmqchaos docker up` (dockerd without a bridge, as root) or set DOCKER_HOST")
    return c


def up(timeout: float = 60) -> dict[str, Any]:
    """Start dockerd (idempotent: an engine already started here is kept); returns status()."""
    if started_here():
        return status()
    if os.geteuid() != 0:
        raise UserError("dockerd needs root", "run `rmqchaos docker up` as root, or point DOCKER_HOST at an engine")
    dockerd = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/local/sbin")  # root's PATH
    if not dockerd or not shutil.which("docker-init"):
        raise UserError("dockerd is not installed", "apt-get install docker.io (Debian's Docker engine)")
    h = home()
    for d in ("data", "exec"):
        (h / d).mkdir(parents=True, exist_ok=True)
    sock = h / "docker.sock"
    if len(str(h / "exec" / "containerd" / "containerd.sock.ttrpc")) > 100:  # unix socket paths max 107 bytes
        raise UserError(f"{h} is too deep a path for dockerd's sockets", "use a checkout with a shorter path")
    cmd = [dockerd, "-H", f"unix://{sock}", "--data-root", str(h / "data"), "--exec-root", str(h / "exec"),
           "--pidfile", str(h / "dockerd.pid"), "--storage-driver", "overlay2",
           "--exec-opt", "native.cgroupdriver=cgroupfs", *SAFE_FLAGS]  # cgroups named docker/<id>, no systemd
    proc = spawn(cmd, cwd=h, env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"},
                 log_file=h / "dockerd.log", new_session=True)
    record_spawn(_log(), "dockerd", proc, cmd)
    say(f"waiting for dockerd (pid {proc.pid}) on {sock}")
    try:
        def alive() -> None:
            if proc.poll() is not None:
                raise UserError(f"dockerd exited with status {proc.returncode} while starting",
                                f"see {h / 'dockerd.log'}")
        poll_until(lambda: _answers(f"unix://{sock}"), timeout, "dockerd to answer", interval=0.2, check=alive,
                   hint=f"see {h / 'dockerd.log'}")
        _check_no_bridge(f"unix://{sock}")
    except BaseException:
        down()
        raise
    return status()


def _check_no_bridge(url: str) -> None:
    c = _answers(url)
    bad = [n.name for n in c.networks.list() if n.attrs.get("Driver") not in ("host", "null")] if c else []
    if bad:
        raise UserError(f"the engine at {url} has bridge networks ({', '.join(bad)})",
                        "start dockerd with --bridge=none and remove user networks")


def status() -> dict[str, Any]:
    url = docker_host()
    c = _answers(url)
    info = c.version() if c else {}
    return {"docker_host": url, "answers": c is not None, "server_version": info.get("Version"),
            "api_version": info.get("ApiVersion"), "dockerd_pid": started_here(), "log": str(home() / "dockerd.log")}


def mounts() -> list[str]:
    """Mount points under the engine's directories (dockerd bind-mounts exec/netns/default)."""
    with open("/proc/self/mountinfo") as f:
        points = [ln.split()[4] for ln in f]
    return [p for p in points if p.startswith(str(home().resolve()) + "/")]  # /proc lists resolved paths


def down() -> list[str]:
    """Stop the dockerd started here, by pid (SIGTERM, then SIGKILL); its containers stop with it.
    Then the mounts it leaves behind (its default network namespace's) are unmounted."""
    done = []
    for name, (pid, st) in _log().running().items():
        how = stop_pid(pid, st, 30)
        _log().record_exit(name, pid, how)
        done.append(f"{name} pid {pid}: {how}")
    if started_here() is None:
        for m in sorted(mounts(), reverse=True):
            r = subprocess.run(["umount", m], capture_output=True, text=True, timeout=30)
            done.append(f"unmounted {m}" if r.returncode == 0 else f"could not unmount {m}: {r.stderr.strip()}")
    return done
