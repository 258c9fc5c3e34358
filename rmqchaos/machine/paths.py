"""Where things live: the repo's caches, the jars of a RocketMQ version, the platform's state dir."""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from rmqchaos.errors import UserError

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"


def user_cache() -> Path:
    """Artifacts keyed by their whole content (a RocketMQ version's resolved jars with the Java module
    built from given sources, the image's Debian rootfs), shared by every checkout of this user as
    ~/.m2 and pip's cache are: a fresh clone links them instead of building them again.
    $RMQCHAOS_CACHE, else $XDG_CACHE_HOME/rmqchaos, else ~/.cache/rmqchaos."""
    if os.environ.get("RMQCHAOS_CACHE"):
        return Path(os.environ["RMQCHAOS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rmqchaos"


def link_tree(src: Path, dest: Path) -> None:
    """`src` copied to `dest` (which must not exist) as hard links where the file system allows, else
    as copies; through a temporary name, so `dest` appears whole or not at all."""
    import shutil

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:  # another file system, or links not allowed
            shutil.copy2(a, b)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp, copy_function=link, symlinks=True)
    tmp.rename(dest)


def module_env() -> dict[str, str]:
    """This environment with the repository on PYTHONPATH: for `python -m <our module>` children
    (the load process, the cluster monitor) started from any working directory."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def state_home() -> Path:
    """Registry of runs with live processes, and the default `cluster up` run directory."""
    return Path(os.environ.get("RMQCHAOS_HOME", REPO / ".rmqchaos"))


def history_db() -> Path:
    """The run history (analysis/history/history.py): $RMQCHAOS_HISTORY, else history.duckdb under the state dir."""
    return Path(os.environ.get("RMQCHAOS_HISTORY") or state_home() / "history.duckdb")


@lru_cache(maxsize=1)
def platform_commit() -> str | None:
    """The platform's git commit (with `-dirty` when the work tree has changes), None outside a git
    checkout: recorded in each run's versions.json so the history can tell which code made a run."""
    import subprocess
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def runs_dir() -> Path:
    return Path(os.environ.get("RMQCHAOS_RUNS", REPO / "runs"))


@lru_cache(maxsize=1)
def pinned_rocketmq_version() -> str:
    """The version pinned in pom.xml (the one place it is pinned)."""
    m = re.search(r"<rocketmq\.version>([^<]+)</rocketmq\.version>", (REPO / "pom.xml").read_text())
    if not m:
        raise UserError("pom.xml has no <rocketmq.version>", "restore it from git")
    return m.group(1).strip()


def loopback_shim() -> Path:
    shim = CACHE / "native" / "libloopback_bind.so"
    if not shim.is_file():
        raise UserError(f"{shim} is missing", "run `make setup`")
    return shim
