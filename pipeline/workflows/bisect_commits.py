"""Bisection over a source tree's history instead of releases: the commits of `A..B` in a local git
checkout of apache/rocketmq (first-parent by default: one step per merged pull request), searched by
bisect.bisect with each step built and run by the callables given, every step recorded in
`bisect.json`. Pure of RocketMQ: what a build and a run are is the caller's (a source build and a
scenario run, or a test's planted ones).

Which commits: `A` itself (the base the range starts from, as `git bisect` takes its good end) and
every commit of `git rev-list --reverse [--first-parent] A..B`, oldest first. Both ends are run first
and must differ; then the middle of the bracket until the two are neighbours: for n commits after A,
2 + ceil(log2 n) steps when every commit builds. A commit that does not build is skipped with one
line, as `git bisect skip` does."""
from __future__ import annotations

import json
import math
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.workflows.bisect import Unavailable, bisect
from rmqchaos.errors import UserError


@dataclass(frozen=True)
class Commit:
    sha: str
    title: str


class BuildFailed(Exception):
    """A commit that does not build: skipped, the search goes on (its reason in the step's record)."""


def _git(source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True)


def commits_in(source: str | Path, spec: str, first_parent: bool = True) -> list[Commit]:
    """'A..B' -> [A, each commit after it up to B], oldest first, with their titles."""
    src = Path(source)
    if not (src / ".git").exists() and not (src / "HEAD").is_file():
        raise UserError(f"--source {source} is not a git checkout", "clone apache/rocketmq and give its directory")
    if spec.count("..") != 1 or spec.startswith("..") or spec.endswith(".."):
        raise UserError(f"--commits {spec}: expected OLD..NEW", "e.g. --commits rocketmq-all-5.3.3..rocketmq-all-5.4.0")
    lo, hi = (x.strip() for x in spec.split("..", 1))

    def resolve(x: str) -> str:
        r = _git(src, "rev-parse", "--verify", "--quiet", f"{x}^{{commit}}")
        if r.returncode != 0:
            raise UserError(f"--commits {spec}: {x} is no commit of {source}",
                            "give commits, tags or branches the checkout has (git fetch --tags first?)")
        return r.stdout.strip()
    a, b = resolve(lo), resolve(hi)
    if _git(src, "merge-base", "--is-ancestor", a, b).returncode != 0:
        raise UserError(f"--commits {spec}: {lo} is not an ancestor of {hi}", "give the older commit first")
    fp = ["--first-parent"] if first_parent else []
    after = _git(src, "log", "--reverse", *fp, "--format=%H %s", f"{a}..{b}").stdout.splitlines()
    if not after:
        raise UserError(f"--commits {spec}: no commit between {lo} and {hi}", "give a range with commits in it")
    base = _git(src, "log", "-1", "--format=%H %s", a).stdout.strip()
    return [Commit(line.partition(" ")[0], line.partition(" ")[2]) for line in [base, *after]]


def worst_steps(n_after: int) -> int:
    """The most steps a search over A and n_after commits takes when every commit builds and one run
    tells: both ends, then halving the n_after gaps."""
    return 2 + math.ceil(math.log2(n_after)) if n_after > 1 else 2


def bisect_history(commits: list[Commit], build: Callable[[Commit], Any],
                   run: Callable[[Commit, Any, int], tuple[bool | None, dict[str, Any]]], out: Path,
                   repeats: int = 1, progress: Callable[[str], None] = lambda _: None,
                   about: dict[str, Any] | None = None) -> dict[str, Any]:
    """The first commit where `run` turns (True: it shows). `build(commit)` returns what `run` needs
    (raises BuildFailed for a commit that does not build); `run(commit, built, k)` returns the k-th
    run's answer (None: could not tell) and what to record of it. Writes out/bisect.json (rewritten
    after every step, so an interrupted search keeps its steps) and returns it."""
    by_sha = {c.sha: c for c in commits}
    built: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {**(about or {}), "commits": [asdict(c) for c in commits], "repeats": repeats,
                           "steps": steps, "worst_steps": worst_steps(len(commits) - 1)}

    def record() -> None:
        (out / "bisect.json").write_text(json.dumps(res, indent=1) + "\n")

    def shows(sha: str) -> bool | None:
        c = by_sha[sha]
        if sha not in built:
            try:
                built[sha] = build(c)
            except BuildFailed as e:
                steps.append({"step": len(steps) + 1, **asdict(c), "built": False, "why": str(e)})
                record()
                raise Unavailable(f"does not build: {e}") from None
        k = sum(1 for s in steps if s["sha"] == sha and s.get("built")) + 1
        got, what = run(c, built[sha], k)
        steps.append({"step": len(steps) + 1, **asdict(c), "built": True, "run": k, "shows": got, **what})
        record()
        progress(f"bisect: step {len(steps)}: {sha[:12]} {c.title}: "
                 f"{'shows' if got else 'does not show' if got is False else 'could not tell'}")
        return got

    b = bisect([c.sha for c in commits], shows, repeats, progress=progress)

    def named(sha: str | None) -> dict[str, str] | None:
        return asdict(by_sha[sha]) if sha else None
    res.update(words=_words(b.words(), by_sha), skipped=[_words(x, by_sha) for x in b.skipped], problem=b.problem,
               regression=None if b.problem else b.regression,
               first_bad=None if b.problem else named(b.first_bad),
               last_good=None if b.problem else named(b.last_good))
    record()
    return res


def _words(words: str, by_sha: dict[str, Commit]) -> str:
    """bisect's sentence with each full sha shortened and titled."""
    for sha, c in by_sha.items():
        words = words.replace(sha, f"{sha[:12]} ({c.title})")
    return words
