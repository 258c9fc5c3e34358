"""Issue 68, item 1: a release with patches (cluster.patches; rmqchaos/rocketmq/patched.py).

Fast: a patch's paths to the release's modules (and what is refused, in one line), the cache key (the
release and the patches' bytes in order), a patch that does not apply (one line naming the patch, the
file and the hunk; git apply on a tiny tree, no JVM), a javac error as one line, the spec's key (a
missing file, the docker backend, a path relative to the scenario file) and the run directory's copies.
Real (test_patched_run.py): a one-line patch to BrokerStartup built from 5.5.0's sources jar and run."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import one_line
from rmqchaos.errors import UserError
from rmqchaos.machine import paths
from rmqchaos.rocketmq import patched
from rmqchaos.spec import parse_scenario

pytestmark = pytest.mark.fast

STARTUP = "broker/src/main/java/org/apache/rocketmq/broker/BrokerStartup.java"


def diff(path: str, old: str = " a\n-b\n+B\n c\n", start: int = 2) -> str:
    n = old.count("\n") - old.count("\n+")
    return (f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
            f"@@ -{start},{n} +{start},{n} @@ class X {{\n{old}")


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


@pytest.fixture()
def lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A release's lib/ by its jars' names (nothing is opened)."""
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")  # no substituted.json: a whole release
    d = tmp_path / "lib"
    for j in ("rocketmq-broker-5.5.0.jar", "rocketmq-store-5.5.0.jar", "rocketmq-common-5.5.0.jar",
              "rocketmq-tiered-store-5.5.0.jar", "rocketmq-proto-2.1.2.jar", "dledger-0.3.2.jar", "netty-all-4.1.130.Final.jar"):
        write(d / j, "")
    return d


def test_each_path_names_the_module_whose_jar_it_rebuilds(tmp_path: Path, lib: Path) -> None:
    p = write(tmp_path / "fix.patch", diff(STARTUP) + diff("store/src/test/java/T.java")
              + diff("common/src/main/resources/x.properties")
              + diff("tieredstore/src/main/java/org/apache/rocketmq/tieredstore/A.java")
              + diff("dledger/src/main/java/io/openmessaging/storage/dledger/MemberState.java"))
    assert patched.files(p.read_text())[:2] == [STARTUP, "store/src/test/java/T.java"]
    # a test file is left out (a sources jar holds none); the order is the reactor's, DLedger first
    assert {m: j.name for m, j in patched.modules("5.5.0", [p], lib).items()} == {
        "dledger": "dledger-0.3.2.jar", "common": "rocketmq-common-5.5.0.jar",
        "tieredstore": "rocketmq-tiered-store-5.5.0.jar", "broker": "rocketmq-broker-5.5.0.jar"}
    # a deleted file counts by its old path
    gone = write(tmp_path / "gone.patch", f"--- a/{STARTUP}\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n")
    assert list(patched.modules("5.5.0", [gone], lib)) == ["broker"]


def test_a_path_no_module_of_the_release_builds_is_one_line(tmp_path: Path, lib: Path) -> None:
    for path, says in (("broker/pom.xml", "broker/pom.xml: only a module's src/main/java and src/main/resources"),
                       ("proto/src/main/java/A.java", "proto/src/main/java/A.java: proto/ builds none of RocketMQ "
                                                      "5.5.0's runtime jars")):
        p = write(tmp_path / "x.patch", diff(path))
        with pytest.raises(UserError) as e:
            patched.modules("5.5.0", [p], lib)
        assert e.value.line().startswith(f"{p}: {says}"), e.value.line()
    with pytest.raises(UserError, match="not a unified diff"):
        patched.modules("5.5.0", [write(tmp_path / "empty.patch", "hello\n")], lib)


def test_the_cache_key_is_the_release_and_the_patches_bytes_in_order(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.patch", diff(STARTUP)), write(tmp_path / "b.patch", diff(STARTUP, " a\n-c\n+C\n c\n"))
    same = write(tmp_path / "other" / "renamed.patch", a.read_text())
    k = patched.key("5.5.0", [a, b])
    assert k.startswith("5.5.0+p") and len(k) == len("5.5.0+p") + 12
    assert patched.key("5.5.0", [same, b]) == k  # the bytes, not the name
    assert patched.key("5.5.0", [b, a]) != k and patched.key("5.4.0", [a, b]) != k and patched.key("5.5.0", [a]) != k
    assert patched.label("5.5.0", [a, b]) == f"5.5.0+a.patch+b.patch({k.split('+p')[1]})"


def test_a_patch_that_does_not_apply_is_one_line_naming_the_file_and_the_hunk(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write(tree / STARTUP, "class X {\na\nb\nc\n}\n")
    good = write(tmp_path / "good.patch", diff(STARTUP) + diff("broker/src/test/java/T.java"))
    patched._apply(good, tree, "5.5.0")  # the test file's hunk is left out
    assert (tree / STARTUP).read_text() == "class X {\na\nB\nc\n}\n"
    bad = write(tmp_path / "bad.patch", diff(STARTUP, " a\n-b\n+B\n c\n"))  # b is B now
    with pytest.raises(UserError) as e:
        patched._apply(bad, tree, "5.5.0")
    assert e.value.line().startswith(f"{bad}: does not apply to RocketMQ 5.5.0's sources: {STARTUP}: hunk "
                                     "`@@ -2,3 +2,3 @@` (line 5 of the patch) does not match"), e.value.line()
    missing = write(tmp_path / "missing.patch", diff("broker/src/main/java/Nope.java"))
    with pytest.raises(UserError) as e:
        patched._apply(missing, tree, "5.5.0")
    assert f"{missing}: does not apply to RocketMQ 5.5.0's sources: broker/src/main/java/Nope.java: no such file" \
        in e.value.line()


def test_a_javac_error_is_one_line_naming_the_patch_that_changed_that_file(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.patch", diff(STARTUP)), write(tmp_path / "b.patch", diff("broker/src/main/java/Y.java"))
    out = (f"{tmp_path}/tree/{STARTUP}:57: error: ';' expected\n    x\n     ^\n"
           f"{tmp_path}/tree/broker/src/main/java/Z.java:1: error: later\n2 errors\n")
    assert patched.compile_error(out, tmp_path / "tree", [a, b], "broker", "5.5.0") == (
        f"{a}: RocketMQ 5.5.0's broker does not compile with it: {STARTUP}:57: ';' expected")


DOC = """name: t
cluster:
  patches: [{patch}]
  brokers: [{{name: broker-a}}]
"""


@pytest.fixture()
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[Path]]]:
    """patched.ensure recorded, not run (the real test builds); the keys checked against the release's."""
    from rmqchaos.spec import checks, confkeys
    calls: list[tuple[str, list[Path]]] = []
    monkeypatch.setattr(patched, "ensure", lambda v, ps: calls.append((v, list(ps))) or Path("/nowhere"))
    monkeypatch.setattr(checks, "config_keys", lambda v: confkeys.config_keys(v.split("+p")[0]))
    return calls


def test_the_spec_takes_patch_paths_relative_to_the_scenario_file(tmp_path: Path, built: list[tuple[str, list[Path]]]) -> None:
    from rmqchaos.spec import load_scenario
    fix = write(tmp_path / "patches" / "fix.patch", diff(STARTUP))
    base = write(tmp_path / "base.yaml", DOC.format(patch="patches/fix.patch"))
    over = write(tmp_path / "sub" / "over.yaml", "extends: ../base.yaml\nname: o\n")
    s = load_scenario(over)  # the base's relative path: from the base's directory
    assert s.cluster.patches == [str(fix)] and built == [(s.cluster.rocketmq_version, [fix])]
    assert s.cluster.dist == patched.key(s.cluster.rocketmq_version, [fix])
    assert s.cluster.version_label.endswith("+fix.patch(" + s.cluster.dist.split("+p")[1] + ")")
    assert load_scenario(base).cluster.patches == [str(fix)]


def test_a_missing_patch_or_the_docker_backend_is_one_line(tmp_path: Path, built: list[tuple[str, list[Path]]]) -> None:
    assert one_line(DOC.format(patch="/no/such/fix.patch")) == "t.yaml:3: cluster.patches[0]: /no/such/fix.patch: no such patch file"
    fix = write(tmp_path / "fix.patch", diff(STARTUP))
    assert one_line(DOC.format(patch=fix).replace("cluster:\n", "cluster:\n  backend: docker\n")) == (
        "t.yaml:4: cluster.patches: patches need the local backend, not docker: use backend: local")
    assert built == []


def test_a_build_problem_is_said_at_the_patch_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmqchaos.errors import UserError
    a, b = write(tmp_path / "a.patch", diff(STARTUP)), write(tmp_path / "b.patch", diff(STARTUP))

    def fails(v: str, ps: list[Path]) -> Path:
        raise UserError(f"{ps[1]}: does not apply to RocketMQ {v}'s sources: {STARTUP}: hunk ...")
    monkeypatch.setattr(patched, "ensure", fails)
    doc = f"name: t\ncluster:\n  patches:\n    - {a}\n    - {b}\n"
    assert one_line(doc).startswith(f"t.yaml:5: cluster.patches[1]: {b}: does not apply to RocketMQ ")


def test_the_run_directory_keeps_its_own_copies_of_the_patches(tmp_path: Path, built: list[tuple[str, list[Path]]]) -> None:
    from rmqchaos.run.rundir import RunDir
    a = write(tmp_path / "a" / "fix.patch", diff(STARTUP))
    b = write(tmp_path / "b" / "fix.patch", diff(STARTUP, " a\n-c\n+C\n c\n"))
    s = parse_scenario(DOC.format(patch=f"{a}, {b}"), str(tmp_path / "t.yaml"))
    run = RunDir.create(tmp_path / "run", s, "src", "owned")
    again = run.scenario().cluster
    assert again.patches == [str(run.path / "patches" / "1" / "fix.patch"), str(run.path / "patches" / "2" / "fix.patch")]
    assert again.dist == s.cluster.dist and again.version_label == s.cluster.version_label
    assert "- patches/1/fix.patch" in (run.path / "scenario.yaml").read_text()
    # what `up` records (cluster/local/cluster.py) is what the history's rocketmq_version shows
    from analysis.history.history import row
    run.write_versions(again.version_label, "17", None, [{"name": "fix.patch", "sha256": "0" * 64, "files": [STARTUP]}])
    assert run.versions()["rocketmq_patches"][0]["name"] == "fix.patch"
    assert row({"run_id": run.run_id, "scenario": "t"}, run.path)["rocketmq_version"] == s.cluster.version_label
