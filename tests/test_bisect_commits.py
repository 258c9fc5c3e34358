"""Bisection over a source tree's history (issue 68, item 3) on a planted git history: fake build and
run steps, the real git. Pure logic: no JVM."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.workflows.bisect_commits import BuildFailed, Commit, bisect_history, commits_in, worst_steps
from rmqchaos.errors import UserError


def _history(root: Path, n: int, bad_from: int | None = None, fixed_at: int | None = None,
             broken: tuple[int, ...] = ()) -> list[str]:
    """A repository whose commit i (0 = the base) writes `state`: bad from `bad_from` on (a regression)
    or good from `fixed_at` on (a fix); `broken` commits do not build. A side branch is merged right
    after commit 5 (shas[5] is the merge), so first-parent history skips the side's own commits."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True, text=True,
                              env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                   "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()
    git("init", "-q", "-b", "main")
    shas = []
    for i in range(n + 1):
        bad = (bad_from is not None and i >= bad_from) or (fixed_at is not None and i < fixed_at)
        (root / "state").write_text("bad" if bad else "good")
        (root / "builds").write_text("no" if i in broken else "yes")
        (root / "n").write_text(str(i))
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {i}")
        if i == 5:  # a merged side branch: two commits of its own, then the merge
            git("checkout", "-q", "-b", "side")
            for j in range(2):
                (root / f"side{j}").write_text(str(j))
                git("add", "-A")
                git("commit", "-q", "-m", f"side {j}")
            git("checkout", "-q", "main")
            git("merge", "-q", "--no-ff", "-m", "Merge side", "side")
        shas.append(git("rev-parse", "HEAD"))
    git("tag", "v-old", shas[0])
    return shas


def _steps(root: Path) -> tuple[Any, Any]:
    def build(c: Commit) -> str:
        r = subprocess.run(["git", "-C", str(root), "show", f"{c.sha}:builds"], capture_output=True, text=True)
        if r.stdout.strip() != "yes":
            raise BuildFailed("javac: planted failure")
        return subprocess.run(["git", "-C", str(root), "show", f"{c.sha}:state"], capture_output=True,
                              text=True).stdout.strip()

    def run(c: Commit, built: str, k: int) -> tuple[bool | None, dict[str, Any]]:
        return built == "bad", {"run_dir": f"runs/{c.sha[:8]}-{k}"}
    return build, run


@pytest.mark.fast
def test_a_planted_regression_is_named_by_its_commit_in_at_most_2_plus_log2_n_steps(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = _history(repo, 20, bad_from=13)
    commits = commits_in(repo, "v-old..main")
    assert commits[0].sha == shas[0] and commits[-1].sha == shas[-1]
    # first-parent: the side branch's two commits are not steps, its merge is (it is commit 5's successor)
    assert [c.title for c in commits[5:7]] == ["commit 5", "Merge side"] and len(commits) == 22
    assert "side 0" in [c.title for c in commits_in(repo, "v-old..main", first_parent=False)]
    build, run = _steps(repo)
    res = bisect_history(commits, build, run, tmp_path / "out")
    assert res["first_bad"] == {"sha": shas[13], "title": "commit 13"} and res["regression"] is True
    assert res["last_good"]["title"] == "commit 12"
    assert len(res["steps"]) <= worst_steps(len(commits) - 1) == 2 + 5  # 21 commits after the base
    assert res["steps"][0]["sha"] == shas[0] and res["steps"][1]["sha"] == shas[-1]  # both ends first
    on_disk = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert on_disk["steps"] == res["steps"] and on_disk["first_bad"]["sha"] == shas[13]
    assert all(s["built"] and s["run_dir"].startswith("runs/") for s in on_disk["steps"])
    assert f"first bad {shas[13][:12]} (commit 13)" in res["words"]


@pytest.mark.fast
def test_a_planted_fix_and_a_commit_that_does_not_build(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = _history(repo, 16, fixed_at=9, broken=(8,))
    build, run = _steps(repo)
    res = bisect_history(commits_in(repo, f"{shas[0]}..{shas[-1]}"), build, run, tmp_path / "out")
    # commit 8 does not build: skipped, so the fix lies between commit 7 and commit 9
    assert res["regression"] is False and res["first_bad"]["title"] == "commit 7"
    assert res["last_good"]["title"] == "commit 9"  # for a fix: the first commit without it
    assert [s for s in res["steps"] if not s["built"]] == [
        {"step": next(s["step"] for s in res["steps"] if not s["built"]), "sha": shas[8], "title": "commit 8",
         "built": False, "why": "javac: planted failure"}]
    assert res["skipped"] == [f"{shas[8][:12]} (commit 8): skipped (does not build: javac: planted failure)"]


@pytest.mark.fast
def test_bad_ranges_get_one_line_each(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = _history(repo, 3)
    for spec, words in [("nope..main", "nope is no commit of"), ("main", "expected OLD..NEW"),
                        ("main..v-old", "main is not an ancestor of v-old"),
                        (f"{shas[-1]}..main", "no commit between")]:
        with pytest.raises(UserError) as e:
            commits_in(repo, spec)
        assert words in e.value.message, (spec, e.value.message)
    with pytest.raises(UserError) as e:
        commits_in(tmp_path, "a..b")
    assert "is not a git checkout" in e.value.message
