"""The 5.x gRPC Java client (apache/rocketmq-clients: rocketmq-client-java, one shaded jar) at another
version than pom.xml's `rocketmq.client.java.version`, which every RocketMQ version's directory holds
in grpc/ (rocketmq_dist). Another one (cluster.proxy.client_version: an upstream report's, e.g.
#9583 with 5.0.8) is resolved with Maven on its first use into .cache/rocketmq-client-java-<v>/."""
from __future__ import annotations

import re
from pathlib import Path

from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.rocketmq import dist

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
    try:
        return dist.artifacts(home(version).name, (f"org.apache.rocketmq:rocketmq-client-java:{version}",))
    except UserError as e:
        raise UserError(f"the gRPC client: {e.message}", f"versions seen here: 5.0.8, 5.1.0, {pinned()}") from None
