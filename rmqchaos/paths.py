"""Where things live: the repo's caches, the jars of a RocketMQ version, the platform's state dir."""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from rmqchaos.errors import UserError

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache"


def module_env() -> dict[str, str]:
    """This environment with the repository on PYTHONPATH: for `python -m <our module>` children
    (the load process, the cluster monitor) started from any working directory."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def state_home() -> Path:
    """Registry of runs with live processes, and the default `cluster up` run directory."""
    return Path(os.environ.get("RMQCHAOS_HOME", REPO / ".rmqchaos"))


def runs_dir() -> Path:
    return Path(os.environ.get("RMQCHAOS_RUNS", REPO / "runs"))


@lru_cache(maxsize=1)
def pinned_rocketmq_version() -> str:
    """The version pinned in pom.xml (the one place it is pinned)."""
    m = re.search(r"<rocketmq\.version>([^<]+)</rocketmq\.version>", (REPO / "pom.xml").read_text())
    if not m:
        raise UserError("pom.xml has no <rocketmq.version>", "restore it from git")
    return m.group(1).strip()


def rocketmq_home(version: str) -> Path:
    """Directory with lib/ (all RocketMQ runtime jars), rmqchaos-java.jar and config-keys.json."""
    home = CACHE / f"rocketmq-{version}"
    if not (home / "lib").is_dir() or not (home / "rmqchaos-java.jar").is_file():
        raise UserError(f"RocketMQ {version} jars are not installed in {home}",
                        f"run `make setup ROCKETMQ_VERSION={version}`")
    return home


def loopback_shim() -> Path:
    shim = CACHE / "native" / "libloopback_bind.so"
    if not shim.is_file():
        raise UserError(f"{shim} is missing", "run `make setup`")
    return shim
