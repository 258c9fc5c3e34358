"""The 5.x gRPC Java client (apache/rocketmq-clients: rocketmq-client-java, one shaded jar) at another
version than pom.xml's `rocketmq.client.java.version`, which every RocketMQ version's directory holds
in grpc/ (rocketmq_dist). Another one (cluster.proxy.client_version: an upstream report's, e.g.
#9583 with 5.0.8) is resolved with Maven on its first use into .cache/rocketmq-client-java-<v>/."""
from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from pathlib import Path

from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def pinned() -> str:
    """pom.xml's rocketmq.client.java.version."""
    m = re.search(r"<rocketmq\.client\.java\.version>([^<]+)<", (paths.REPO / "pom.xml").read_text())
    assert m, "pom.xml names no rocketmq.client.java.version"
    return m.group(1).strip()


def home(version: str) -> Path:
    return paths.CACHE / f"rocketmq-client-java-{version}"


def ensure(version: str) -> Path:
    """The directory holding that version's jar, resolved first when missing (one progress line; a
    version Maven does not serve is one UserError line)."""
    if not _VERSION.match(version):
        raise UserError(f"gRPC client version {version!r} is not a release number", "e.g. 5.0.8 or 5.2.0")
    d = home(version)
    if (d / f"rocketmq-client-java-{version}.jar").is_file():
        return d
    mvn = shutil.which("mvn")
    if not mvn:
        raise UserError(f"the gRPC client {version} is not here and mvn is not on PATH", "run `make setup`")
    paths.CACHE.mkdir(parents=True, exist_ok=True)
    with open(paths.CACHE / f"rocketmq-client-java-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / f"rocketmq-client-java-{version}.jar").is_file():
            say(f"resolving the 5.x gRPC client {version} with Maven into {d}")
            tmp = d.with_name(d.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            r = subprocess.run([mvn, "-B", "-q", "dependency:copy",
                                f"-Dartifact=org.apache.rocketmq:rocketmq-client-java:{version}",
                                f"-DoutputDirectory={tmp}"], capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                why = next((x for x in (r.stdout + r.stderr).splitlines() if "ERROR" in x), "Maven failed")
                raise UserError(f"the gRPC client rocketmq-client-java {version} does not resolve "
                                f"({why.replace('[ERROR] ', '')[:160]})", f"versions seen here: 5.0.8, 5.1.0, {pinned()}")
            shutil.rmtree(d, ignore_errors=True)
            tmp.rename(d)
    return d
