"""A release with patches (cluster.patches): each module a patch touches rebuilt from the release's own
`-sources` jar with the patches applied, compiled against the release's other jars, and put in place of
the release's jar in .cache/rocketmq-<version>+p<hash12>/ (every other file a hard link of the release's).

A patch is a unified diff against upstream's source tree (git's a/ b/ prefixes): `broker/src/main/java/...`
rebuilds rocketmq-broker, `store/...` rocketmq-store, and so on for every module whose jar the release
runs; `dledger/src/main/java/...` (the layout of openmessaging/dledger) rebuilds the DLedger jar the
release pins. Files under a module's src/test/ are left out (a sources jar holds no tests)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any, Sequence

from rmqchaos.errors import UserError
from rmqchaos.machine import paths
from rmqchaos.progress import say
from rmqchaos.rocketmq import dist

JAVAC_TIMEOUT = 1800.0  # rocketmq-broker's 167 files (5.5.0) compile in ~6 s on 2 cores; proxy or store longer
# Compiled in this order, each against the ones rebuilt before it: a module's dependencies first
# (upstream's reactor order; a module not named here comes last).
ORDER = ("dledger", "logging", "common", "remoting", "auth", "acl", "srvutil", "filter", "client", "store",
         "tieredstore", "controller", "broker", "namesrv", "tools", "proxy", "container", "openmessaging", "example")
_HEADER = re.compile(r"^(?:---|\+\+\+) (?:\"?[ab]/)?([^\t\n\"]+)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def digest(version: str, patches: Sequence[Path]) -> str:
    """What the build depends on: the release and each patch's bytes, in order (not their names)."""
    h = hashlib.sha256(f"{version}\n".encode())
    for p in patches:
        b = _read(p)
        h.update(f"{len(b)}\n".encode() + b)
    return h.hexdigest()[:12]


def key(version: str, patches: Sequence[Path]) -> str:
    """The cache key and directory suffix: `5.5.0+p<hash12>` (rmqchaos.rocketmq.dist reads it as a version)."""
    return f"{version}{dist.PATCHED_MARK}{digest(version, patches)}"


def label(version: str, patches: Sequence[Path]) -> str:
    """How a run names it: `5.5.0+fix.patch(<hash12>)`, every patch's file name in order."""
    return f"{version}+{'+'.join(p.name for p in patches)}({digest(version, patches)})"


def _read(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as e:
        raise UserError(f"{p}: cannot read the patch: {e.strerror}", "check cluster.patches") from None


def files(text: str) -> list[str]:
    """The paths a unified diff changes, in order (the new path; the old one for a deletion)."""
    out: list[str] = []
    old: str | None = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if not m:
            continue
        path = m.group(1).strip()
        if line.startswith("---"):
            old = None if path == "/dev/null" else path
        else:
            path = old if path == "/dev/null" and old else path
            if path != "/dev/null" and path not in out:
                out.append(path)
    return out


def module_of(path: str) -> str | None:
    """`broker/src/main/java/...` -> 'broker'; None for a test file (left out); UserError-worthy
    paths (outside src/main/java or src/main/resources) -> '' (the caller names the patch)."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1:3] == ["src", "test"]:
        return None
    if len(parts) > 4 and parts[1:3] == ["src", "main"] and parts[3] in ("java", "resources"):
        return parts[0]
    return ""


def lib_jar(lib: Path, module: str, version: str) -> Path | None:
    """The release's jar a source module builds: rocketmq-<module>-<version>.jar (tieredstore:
    rocketmq-tiered-store; a substituted module at its donor's version), or DLedger's dledger-<v>.jar."""
    want = module.replace("-", "")
    for j in sorted(lib.glob("*.jar")):
        m = re.match(r"^(rocketmq-)?([a-z-]+?)-(\d[\w.]*)$", j.stem)
        if not m or m.group(2).replace("-", "") != want:
            continue
        if module == "dledger" and not m.group(1):
            return j
        if m.group(1) and (m.group(3) == version or m.group(3) in dist.substituted(version).values()):
            return j
    return None


def modules(version: str, patches: Sequence[Path], lib: Path) -> dict[str, Path]:
    """module -> the release's jar it replaces, for every module the patches touch, in ORDER; a path
    no module of the release builds is one UserError line naming the patch and the path."""
    found: dict[str, Path] = {}
    for p in patches:
        text = _read(p).decode("utf-8", errors="replace")
        changed = files(text)
        if not changed:
            raise UserError(f"{p}: not a unified diff (no ---/+++ file headers)",
                            "make it with `git diff` or `git format-patch` in an apache/rocketmq checkout")
        for f in changed:
            m = module_of(f)
            if m is None:
                continue
            if not m:
                raise UserError(f"{p}: {f}: only a module's src/main/java and src/main/resources can be patched "
                                "into a release's jars", "leave build files out of the patch")
            jar = lib_jar(lib, m, version)
            if jar is None:
                raise UserError(f"{p}: {f}: {m}/ builds none of RocketMQ {version}'s runtime jars",
                                f"modules it runs: {', '.join(_runtime_modules(lib, version))}")
            found[m] = jar
    rank = {m: i for i, m in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda kv: rank.get(kv[0], len(ORDER))))


def _runtime_modules(lib: Path, version: str) -> list[str]:
    out = [m.group(1).replace("tiered-store", "tieredstore") for j in sorted(lib.glob(f"rocketmq-*-{version}.jar"))
           if (m := re.match(rf"^rocketmq-([a-z-]+)-{re.escape(version)}$", j.stem))]
    return out + (["dledger"] if any(lib.glob("dledger-*.jar")) else [])


def ensure(version: str, patches: Sequence[Path]) -> Path:
    """The patched release's directory (built on first use: progress lines; cached by key(); a lock
    as for a release). A patch that does not apply, or a module that does not compile with it, is
    one UserError line naming the patch, the file and the hunk or line."""
    base = dist.ensure(version)
    k = key(version, patches)
    return dist.cached(k, lambda: _build(version, list(patches), base, k))


def describe(k: str) -> dict[str, Any]:
    """What the patched release's directory was built from (its patches.json), {} for a plain release."""
    f = dist.home(k) / "patches.json"
    return json.loads(f.read_text()) if dist.PATCHED_MARK in k and f.is_file() else {}


def _build(version: str, patches: list[Path], base: Path, k: str) -> None:
    java, javac, mvn = shutil.which("java"), shutil.which("javac"), shutil.which("mvn")
    if not (java and javac and mvn):
        raise UserError(f"RocketMQ {version} with patches needs java, javac and mvn on PATH", "run `make setup`")
    todo = modules(version, patches, base / "lib")
    if not todo:
        raise UserError(f"{', '.join(str(p) for p in patches)}: changes no main source of any module "
                        "(only tests?)", "a patch for a release changes <module>/src/main/...")
    work, t0 = paths.CACHE / f"build-{k}", time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    tree, log = work / "tree", paths.CACHE / f"build-{k}.log"
    log.write_text("")
    say(f"RocketMQ {label(version, patches)}: rebuilding {', '.join(todo)} from the release's sources jars "
        "(first use of these patches)")
    try:
        for m, jar in todo.items():
            _unpack(m, jar, _sources_jar(mvn, jar, work, log), tree)
        for p in patches:
            _apply(p, tree, version)
        out = work / "out"
        paths.link_tree(base, out)  # every file of the release, hard-linked; the rebuilt jars replace theirs
        built: list[Path] = []
        for m, jar in todo.items():
            classes = _compile(javac, m, jar, tree, work, out / "lib", todo, built, patches, version, log)
            (out / "lib" / jar.name).unlink()  # a hard link to the release's jar: never written through
            _jar(jar, classes, tree / m / "src" / "main" / "resources", out / "lib" / jar.name)
            built.append(out / "lib" / jar.name)
        (out / "config-keys.json").unlink()  # a hard link to the release's: rewritten, never written through
        dist.write_config_keys(java, k, out)  # a patch may add a config key
        (out / "patches.json").write_text(json.dumps(
            {"version": version, "key": k, "label": label(version, patches), "modules": {m: j.name for m, j in todo.items()},
             "patches": [{"name": p.name, "sha256": hashlib.sha256(_read(p)).hexdigest(), "files": files(_read(p).decode(
                 "utf-8", errors="replace"))} for p in patches]}, indent=2) + "\n")
        shutil.move(log, out / "build.log")  # kept with what it built (a failed build's stays where its line says)
        (out / ".setup-stamp").unlink(missing_ok=True)
        (out / ".setup-stamp").write_text(dist.stamp_key(k) + "\n")
        shutil.rmtree(dist.home(k), ignore_errors=True)
        out.rename(dist.home(k))
    except UserError as e:
        if str(log) not in e.line():  # a patch that does not apply: its line says all, nothing to keep
            log.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"RocketMQ {label(version, patches)} built into {dist.home(k)} ({time.monotonic() - t0:.0f} s)")


def _coords(jar: Path) -> tuple[str, str, str]:
    """groupId, artifactId, version of a jar Maven built (its META-INF/maven/*/*/pom.properties)."""
    with zipfile.ZipFile(jar) as z:
        for n in z.namelist():
            if n.startswith("META-INF/maven/") and n.endswith("/pom.properties"):
                props = dict(ln.split("=", 1) for ln in z.read(n).decode().splitlines() if "=" in ln
                             and not ln.startswith("#"))
                return props["groupId"].strip(), props["artifactId"].strip(), props["version"].strip()
    raise UserError(f"{jar}: no Maven coordinates inside (META-INF/maven/.../pom.properties)",
                    f"remove {jar.parent.parent} to resolve the release again")


def _sources_jar(mvn: str, jar: Path, work: Path, log: Path) -> Path:
    g, a, v = _coords(jar)
    dest = work / "sources"
    dest.mkdir(parents=True, exist_ok=True)
    say(f"fetching {a}-{v}-sources.jar from Maven")
    rc = dist.maven(mvn, work, ["dependency:copy", f"-Dartifact={g}:{a}:{v}:jar:sources", f"-DoutputDirectory={dest}"],
                    log, append=True)
    got = dest / f"{a}-{v}-sources.jar"
    if rc != 0 or not got.is_file():
        raise UserError(f"{g}:{a}:{v}: its sources jar does not resolve from Maven ({dist.maven_reason(log)}; log: {log})",
                        "a patch needs the release's -sources jar of every module it touches")
    return got


def _unpack(module: str, jar: Path, sources: Path, tree: Path) -> None:
    """tree/<module>/src/main/java: the sources jar's .java files; src/main/resources: the release jar's
    other files (what a patch to a resource changes, and what goes back into the jar)."""
    for z, sub, take in ((zipfile.ZipFile(sources), "java", lambda n: n.endswith(".java")),
                         (zipfile.ZipFile(jar), "resources", lambda n: not n.endswith((".class", "/")))):
        with z:
            root = (tree / module / "src" / "main" / sub).resolve()
            for n in z.namelist():
                dest = (root / n).resolve()
                if take(n) and dest.is_relative_to(root):  # no entry may write outside the tree
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(z.read(n))


def _apply(patch: Path, tree: Path, version: str) -> None:
    """`git apply` of one patch (all or nothing) in the tree, outside any git repository (a discovered
    one would make git apply skip paths outside the directory, silently); test files left out."""
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    r = subprocess.run(["git", "apply", "-p1", "--whitespace=nowarn", "--exclude=*/src/test/*", str(patch.resolve())],
                       cwd=tree, capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        raise UserError(f"{patch}: does not apply to RocketMQ {version}'s sources: {failed_hunk(patch, r.stderr)}",
                        "make the patch against that release's tag (git diff rocketmq-all-" + version + ")")
    say(f"applied {patch.name}")


def failed_hunk(patch: Path, stderr: str) -> str:
    """Where `git apply` stopped, in the patch's own terms: the file and the hunk's @@ header and line."""
    m = re.search(r"error: patch failed: (.+):(\d+)$", stderr, re.M)
    if m:
        f, start = m.group(1), int(m.group(2))
        current = None
        for n, line in enumerate(_read(patch).decode("utf-8", errors="replace").splitlines(), 1):
            h = _HEADER.match(line)
            if h and line.startswith("+++"):
                current = h.group(1).strip()
            elif current == f and (hm := _HUNK.match(line)) and int(hm.group(1)) == start:
                return f"{f}: hunk `{line.split(' @@')[0]} @@` (line {n} of the patch) does not match"
        return f"{f}: the hunk at its line {start} does not match"
    m = re.search(r"error: (.+?): (No such file or directory|does not exist in index)", stderr)
    if m:
        return f"{m.group(1)}: no such file in the release's sources"
    m = re.search(r"error: (.+?): already exists", stderr)
    if m:
        return f"{m.group(1)}: the patch creates it, but the release has it"
    return next((ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error")), "git apply failed")


def _compile(javac: str, module: str, jar: Path, tree: Path, work: Path, lib: Path, todo: dict[str, Path],
             built: list[Path], patches: list[Path], version: str, log: Path) -> Path:
    """The module's whole source tree compiled for the Java the release targets (its class files'
    major version), against the release's jars minus every rebuilt module's, the ones rebuilt first ahead."""
    src = tree / module / "src" / "main" / "java"
    sources = sorted(str(p) for p in src.rglob("*.java"))
    classes = work / "classes" / module
    classes.mkdir(parents=True)
    (work / f"{module}.sources").write_text("\n".join(sources) + "\n")
    replaced = {j.name for j in todo.values()}
    cp = [str(b) for b in built] + [str(j) for j in sorted(lib.glob("*.jar")) if j.name not in replaced]
    target = str(_target(jar))
    say(f"compiling {module} ({len(sources)} files, Java {target} class files)")
    r = subprocess.run([javac, "-d", str(classes), "-cp", os.pathsep.join(cp), "-encoding", "UTF-8", "-proc:none",
                        "-nowarn", "-Xlint:-options", "-XDignore.symbol.file", "-source", target, "-target", target,
                        "-Xmaxerrs", "20", f"@{work / f'{module}.sources'}"], cwd=tree, capture_output=True, text=True,
                       errors="replace", timeout=JAVAC_TIMEOUT)
    with open(log, "a") as lf:  # after Maven's output (its colour codes would precede javac's first line)
        lf.write(f"\n--- javac {module}\n{r.stdout}{r.stderr}")
    if r.returncode != 0:
        raise UserError(compile_error(r.stdout + r.stderr, tree, patches, module, version) + f" (log: {log})",
                        "fix the patch so that the module compiles against the release")
    return classes


def compile_error(output: str, tree: Path, patches: list[Path], module: str, version: str) -> str:
    """javac's first error as one line, naming the patch that changed that file (else every patch)."""
    m = re.search(r"^(.+?\.java):(\d+): error: (.*)$", output, re.M)
    if not m:
        return f"{', '.join(p.name for p in patches)}: RocketMQ {version}'s {module} does not compile with the patches"
    f = m.group(1)
    rel = os.path.relpath(f, tree) if os.path.isabs(f) else f
    blame = [p for p in patches if rel in files(_read(p).decode("utf-8", errors="replace"))] or patches
    return (f"{', '.join(str(p) for p in blame)}: RocketMQ {version}'s {module} does not compile with it: "
            f"{rel}:{m.group(2)}: {m.group(3)}")


def _target(jar: Path) -> int:
    """The Java release the jar's classes were built for (class file major version - 44; 52: Java 8)."""
    with zipfile.ZipFile(jar) as z:
        name = next((n for n in z.namelist() if n.endswith(".class")), None)
        if name is None:
            return 8
        major = struct.unpack(">H", z.read(name)[6:8])[0]
    return major - 44


def _jar(orig: Path, classes: Path, resources: Path, dest: Path) -> None:
    """The rebuilt jar: the compiled classes and the resources (the release jar's other files, as the
    patches left them), its manifest first as the release's was."""
    entries = sorted(p for p in [*classes.rglob("*"), *resources.rglob("*")] if p.is_file())
    manifest = resources / "META-INF" / "MANIFEST.MF"
    tmp = dest.with_name(f".{dest.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        if manifest.is_file():
            z.write(manifest, "META-INF/MANIFEST.MF")
        for p in entries:
            if p != manifest:
                z.write(p, str(p.relative_to(classes if p.is_relative_to(classes) else resources)))
    tmp.rename(dest)
