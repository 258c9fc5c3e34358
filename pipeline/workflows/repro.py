"""`rmqchaos unit-repro DIR --versions A,B`: a reproduction without rmqchaos, run against released jars. DIR holds
JUnit 4 tests written against RocketMQ's own classes, laid out as upstream's tree (java/repro/<finding>/store/src/
test/java/...: copied into a checkout of apache/rocketmq they run there with `mvn -pl store -am test -Dtest=...`). Each
version's run compiles them with javac against that release's jars (rmqchaos/rocketmq/dist.py) and the pinned JUnit,
runs every test class with JUnitCore and reads what it printed: passed, or which assertion failed where.

What a run leaves, in its directory: classes/, the JUnit output (junit.txt), the tests' files (tmp/, as
java.io.tmpdir) and RocketMQ's own logs (logs/rocketmqlogs/, under user.home)."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from cluster.plan.jvm import classpath, javac_command, jvm_command
from rmqchaos.errors import UserError
from rmqchaos.machine import paths
from rmqchaos.machine.procs import run_bounded
from rmqchaos.progress import say
from rmqchaos.rocketmq import dist, patched

# Upstream's pom pins junit 4.13.2 (5.3.3's, and develop's of 2025-09-19); the store tests there are JUnit 4 (58
# files import org.junit.Test, 3 use Jupiter). hamcrest-core 1.3 is junit 4.13.2's one dependency. Awaitility 4.1.0
# (what upstream's tests wait with) is a compile dependency of every 5.x release: in its lib/ already.
JUNIT = ("junit:junit:4.13.2", "org.hamcrest:hamcrest-core:1.3")
JUNIT_MAIN = "org.junit.runner.JUnitCore"
TIMEOUT_S = 300.0  # javac, or one JVM running every test class of DIR
TAIL_LINES = 40
RECORD = "unit-repro.json"  # beside the versions' directories: what `report-upstream --repro` reads
_TEST_FILE = re.compile(r"^(Test\w*|\w*Tests?|\w*TestCase)\.java$")  # surefire's default includes
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)
_FAILURE = re.compile(r"^\d+\) (?P<test>[^\n(]+)\((?P<cls>[\w.$]+)\)\n(?P<exc>[\w.$]+)(?::[ \t]*(?P<msg>[^\n]*))?"
                      r"(?P<trace>(?:\n\s+at [^\n]*|\n[^\n]*)*?)(?=\n\d+\) |\n\nFAILURES!!!|\Z)", re.M)


def test_classes(test_source_dir: str | Path) -> tuple[list[Path], list[str]]:
    """(every .java file under the directory, the test classes among them by surefire's default names). One line
    when there is none."""
    d = Path(test_source_dir)
    sources = sorted(p.resolve() for p in d.rglob("*.java")) if d.is_dir() else []
    classes = []
    for f in sources:
        if _TEST_FILE.match(f.name):
            m = _PACKAGE.search(f.read_text(errors="replace"))
            classes.append(f"{m.group(1)}.{f.stem}" if m else f.stem)
    if not classes:
        raise UserError(f"{d}: no JUnit test source here (*Test.java, Test*.java, *Tests.java, *TestCase.java)",
                        "give the folder that holds the reproduction, e.g. java/repro/all-ack-sync-state-set")
    return sources, classes


def parse_junit(out: str) -> tuple[bool, int, list[dict[str, Any]]]:
    """JUnitCore's report -> (passed, tests run, one dict per failure: test, exception, message, at: the first stack
    frame in the test's own class, e.g. 'AllAckInSyncStateSetShrinkTest.java:102')."""
    ok = re.search(r"^OK \((\d+) tests?\)", out, re.M)
    if ok:
        return True, int(ok.group(1)), []
    total = re.search(r"^Tests run: (\d+),\s+Failures: (\d+)", out, re.M)
    failures = []
    for m in _FAILURE.finditer(out):
        simple = m.group("cls").rsplit(".", 1)[-1]
        at = re.search(rf"at {re.escape(m.group('cls'))}\.[\w$<>]+\((\w+\.java:\d+)\)", m.group("trace") or "")
        failures.append({"test": m.group("test"), "class": simple, "exception": m.group("exc"),
                         "message": (m.group("msg") or "").strip(), "at": at.group(1) if at else None})
    if not total:  # the JVM never got to a report (a class not found, a crash)
        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
        return False, 0, failures or [{"test": None, "class": None, "exception": "no JUnit report",
                                        "message": last.strip(), "at": None}]
    return False, int(total.group(1)), failures


def run_unit_repro(test_source_dir: str | Path, version: str, out: str | Path | None = None) -> dict[str, Any]:
    """The reproduction in `test_source_dir` compiled and run against `version`'s jars (resolved with Maven on first
    use): {version, passed, tests_run, failures: [{test, class, exception, message, at}], output_tail, compiled,
    mixed (what of the release stood in: dist.substituted), dir}. A compile error or a run past TIMEOUT_S is a failure
    whose exception says so ('javac', 'timeout')."""
    sources, classes = test_classes(test_source_dir)
    home = dist.rocketmq_home(version)  # resolved with Maven on first use
    junit = dist.artifacts("junit", JUNIT)
    work = (Path(out) if out is not None else default_dir(test_source_dir) / version).resolve()
    (work / "classes").mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    cp = f"{junit}/*:{classpath(version)}"
    rec: dict[str, Any] = {"version": version, "passed": False, "tests_run": 0, "failures": [], "output_tail": "",
                           "compiled": False, "mixed": dist.substituted(version), "dir": str(work)}
    done = run_bounded(javac_command(sources, work / "classes", cp), TIMEOUT_S, cwd=work)
    text = done[1] if done else f"javac did not finish within {TIMEOUT_S:.0f} s"
    (work / "javac.txt").write_text(text)
    if done is None or done[0] != 0:
        lines = text.strip().splitlines() or ["javac failed"]
        first = re.sub(r"^\S*/", "", next((ln for ln in lines if "error:" in ln), lines[-1]))  # File.java:12: error: ...
        rec.update(failures=[{"test": None, "class": None, "exception": "javac" if done else "timeout",
                              "message": first, "at": None}], output_tail=_tail(text))
        return rec
    rec["compiled"] = True
    cmd = jvm_command(JUNIT_MAIN, classes, cp=f"{work / 'classes'}:{cp}", heap_mb=256, xms_mb=64, client=True,
                      version=version, user_home=work, rocketmq_home=home,
                      system_properties={"java.io.tmpdir": work / "tmp"})
    env = dict(os.environ, LD_PRELOAD=str(paths.loopback_shim()))  # the HA listeners bind the wildcard address
    done = run_bounded(cmd, TIMEOUT_S, cwd=work, env=env)
    text = done[1] if done else ""
    (work / "junit.txt").write_text(text)
    if done is None:
        rec["failures"] = [{"test": None, "class": None, "exception": "timeout",
                            "message": f"the tests did not finish within {TIMEOUT_S:.0f} s", "at": None}]
    else:
        rec["passed"], rec["tests_run"], rec["failures"] = parse_junit(text)
    rec["output_tail"] = _tail(text)
    return rec


def unit_repro(test_source_dir: str | Path, versions: str, out: str | Path | None = None,
               patches: list[str | Path] | None = None) -> list[dict[str, Any]]:
    """run_unit_repro for each version of a comma list, in order, each in <out>/<version>/ (default
    runs/<time>-unit-repro-<folder name>/); with `patches`, each version again with them applied
    (rmqchaos/rocketmq/patched.py), its record's version the patched release's label."""
    asked = [v.strip() for v in versions.split(",") if v.strip()]
    fixes = [Path(p).resolve() for p in patches or []]
    for f in fixes:
        if not f.is_file():
            raise UserError(f"--patches: {f} is not a file", "give the unified diffs to apply to each version")
    if not asked:
        raise UserError(f"--versions {versions!r}: no version", "e.g. --versions 5.3.3,5.5.0")
    for v in asked:
        dist.check_version(v)
    sources, classes = test_classes(test_source_dir)  # one line for a folder without tests, before any resolution
    base = Path(out) if out is not None else default_dir(test_source_dir)
    recs = []
    for v in sorted(set(asked), key=dist.version_key):
        say(f"unit-repro {Path(test_source_dir).name}: compiling and running against RocketMQ {v}'s jars")
        recs.append(run_unit_repro(test_source_dir, v, base / v))
        if fixes:
            patched.ensure(v, fixes)  # built on first use (progress lines), cached by release and patches
            k, name = patched.key(v, fixes), patched.label(v, fixes)
            say(f"unit-repro {Path(test_source_dir).name}: compiling and running against {name}")
            rec = run_unit_repro(test_source_dir, k, base / k)
            recs.append({**rec, "version": name})
    src = Path(test_source_dir).resolve()
    (base / RECORD).write_text(json.dumps({
        "source": str(src.relative_to(paths.REPO)) if src.is_relative_to(paths.REPO) else str(src),
        "tests": [str(f.relative_to(src)) for f in sources if f.stem in {c.rsplit(".", 1)[-1] for c in classes}],
        "classes": classes, "date": time.strftime("%Y-%m-%d"), "versions": recs}, indent=1) + "\n")
    return recs


def default_dir(test_source_dir: str | Path) -> Path:
    return paths.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-unit-repro-{Path(test_source_dir).resolve().name}"


def line(rec: dict[str, Any]) -> str:
    """One line per version: '5.3.3: passes (1 test)' or '5.5.0: fails: test: AssertionError: message (File.java:102)'."""
    if rec["passed"]:
        return f"{rec['version']}: passes ({rec['tests_run']} test{'s' if rec['tests_run'] != 1 else ''})"
    why = "; ".join(f"{f['test'] + ': ' if f['test'] else ''}{f['exception'].rsplit('.', 1)[-1]}"
                    f"{': ' + f['message'] if f['message'] else ''}{' (' + f['at'] + ')' if f['at'] else ''}"
                    for f in rec["failures"])
    return f"{rec['version']}: {'fails' if rec['compiled'] else 'does not compile'}: {why}"


def markdown(record_dir: str | Path) -> str:
    """The report's section "Reproduction without rmqchaos" from a unit-repro run (its unit-repro.json): what the test
    shows (its class's Javadoc), how to run it in upstream's tree and with rmqchaos, and what each version printed."""
    f = Path(record_dir) / RECORD
    try:
        rec = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--repro {record_dir}: no unit-repro record there ({e})",
                        "pass the directory `rmqchaos unit-repro DIR --versions ... --out OUT` wrote") from None
    src, tests = rec["source"], rec["tests"]
    about = [_javadoc((paths.REPO / src / t) if not Path(src).is_absolute() else Path(src) / t) for t in tests]
    names = ",".join(c.rsplit(".", 1)[-1] for c in rec["classes"])
    modules = ",".join(sorted({t.split("/", 1)[0] for t in tests}))  # upstream's module: store/src/test/java/...
    versions = ",".join(r["version"] for r in rec["versions"])
    md = ["## Reproduction without rmqchaos", ""]
    md += [f"`{src}/{t}` (rmqchaos repository): {a}" if a else f"`{src}/{t}` (rmqchaos repository)."
           for t, a in zip(tests, about)]
    md += ["", f"In a checkout of apache/rocketmq (the folder is laid out as its tree; `-am` first builds the modules "
           f"`{modules}` depends on):", "", "```sh", f"cp -r {src}/* <rocketmq>/",
           f"cd <rocketmq> && mvn -pl {modules} -am test -Dtest={names} -Dsurefire.failIfNoSpecifiedTests=false", "```",
           "", f"Against the released jars (javac and JUnitCore, JUnit {JUNIT[0].rsplit(':', 1)[1]}, as upstream's pom "
           "pins):", "", "```sh",
           f"rmqchaos unit-repro {src} --versions {versions}", "```", "", f"What it printed ({rec['date']}):", "", "```"]
    md += [line(r) for r in rec["versions"]] + ["```", ""]
    return "\n".join(md)


def _javadoc(java: Path) -> str:
    """The Javadoc of the file's public class, as one paragraph."""
    m = re.search(r"/\*\*(.*?)\*/\s*public\s+class", java.read_text(errors="replace"), re.S) if java.is_file() else None
    return " ".join(ln.strip().lstrip("*").strip() for ln in m.group(1).splitlines()).strip() if m else ""


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-TAIL_LINES:])
