"""Bisection across released RocketMQ versions: the last version where a scenario's signature does
not show and the first where it does (`rmqchaos bisect SCENARIO --versions 5.1.0..5.5.0`).

The search is pure (`bisect`, a `shows(version) -> True/False/None` callable runs one trial): both
ends are run first and must differ; then the middle of the bracket, until the two are neighbours. A
version counts as showing on its first run that shows it, and as not showing only after `repeats`
runs that did not (an intermittent signature); a run that could not tell (None) is run again within
the repeats, and a version no run could tell for stops the search with one line naming it.

Which versions: the released versions in the range (4.x from 4.6.0 and 5.x; a range may cross the
majors, e.g. 4.9.7..5.5.0), in order. A release Maven does not serve
whole runs mixed when what it lacks is a client-side program, namesrv or the proxy (an older or the
pinned release's stands in: rmqchaos/rocketmq/dist.py), and says so in one line; one whose broker,
store or controller does not resolve, or on which the scenario does not validate, is skipped with
one line."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rmqchaos.errors import UserError
from rmqchaos.rocketmq.dist import RELEASED, version_key


def _and(xs: tuple[str, ...]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def versions_in(spec: str) -> tuple[list[str], list[str], list[str]]:
    """'5.1.0..5.5.0' (or a comma list) -> (versions to run, in order; one line per version that runs
    mixed; one line per version skipped for want of a core module)."""
    if ".." in spec:
        lo, hi = (x.strip() for x in spec.split("..", 1))
        for v in (lo, hi):
            if v not in RELEASED:
                raise UserError(f"--versions {spec}: {v} is not a release this platform runs (4.x from 4.6.0, 5.x)",
                                f"releases: {', '.join(RELEASED)}")
        if version_key(lo) >= version_key(hi):
            raise UserError(f"--versions {spec}: the range must go from an older version to a newer one",
                            "e.g. --versions 5.1.0..5.5.0")
        asked = [v for v in RELEASED if version_key(lo) <= version_key(v) <= version_key(hi)]
    else:
        asked = sorted({x.strip() for x in spec.split(",") if x.strip()}, key=version_key)
        for v in asked:
            if v not in RELEASED:
                raise UserError(f"--versions {spec}: {v} is not a release this platform runs (4.x from 4.6.0, 5.x)",
                                f"releases: {', '.join(RELEASED)}")
    from rmqchaos.rocketmq.dist import CORE

    def lacks(v: str) -> tuple[str, ...]:
        return tuple(m for m in RELEASED[v] if m in CORE)

    skipped = [f"{v}: skipped ({_and(lacks(v))} {v} {'is' if len(lacks(v)) == 1 else 'are'} not on Maven Central, "
               "and a release runs only on its own core modules)" for v in asked if lacks(v)]
    asked = [v for v in asked if not lacks(v)]
    if len(asked) < 2:
        raise UserError(f"--versions {spec}: fewer than two versions to run"
                        + (f" ({'; '.join(skipped)})" if skipped else ""), "give a range over two or more releases")
    mixed = [f"{v}: runs mixed ({_and(RELEASED[v])} {v} {'is' if len(RELEASED[v]) == 1 else 'are'} not on Maven "
             "Central: " + ("another 4.x release's stand in)" if v.startswith("4.") else "an older or the pinned release's stand in)")
             for v in asked if RELEASED[v]]
    return asked, mixed, skipped


@dataclass
class Verdict:
    version: str
    shows: bool | None  # None: no run could tell
    runs: list[bool | None] = field(default_factory=list)  # each run's answer


@dataclass
class Bisection:
    versions: list[str]
    tried: dict[str, Verdict]
    before: str | None = None  # the older of the two neighbours at the boundary
    after: str | None = None  # the newer
    regression: bool | None = None  # True: it starts showing at `after`; False: it stops (a fix)
    problem: str | None = None  # why there is no boundary (both ends alike, a version that could not tell)
    skipped: list[str] = field(default_factory=list)  # versions that could not run, one line each

    @property
    def last_good(self) -> str | None:
        return self.before if self.regression else self.after

    @property
    def first_bad(self) -> str | None:
        return self.after if self.regression else self.before

    def words(self) -> str:
        if self.problem or self.before is None or self.after is None:
            return self.problem or "no boundary"
        t = self.tried

        def runs(v: str) -> str:
            d = t[v]
            return f"showed in {d.runs.count(True)} of {len(d.runs)} run(s)" if d.shows else \
                f"did not show in {len(d.runs)} run(s)"
        if self.regression:
            return f"a regression: last good {self.before} ({runs(self.before)}), first bad {self.after} ({runs(self.after)})"
        return f"a fix: last showing {self.before} ({runs(self.before)}), first without it {self.after} ({runs(self.after)})"


def judged(summ: dict[str, Any], signature: Any) -> bool | None:
    """A run's answer for bisection: its signature reached, or missed on the signature's own
    conditions; a miss for any other reason (a fault or the load fell short, the run did not finish)
    could not tell (None), so it never places the boundary."""
    sig = summ.get("signature") or {}
    if sig.get("reached") is not False:
        return sig.get("reached")
    own = set(signature.conditions) | {fo.words() for fo in signature.failovers}
    return False if all(m["what"] in own for m in sig.get("misses") or []) else None


class Unavailable(Exception):
    """A version that cannot run here (Maven does not serve all of it): skipped, the search goes on."""


def bisect(versions: list[str], shows: Callable[[str], bool | None], repeats: int = 1,
           progress: Callable[[str], None] = lambda _: None) -> Bisection:
    """The boundary in `versions` (oldest first) where `shows` turns from False to True (a regression)
    or from True to False (a fix): the oldest and newest are run first and must differ. `shows` raises
    Unavailable for a version that cannot run: it leaves the list with one line in `skipped`."""
    tried: dict[str, Verdict] = {}
    vs, skipped = list(versions), []

    def judge(v: str) -> Verdict:
        if v in tried:
            return tried[v]
        d = Verdict(v, None)
        while len(d.runs) < repeats:
            got = shows(v)
            d.runs.append(got)
            if got is True:
                break
        d.shows = True if True in d.runs else False if False in d.runs else None
        tried[v] = d
        progress(f"bisect: {v}: {'shows' if d.shows else 'does not show' if d.shows is False else 'could not tell'} "
                 f"({len(d.runs)} run(s))")
        return d

    def done(**kw: object) -> Bisection:
        return Bisection(vs, tried, skipped=skipped, **kw)  # type: ignore[arg-type]

    ends: list[Verdict] = []
    while len(vs) >= 2 and len(ends) < 2:
        i = 0 if not ends else -1
        try:
            ends.append(judge(vs[i]))
        except Unavailable as e:
            skipped.append(f"{vs.pop(i)}: skipped ({e})")
            progress(f"bisect: {skipped[-1]}")
    if len(ends) < 2:
        return done(problem="fewer than two versions could run: " + "; ".join(skipped))
    a, b = ends
    for d in (a, b):
        if d.shows is None:
            return done(problem=f"no run on {d.version} could tell whether it shows")
    if a.shows == b.shows:
        return done(problem=f"both ends {'show' if a.shows else 'do not show'} it "
                            f"({vs[0]} and {vs[-1]}): no boundary in between to find")
    old = a.shows  # the answer on the older side of the boundary
    lo, hi = 0, len(vs) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            d = judge(vs[mid])
        except Unavailable as e:
            skipped.append(f"{vs.pop(mid)}: skipped ({e})")
            progress(f"bisect: {skipped[-1]}")
            hi -= 1
            continue
        if d.shows is None:
            return done(problem=f"no run on {vs[mid]} could tell whether it shows "
                                f"(the boundary lies between {vs[lo]} and {vs[hi]})")
        lo, hi = (mid, hi) if d.shows == old else (lo, mid)
    return done(before=vs[lo], after=vs[hi], regression=old is False)


# ---------------------------------------------------------------- with real runs

def bisect_scenario(scenario: str | Path, versions: str = "5.1.0..5.5.0", repeats: int = 1,
                    out: str | Path | None = None) -> dict[str, Any]:
    """Run the scenario's signature (or its `expect:`) across the released versions in `versions` and
    find where it turns. Each trial is an overlay beside the runs setting cluster.rocketmq_version. A
    version Maven does not serve whole, or on which the scenario does not validate (a config key that
    version lacks), is skipped with one line. Writes bisect.json into the directory and returns it:
    {scenario, versions, skipped, tried {version: [{shows, run_dir}]}, words, last_good, first_bad}."""
    import json

    import yaml

    from pipeline.workflows.corpus import _name
    from pipeline.runs import default_run_dir, load_scenario
    from pipeline.scenario import run_scenario
    from rmqchaos.rocketmq import dist as rocketmq_dist
    from rmqchaos.progress import say

    if not 1 <= repeats <= 20:
        raise UserError(f"--repeats {repeats} is out of range", "use 1..20")
    s = load_scenario(scenario)
    if s.signature is None and s.expect is None:
        raise UserError(f"{scenario}: no signature or expect block to bisect on",
                        "bisect looks for the versions where what the scenario shows turns (docs/spec.md)")
    run, mixed, unrunnable = versions_in(versions)
    for line in unrunnable + mixed:
        say(f"bisect: {line}")
    d = Path(out) if out else Path(str(default_run_dir(f"bisect-{s.name}")))
    d.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}

    def shows(v: str) -> bool | None:
        try:
            rocketmq_dist.ensure(v)
        except UserError as e:
            raise Unavailable(e.message) from None
        k = len(runs.setdefault(v, [])) + 1
        f = d / f"{s.name}-{v}-{k}.yaml"
        f.write_text(yaml.safe_dump({"extends": str(Path(scenario).resolve()), "name": _name(s.name, v),
                                     "cluster": {"rocketmq_version": v}}, sort_keys=False))
        try:
            load_scenario(f)
        except UserError as e:
            raise Unavailable(f"the scenario does not validate on {v}: {e.message}") from None
        o = run_scenario(f, d / f"{v}-run{k}")
        if o.failure is not None and not isinstance(o.failure, UserError):
            raise o.failure  # interrupted (Ctrl-C, SIGTERM): the search stops, its runs are kept
        summ = json.loads(o.run.summary_file.read_text()) if o.run.summary_file.is_file() else {}
        got = judged(summ, s.signature) if s.signature is not None else (summ.get("expect") or {}).get("reproduced")
        runs[v].append({"shows": got, "run_dir": str(o.run.path)})
        return got
    b = bisect(run, shows, repeats, progress=say)
    res = {"scenario": str(Path(scenario).resolve()), "versions": b.versions, "mixed": mixed,
           "skipped": unrunnable + b.skipped,  # known before any resolution, then found at it
           "tried": runs, "words": b.words(), "last_good": b.last_good if not b.problem else None,
           "first_bad": b.first_bad if not b.problem else None, "dir": str(d)}
    (d / "bisect.json").write_text(json.dumps(res, indent=1) + "\n")
    return res
