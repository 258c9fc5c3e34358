"""`rmqchaos image build`: the RocketMQ image, built offline (no registry is reachable here, nothing
is ever pulled). A Debian bookworm rootfs with Debian's `openjdk-17-jre-headless` (debootstrap from
the Debian mirror apt already uses, kept in the user cache: rmqchaos.machine.paths.user_cache), plus the Maven-resolved jars of the
pinned RocketMQ in the official image's layout (/home/rocketmq/rocketmq-VERSION/lib), the loopback
bind() shim as LD_PRELOAD and the disk-noise programs (redis-server, fio, python3), imported with
`docker import` as rmqchaos/rocketmq:VERSION.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from cluster.plan import logconf
from cluster.plan.compose import HOME, image_tag, rocketmq_home
from cluster.container import engine
from rmqchaos.machine import paths
from rmqchaos.rocketmq import dist as rocketmq_dist
from rmqchaos.errors import UserError
from rmqchaos.progress import say

SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
# the noise programs too (python3 for the Redis driver of the compose file's noise services): noise on
# the docker backend and in docker-compose.yml runs as containers of this image
PACKAGES = ["openjdk-17-jre-headless", "redis-server", "fio", "python3"]
SHIM = "/usr/local/lib/rmqchaos/libloopback_bind.so"
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"


def _rootfs() -> Path:
    """The JRE rootfs, made once per package set (debootstrap ~35 s, ~350 MB)."""
    key = hashlib.sha256(f"{SUITE} {MIRROR} {PACKAGES}".encode()).hexdigest()[:12]
    d = paths.user_cache() / "image" / f"rootfs-{key}"  # its key names all it holds: shared by checkouts
    if (d / ".complete").is_file():
        return d
    if not shutil.which("debootstrap"):
        raise UserError("debootstrap is not installed", "apt-get install debootstrap")
    shutil.rmtree(d, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    say(f"debootstrap {SUITE} with {', '.join(PACKAGES)} into {d} (once; about a minute)")
    log = d.parent / "debootstrap.log"
    with open(log, "wb") as out:
        rc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(d),
                             MIRROR], stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
    if rc != 0:
        raise UserError(f"debootstrap failed (exit {rc})", f"see {log}")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for f in (d / junk).glob("*"):
            if f.is_file():
                f.unlink()
    (d / ".complete").write_text("")
    return d


def shim_digest() -> str:
    """Which loopback shim an image carries: an older one does not bind a node's outgoing connections."""
    return hashlib.sha256(paths.loopback_shim().read_bytes()).hexdigest()[:12]


def check_current(img: Any) -> None:
    """Refuse an image built by an older rmqchaos: another package set (no noise programs) or another
    loopback shim."""
    have = (img.attrs.get("Config") or {}).get("Labels") or {}
    name = img.tags[0] if img.tags else img.short_id
    if have.get("rmqchaos.packages") != ",".join(PACKAGES):
        raise UserError(f"image {name} was built by an older rmqchaos "
                        f"(packages {have.get('rmqchaos.packages') or 'not recorded'}; now {','.join(PACKAGES)})",
                        "rebuild it offline with `rmqchaos image build`")
    if have.get("rmqchaos.shim") != shim_digest():
        raise UserError(f"image {name} was built by an older rmqchaos (another loopback shim)",
                        "rebuild it offline with `rmqchaos image build`")


def build(version: str | None = None) -> dict[str, Any]:
    """Build (or rebuild) rmqchaos/rocketmq:VERSION in the engine `engine.client()` reaches."""
    version = version or paths.pinned_rocketmq_version()
    jars = rocketmq_dist.rocketmq_home(version)
    shim = paths.loopback_shim()
    import docker
    c = engine.client()
    t0 = time.monotonic()
    root = _rootfs()
    app = root / rocketmq_home(version).lstrip("/")
    shutil.rmtree(root / HOME.lstrip("/"), ignore_errors=True)
    shutil.copytree(jars / "lib", app / "lib")
    for role in logconf.ROLES:  # a 4.x server reads its logging setup from $ROCKETMQ_HOME/conf (compose render)
        logconf.write(app, version, role)
    for d in ("store", "logs", "conf"):
        (root / HOME.lstrip("/") / d).mkdir(parents=True, exist_ok=True)
    (root / SHIM.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shim, root / SHIM.lstrip("/"))
    tag = image_tag(version)
    try:
        old = c.images.get(tag).id
    except docker.errors.ImageNotFound:
        old = None
    say(f"importing {root} as {tag}")
    changes = [f"ENV JAVA_HOME={JAVA_HOME}", f"ENV ROCKETMQ_HOME={rocketmq_home(version)}",
               f"ENV LD_PRELOAD={SHIM}",  # the HA acceptor binds the wildcard address; the shim makes it 127.0.0.1
               f"ENV PATH={JAVA_HOME}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               f"WORKDIR {rocketmq_home(version)}", f"LABEL rmqchaos.rocketmq_version={version}",
               f"LABEL rmqchaos.packages={','.join(PACKAGES)}", f"LABEL rmqchaos.shim={shim_digest()}"]
    tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "--exclude=./.complete", "-cf", "-", "."],
                           stdout=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        repo, _, t = tag.partition(":")
        c.api.import_image_from_stream(tar.stdout, repository=repo, tag=t, changes=changes)
    finally:
        tar.stdout.close()
        tar.wait()
    if tar.returncode != 0:
        raise UserError(f"tar of {root} failed (exit {tar.returncode})", "rerun `rmqchaos image build`")
    img = c.images.get(tag)
    if old and old != img.id:  # the image this one replaces, untagged now: removed unless a container uses it
        try:
            c.images.remove(old)
        except docker.errors.APIError:
            pass
    return {"image": tag, "id": img.short_id, "size_mb": round(img.attrs["Size"] / 2**20),
            "seconds": round(time.monotonic() - t0, 1)}
