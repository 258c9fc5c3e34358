"""A RocketMQ version's jars on this machine: resolved with Maven on first use, cached in
.cache/rocketmq-<version>/ (lib/, rmqchaos-java.jar built against that version, config-keys.json
read from those jars by reflection). The one place the Maven resolution lives: scripts/setup.sh
calls it for the pinned version (`python -m rmqchaos.rocketmq.dist VERSION`), a scenario naming
another version (cluster.rocketmq_version) calls it when the spec is validated."""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from rmqchaos.machine import paths
from rmqchaos.errors import UserError
from rmqchaos.progress import say

# Checked with `mvn dependency:get` / a full resolution here (issue 37): every artifact of pom.xml
# (namesrv, broker, proxy, tools, client, example) at that version is on Maven Central. 4.x does not
# resolve (no rocketmq-proxy; rocketmq-broker 4.9.8 is not found either), nor do 5.1.3
# (rocketmq-namesrv 5.1.3 not found) and 5.1.4 (rocketmq-proxy 5.1.4 not found), tried 2026-11-28.
# 5.3.2 did not resolve on 2026-11-30 (the rocketmq-controller 5.3.2 jar, and rocketmq-namesrv and -proxy
# 5.3.1 to stand in, not found): the list names the releases, the `expect:` versions are checked against it.
# 4.x (issue 67), each resolved here and its cluster up with the witness passing (2026-12-07): 4.6.0,
# 4.6.1 and 4.7.0 whole, the others with an older release's rocketmq-example (4.7.0's now; 4.6.0's
# when tried). 4.9.1 and 4.9.2 resolve and run, but their mqadmin never exits after checkMsgSendRT
# (its sends done), so the witness times out: left out. 4.9.6 and 4.9.8 have no broker on Maven Central.
KNOWN_TO_RESOLVE = ("4.6.0", "4.6.1", "4.7.0", "4.7.1", "4.8.0", "4.9.0", "4.9.3", "4.9.4", "4.9.5", "4.9.7",
                    "5.1.0", "5.1.1", "5.2.0", "5.3.0", "5.3.1", "5.3.2", "5.3.3", "5.4.0", "5.5.0")
_VERSION = re.compile(r"^[45]\.\d{1,3}\.\d{1,3}$")
OLDEST = (4, 6, 0)  # the oldest release the platform runs (the flood incident's, seed 002)

# Every release from 4.6.0 and what of it Maven Central does not serve (empty: all of it): what a
# substitute is looked for (`donors` skips a release lacking the piece) and what `rmqchaos bisect`
# offers. It runs mixed, said in one line, unless it lacks a core module (CORE): a release runs only
# on its own, so that version is skipped. 5.x tried 2026-11-28/29 (../shared/README.md; 5.3.4's poms
# 2026-11-30: only its broker, store, namesrv and controller exist). 4.x, each jar asked of Maven
# Central 2026-12-07: rocketmq-example is published up to 4.7.0 only; 4.9.6 has no broker, namesrv,
# store, srvutil, filter, tools or acl; 4.9.8 no broker (not offered).
_NO_EXAMPLE = ("rocketmq-example",)
RELEASED: dict[str, tuple[str, ...]] = {
    "4.6.0": (), "4.6.1": (), "4.7.0": (), "4.7.1": _NO_EXAMPLE, "4.8.0": _NO_EXAMPLE, "4.9.0": _NO_EXAMPLE,
    "4.9.1": _NO_EXAMPLE, "4.9.2": _NO_EXAMPLE, "4.9.3": _NO_EXAMPLE, "4.9.4": _NO_EXAMPLE, "4.9.5": _NO_EXAMPLE,
    "4.9.6": ("rocketmq-broker", "rocketmq-namesrv", "rocketmq-store", "rocketmq-srvutil", "rocketmq-filter",
              "rocketmq-tools", "rocketmq-acl", "rocketmq-example"),
    "4.9.7": _NO_EXAMPLE,
    "5.0.0": (), "5.1.0": (), "5.1.1": (), "5.1.2": ("rocketmq-namesrv",), "5.1.3": ("rocketmq-namesrv",),
    "5.1.4": ("rocketmq-proxy",), "5.2.0": (), "5.3.0": (), "5.3.1": (), "5.3.2": (), "5.3.3": (),
    "5.3.4": ("rocketmq-common", "rocketmq-remoting", "rocketmq-srvutil", "rocketmq-filter", "rocketmq-proxy",
              "rocketmq-client", "rocketmq-tools"),
    "5.4.0": (), "5.5.0": (),
    "5.5.1": ("rocketmq-namesrv", "rocketmq-proxy", "rocketmq-client"),
}

MAVEN_TIMEOUT = 1800.0  # a first resolution downloads ~150 MB of jars
# What a release may lack and still run here, mixed, saying so (the version's substituted.json, each
# run's versions.json, a line at `up`). Client-side programs (the witness check's benchmark Producer,
# mqadmin, the Java consumer's client): the pinned version's, as a newer client talks to an older
# broker in production (rocketmq-example 5.3.3; rocketmq-client and rocketmq-tools 5.3.4 are not on
# Maven Central). namesrv and proxy: the nearest older release known to resolve (5.5.1 has no
# rocketmq-namesrv or rocketmq-proxy). Never the broker, store, controller or their common modules:
# those are the version, pinned as direct dependencies whenever anything is substituted (else
# Maven's nearest-first mediation could take a substitute's rocketmq-common).
CLIENT_SIDE = ("rocketmq-example", "rocketmq-client", "rocketmq-tools")
SERVER_SIDE = ("rocketmq-namesrv", "rocketmq-proxy")
CORE = ("rocketmq-common", "rocketmq-remoting", "rocketmq-store", "rocketmq-controller", "rocketmq-srvutil",
        "rocketmq-filter")  # every 5.x release has these (rocketmq-auth only since 5.3.0: left to mediation)


def major(version: str) -> int:
    """4 or 5: what a release has (4.x: no proxy, no controller mode, no POP, no timer wheel)."""
    return int(version.split(".", 1)[0])


def version_key(version: str) -> tuple[int, ...]:
    """A release number's sort key: 4.9.7 < 5.1.0 < 5.10.0."""
    return tuple(int(x) for x in version.split("."))


def known() -> str:
    return ", ".join(known_versions())


def known_versions() -> list[str]:
    """The versions known to resolve, the pinned one and any other already in the cache."""
    cached = [d.name.removeprefix("rocketmq-") for d in paths.CACHE.glob("rocketmq-*") if d.is_dir()
              and _VERSION.match(d.name.removeprefix("rocketmq-"))]
    return sorted({*KNOWN_TO_RESOLVE, paths.pinned_rocketmq_version(), *cached}, key=version_key)


def stamp_key(version: str) -> str:
    """What the cached directory was built from: pom.xml, the Java module's sources and the version
    (the same digest setup.sh always wrote, so an existing cache stays valid)."""
    h = hashlib.sha256((paths.REPO / "pom.xml").read_bytes())
    for f in sorted(str(p.relative_to(paths.REPO)) for p in (paths.REPO / "java" / "src").rglob("*") if p.is_file()):
        h.update((paths.REPO / f).read_bytes())
    h.update(f"{version}\n".encode())
    return h.hexdigest()[:16]


def home(version: str) -> Path:
    return paths.CACHE / f"rocketmq-{version}"


def installed(version: str) -> bool:
    """The version's directory is complete and built from today's pom.xml and Java sources."""
    d = home(version)
    stamp = d / ".setup-stamp"
    return ((d / "lib").is_dir() and (d / "rmqchaos-java.jar").is_file() and (d / "config-keys.json").is_file()
            and (d / "grpc").is_dir()
            and stamp.is_file() and stamp.read_text().strip() == stamp_key(version))


def check_version(version: str) -> None:
    """One line for a version that cannot be resolved at all (not a 4.x or 5.x release number, or older
    than 4.6.0)."""
    if not _VERSION.match(version) or version_key(version) < OLDEST:
        raise UserError(f"RocketMQ version {version!r} cannot be resolved here (the platform runs 4.x releases from "
                        f"{'.'.join(map(str, OLDEST))} and 5.x releases from Maven Central)",
                        f"versions known to resolve: {known()}")


def rocketmq_home(version: str) -> Path:
    """Directory with lib/ (all RocketMQ runtime jars), grpc/ (the 5.x gRPC client), rmqchaos-java.jar and config-keys.json,
    resolved with Maven on the first use of the version. A patched release's key (`5.5.0+p<hash>`,
    rmqchaos/rocketmq/patched.py) names a directory its scenario's validation built."""
    if PATCHED_MARK in version:
        if not installed(version):
            raise UserError(f"RocketMQ {version} (a release with patches) is not built",
                            "validate the scenario that names its patches (rmqchaos validate F): that builds it")
        return home(version)
    return ensure(version)


PATCHED_MARK = "+p"  # a patched release's key: <version>+p<hash12> (rmqchaos/rocketmq/patched.py)


def ensure(version: str) -> Path:
    """The version's directory, resolving it with Maven first when it is missing or stale (one
    progress line; a lock so that two processes resolving the same version wait for one another).
    A version Maven cannot resolve is one UserError line naming it and the versions known to resolve."""
    check_version(version)
    return cached(version, lambda: _build(version))


def cached(key: str, build: Callable[[], None]) -> Path:
    """home(key), made by `build` when it is not `installed` (nor in the user cache): under a lock, so
    that two processes asking for the same key wait for one another; a fresh build is left in the user
    cache for the next checkout. `build` writes home(key) whole, with its .setup-stamp."""
    if installed(key):
        return home(key)
    paths.CACHE.mkdir(parents=True, exist_ok=True)
    with open(paths.CACHE / f"rocketmq-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed(key):  # another process may have built it while we waited
            if not _from_user_cache(key):
                build()
                _to_user_cache(key)
    return home(key)


def _shared(version: str) -> Path:
    """The user cache's copy of this version built from today's pom.xml and Java sources."""
    return paths.user_cache() / "rocketmq" / f"{version}-{stamp_key(version)}"


def _from_user_cache(version: str) -> bool:
    """Link a copy another checkout built from the same pom.xml and Java sources (its name says so; its
    stamp, read by `installed`, too)."""
    src, dest = _shared(version), home(version)
    if not (src / ".setup-stamp").is_file():  # none, or one still being written
        return False
    shutil.rmtree(dest, ignore_errors=True)
    paths.link_tree(src, dest)
    if not installed(version):  # a damaged shared copy: build instead
        shutil.rmtree(dest, ignore_errors=True)
        return False
    say(f"RocketMQ {version}: linked the jars another checkout resolved from the same pom.xml and Java sources ({src})")
    return True


def _to_user_cache(version: str) -> None:
    """Leave this build for the next checkout; the user cache keeps the two newest builds of a version."""
    dest = _shared(version)
    try:
        if not dest.exists():
            paths.link_tree(home(version), dest)
        old = sorted(dest.parent.glob(f"{version}-*"), key=lambda d: d.stat().st_mtime)[:-2]
        for d in old:
            shutil.rmtree(d, ignore_errors=True)
    except OSError as e:  # a read-only or full home: only the next checkout's speed is lost
        say(f"RocketMQ {version}: not kept in the user cache ({e})")


def _build(version: str) -> None:
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if not mvn or not java:
        raise UserError(f"RocketMQ {version} is not installed and {'mvn' if not mvn else 'java'} is not on PATH",
                        f"run `make setup` (then RocketMQ {version} resolves on first use)")
    dest, log = home(version), paths.CACHE / f"mvn-{version}.log"
    work = paths.CACHE / f"build-{version}"  # its own Maven project dir: target/ of no checkout is touched
    shutil.rmtree(work, ignore_errors=True)
    (work / "java").mkdir(parents=True)
    pom = (paths.REPO / "pom.xml").read_text()
    if major(version) == 4:  # 4.x has no proxy
        pom = "".join(ln for ln in pom.splitlines(keepends=True) if "<artifactId>rocketmq-proxy</artifactId>" not in ln)
    (work / "pom.xml").write_text(pom)
    shutil.copytree(paths.REPO / "java" / "src", work / "java" / "src")
    out = work / "out"
    say(f"resolving RocketMQ {version} with Maven into {dest} (first use of this version; a few minutes)")
    t0 = time.monotonic()
    substituted: dict[str, str] = {}
    while True:
        rc = _maven(mvn, work, version, out / "lib", log)
        # (artifact, the version Maven could not find): the asked one, or a donor not served either
        missing = set(re.findall(r"org\.apache\.rocketmq:(rocketmq-[a-z-]+):jar:(\d+\.\d+\.\d+)", _log_text(log)))
        if rc == 0 or not missing or not {a for a, _ in missing} <= {*CLIENT_SIDE, *SERVER_SIDE}:
            break
        nxt: dict[str, str] = {}
        stuck = False
        for a, v in missing:
            if v == version and a not in substituted:
                d = donor(version, a)
                if d is None:
                    stuck = True
                else:
                    nxt[a] = d
                continue
            # a donor not served today (itself or a jar it needs): the next one for what it stands in for
            for b in [b for b, d in substituted.items() if d == v]:
                tried = donors(version, b)
                after = tried[tried.index(v) + 1:]
                if not after:
                    stuck = True
                else:
                    nxt[b] = after[0]
            stuck = stuck or (v != version and v not in substituted.values())
        if stuck or not nxt:
            break  # an artifact no known release serves today
        pom = (work / "pom.xml").read_text()
        if not substituted:  # the version's own core modules first: they win Maven's mediation
            core = "".join(f"\n    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
                           f"<version>${{rocketmq.version}}</version></dependency>" for a in CORE
                           if not (a == "rocketmq-controller" and major(version) == 4))  # 5.0+
            pom = pom.replace("<dependencies>", "<dependencies>" + core, 1)
        for a, d in nxt.items():
            pom = pom.replace(f"<artifactId>{a}</artifactId><version>{substituted.get(a, '${rocketmq.version}')}</version>",
                              f"<artifactId>{a}</artifactId><version>{d}</version>")
            substituted[a] = d
        (work / "pom.xml").write_text(pom)
        shutil.rmtree(out, ignore_errors=True)
    if rc != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise UserError(f"RocketMQ {version} does not resolve from Maven ({maven_reason(log)}; log: {log})",
                        f"versions known to resolve: {', '.join(v for v in known_versions() if v != version)}")
    # the 5.x gRPC client (pom.xml scope provided): beside lib/, on the gRPC programs' classpath alone
    rc = _maven_copy(mvn, work, version, out / "grpc", log)
    if rc != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise UserError(f"RocketMQ {version}: the 5.x gRPC client does not resolve from Maven ({maven_reason(log)}; "
                        f"log: {log})", "check pom.xml's rocketmq.client.java.version")
    jar = next((work / "target").glob("rmqchaos-java-*.jar"))
    shutil.copy2(jar, out / "rmqchaos-java.jar")
    try:
        write_config_keys(java, version, out)
    except UserError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if substituted:
        import json
        (out / "substituted.json").write_text(json.dumps(substituted) + "\n")
    (out / ".setup-stamp").write_text(stamp_key(version) + "\n")
    shutil.rmtree(dest, ignore_errors=True)  # stale (another pom.xml or Java module): replaced whole
    out.rename(dest)
    shutil.rmtree(work, ignore_errors=True)
    say(f"RocketMQ {version} resolved into {dest} ({time.monotonic() - t0:.0f} s)")


def write_config_keys(java: str, version: str, out: Path) -> None:
    """out/config-keys.json: the broker's and namesrv's config keys read by reflection (io.rmqchaos.ConfigKeys)
    from out/rmqchaos-java.jar and the jars of out/lib (a patched release's own, which may add a key)."""
    keys = subprocess.run([java, "-cp", f"{out / 'rmqchaos-java.jar'}{os.pathsep}{out / 'lib'}/*",
                           "io.rmqchaos.ConfigKeys"], capture_output=True, text=True, timeout=120)
    if keys.returncode != 0:
        raise UserError(f"RocketMQ {version}: reading its config keys failed: "
                        f"{(keys.stderr.strip().splitlines() or ['no output'])[-1]}", "see the jars in " + str(out))
    (out / "config-keys.json").write_text(keys.stdout)


def donors(version: str, artifact: str) -> list[str]:
    """The versions whose `artifact` may stand in for `version`'s, the first to try first: for a 5.x
    client-side program the pinned one, else the releases of the same major known to resolve, the nearest
    older first, then the nearest newer (Maven Central serves a part of them on a given day:
    rocketmq-namesrv 5.3.0, 5.3.1 and 5.3.2 were all refused on 2026-11-30). Never across the majors: a
    piece of the other major brings its common modules onto the classpath."""
    if artifact in CLIENT_SIDE and major(version) == 5:
        return [paths.pinned_rocketmq_version()]
    same = [v for v in KNOWN_TO_RESOLVE if major(v) == major(version) and artifact not in RELEASED.get(v, ())]
    older = [v for v in same if version_key(v) < version_key(version)]
    newer = [v for v in same if version_key(v) > version_key(version)]
    return older[::-1] + newer or ([paths.pinned_rocketmq_version()] if major(version) == 5 else [])


def donor(version: str, artifact: str) -> str | None:
    """The first version to try for `artifact` in place of `version`'s (`donors`), or None."""
    return next(iter(donors(version, artifact)), None)


def substituted(version: str) -> dict[str, str]:
    """artifact -> the version standing in for it in `version`'s resolved directory ({}: none)."""
    import json
    f = home(version) / "substituted.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def maven(mvn: str, work: Path, args: list[str], log: Path, append: bool = False) -> int:
    """`mvn -B -q ARGS` in `work`, its output into `log`: the one way Maven is called (-1: it timed out)."""
    with open(log, "a" if append else "w") as lf:
        try:
            return subprocess.run([mvn, "-B", "-q", *args], cwd=work, stdout=lf, stderr=subprocess.STDOUT,
                                  timeout=MAVEN_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            return -1


def _maven(mvn: str, work: Path, version: str, lib: Path, log: Path) -> int:
    return maven(mvn, work, [f"-Drocketmq.version={version}", "package", "dependency:copy-dependencies",
                             "-DincludeScope=runtime", f"-DoutputDirectory={lib}", "-DskipTests"], log)


def _maven_copy(mvn: str, work: Path, version: str, dest: Path, log: Path) -> int:
    return maven(mvn, work, [f"-Drocketmq.version={version}", "dependency:copy-dependencies",
                             "-DincludeScope=provided", f"-DoutputDirectory={dest}"], log, append=True)


def _log_text(log: Path) -> str:
    try:
        return re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    except OSError:
        return ""


def maven_reason(log: Path) -> str:
    """The line of Maven's log that says why, shortened (e.g. 'Could not find artifact ...')."""
    text = _log_text(log)
    if not text:
        return "no Maven log"
    for pat in (r"Could not find artifact [^\s]+", r"Could not resolve dependencies[^:]*", r"COMPILATION ERROR",
                r"\[ERROR\] [^\n]{0,160}"):
        m = re.search(pat, text)
        if m:
            return m.group(0).replace("[ERROR] ", "")
    return "Maven failed"


def artifacts(name: str, coords: tuple[str, ...]) -> Path:
    """.cache/<name>/ holding the jars `coords` name (group:artifact:version each, pinned by the caller, no transitive
    dependency), copied from Maven Central on first use (a lock; one progress line). One that Maven does not serve is
    one UserError line naming it."""
    d = paths.CACHE / name
    if all((d / _jar_name(c)).is_file() for c in coords):
        return d
    mvn = shutil.which("mvn")
    if not mvn:
        raise UserError(f"{', '.join(coords)} not here and mvn is not on PATH", "run `make setup`")
    paths.CACHE.mkdir(parents=True, exist_ok=True)
    with open(paths.CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tmp, log = d.with_name(f".{name}.{os.getpid()}"), paths.CACHE / f"mvn-{name}.log"
        shutil.rmtree(tmp, ignore_errors=True)
        for c in coords:
            if (d / _jar_name(c)).is_file():
                continue
            say(f"resolving {c} with Maven into {d}")
            if maven(mvn, paths.CACHE, ["dependency:copy", f"-Dartifact={c}", f"-DoutputDirectory={tmp}"], log) != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise UserError(f"{c} does not resolve from Maven ({maven_reason(log)}; log: {log})",
                                "check the pinned coordinates and the network")
        d.mkdir(parents=True, exist_ok=True)
        for f in tmp.glob("*.jar") if tmp.is_dir() else ():
            f.rename(d / f.name)
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def _jar_name(coords: str) -> str:
    _, artifact, version = coords.split(":")
    return f"{artifact}-{version}.jar"


if __name__ == "__main__":  # scripts/setup.sh: python -m rmqchaos.rocketmq.dist VERSION
    try:
        print(ensure(sys.argv[1]))
    except UserError as e:
        print(f"[setup] error: {e.line()}", file=sys.stderr)
        sys.exit(1)
