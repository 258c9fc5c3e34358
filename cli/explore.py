"""`rmqchaos explore`, `shrink`, `bisect`, `report-upstream` and `unit-repro`: finding what nobody has reported and
handing it upstream (pipeline/workflows/explore.py, shrink.py, bisect.py, upstream.py, repro.py; docs/explore.md)."""
from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_explore(a: argparse.Namespace) -> int:
    from pipeline.workflows.explore import check_budget, draw, explore, lines, plan, words
    kinds = a.kinds.split(",") if a.kinds else None
    if a.dry_run:  # the schedules only: what the seeds draw
        n = a.runs or 1
        seed = 0 if a.seed is None else a.seed
        check_budget(n, None, seed, a.max_faults)
        if a.out:
            for f in plan(a.base, n, seed, a.max_faults, kinds, a.out):
                print(f)
            return 0
        for k in range(n):
            print(f"seed {seed + k}: {words(draw(a.base, seed + k, a.max_faults, kinds))}")
        return 0
    rec = explore(a.base, a.runs, a.hours, a.seed, a.max_faults, kinds, a.keep_all, a.out)
    print(json.dumps(rec, indent=1) if a.json else "\n".join(lines(rec)))
    return 0


def cmd_shrink(a: argparse.Namespace) -> int:
    from pipeline.workflows.shrink import shrink_run
    res = shrink_run(a.run, a.check, a.budget, a.repeats, a.out)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"shrink {a.run} ({res['check']}): {res['shrunk']}")
        for t in res["trials"]:
            print(f"  {t['step']}: showed {t['showed']} of {t['runs']}")
        print(f"scenario: {res['scenario']}")
    return 0 if res["reproduced"] else 1


def cmd_bisect(a: argparse.Namespace) -> int:
    from pipeline.workflows.bisect import bisect_scenario
    res = bisect_scenario(a.scenario, a.versions, a.repeats, a.out)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for line in res["skipped"]:
            print(f"  {line}")
        for v, runs in res["tried"].items():
            print(f"  {v}: " + ", ".join({True: "shows", False: "does not show", None: "could not tell"}[r["shows"]]
                                         for r in runs))
        print(f"bisect {a.scenario} over {a.versions}: {res['words']}")
        print(f"record: {res['dir']}/bisect.json")
    return 0 if res["first_bad"] else 1


def cmd_report_upstream(a: argparse.Namespace) -> int:
    from pipeline.workflows.upstream import DEFAULT_GREP, report_upstream
    res = report_upstream(a.runs, a.title, a.check, a.grep or DEFAULT_GREP, a.source, a.notes, a.out, a.repro)
    print(json.dumps(res, indent=1) if a.json else
          f"report: {res['report']} (affected: {', '.join(res['affected']) or 'none'}; "
          f"not affected: {', '.join(res['not_affected']) or 'none measured'})")
    return 0


def cmd_unit_repro(a: argparse.Namespace) -> int:
    from pipeline.workflows.repro import line, unit_repro
    recs = unit_repro(a.dir, a.versions, a.out, [p for ps in a.patches or [] for p in ps.split(",") if p])
    print(json.dumps(recs, indent=1) if a.json else "\n".join(line(r) for r in recs))
    return 0 if all(r["passed"] or (r["compiled"] and r["tests_run"]) for r in recs) else 1


def _positive(kind: type) -> Any:
    def parse(v: str) -> Any:
        try:
            x = kind(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {v!r}") from None
        if x < 0:
            raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
        return x
    return parse


def add_parsers(sub: Any) -> None:
    from analysis.judge.anomalies import CHECKS
    checks = ", ".join(CHECKS)
    e = sub.add_parser("explore", help="seeded random fault schedules over a base scenario, keeping every anomaly",
                       description="Draws a fault schedule per run from the fault registry (kinds, targets by role, "
                                   "Jepsen's partition shapes, safe overlaps) over BASE's cluster and load, runs it, and "
                                   f"keeps every run whose checks flag an anomaly ({checks}) with its seed. Run k "
                                   "draws with seed SEED+k. docs/explore.md")
    e.add_argument("base", metavar="BASE", help="the scenario whose cluster and load the schedules run on")
    e.add_argument("--runs", type=_positive(int), help="how many runs (the budget; with --hours whichever ends first)")
    e.add_argument("--hours", type=_positive(float), help="how long to explore")
    e.add_argument("--seed", type=_positive(int), help="the first run's seed (default: from the clock, printed)")
    e.add_argument("--max-faults", type=_positive(int), default=3, help="faults per schedule, at most (default 3)")
    e.add_argument("--kinds", help="only these fault kinds, comma-separated (default: every kind that can be drawn)")
    e.add_argument("--keep-all", action="store_true", help="keep the runs that found nothing too")
    e.add_argument("--dry-run", action="store_true", help="print the schedules the seeds draw, run nothing "
                                                           "(with --out: write them as scenario files)")
    e.add_argument("--out", help="the exploration's directory (default runs/<time>-explore-<base>)")
    e.add_argument("--json", action="store_true", help="the record as JSON")
    e.set_defaults(fn=cmd_explore)
    s = sub.add_parser("shrink", help="shrink an anomalous run's fault schedule to a smaller one that still shows it",
                       description="Drops faults, shortens them and moves them earlier while the anomaly still shows, "
                                   "within a run budget; repeats each candidate for an intermittent anomaly. Writes the "
                                   "result as a scenario with an `expect:` block. docs/explore.md")
    s.add_argument("run", metavar="RUN", help="a run directory that shows the anomaly (e.g. one explore kept)")
    s.add_argument("--check", help=f"the anomaly to keep (default: the run's first): {checks}")
    s.add_argument("--budget", type=_positive(int), default=12, help="runs at most (default 12)")
    s.add_argument("--repeats", type=_positive(int), default=1, help="tries per candidate before it counts as "
                                                                      "not showing it (default 1)")
    s.add_argument("--out", help="where the trials and the result go (default runs/<time>-shrink-<name>)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_shrink)
    b = sub.add_parser("bisect", help="the last good and first bad RocketMQ release for a scenario's signature",
                       description="Runs SCENARIO's signature (or its expect:) on the released versions in the range, "
                                   "both ends first, then the middle, and reports where it turns. A release Maven does "
                                   "not serve whole (5.1.2-5.1.4, 5.3.4, 5.5.1) runs mixed, said in one line; one "
                                   "whose broker does not resolve is skipped with one line. docs/explore.md")
    b.add_argument("scenario", metavar="SCENARIO")
    b.add_argument("--versions", default="5.1.0..5.5.0", help="a range OLD..NEW or a comma list (default 5.1.0..5.5.0)")
    b.add_argument("--repeats", type=_positive(int), default=1,
                   help="runs before a version counts as not showing it (an intermittent signature; default 1)")
    b.add_argument("--out", help="where the runs and bisect.json go (default runs/<time>-bisect-<name>)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_bisect)
    u = sub.add_parser("report-upstream", help="a Markdown report ready to file upstream, from analyzed runs",
                       description="Versions affected and not, the scenario and its command, the broker settings, "
                                   "the figures of each run, log excerpts with their files, and source lines from the "
                                   "released sources jars; a section without evidence says 'not measured'. Written into "
                                   "docs/upstream-reports/. docs/explore.md")
    u.add_argument("runs", nargs="+", metavar="RUN", help="analyzed run directories, e.g. one per version")
    u.add_argument("--title", help="the report's title (default: the scenario and what it showed)")
    u.add_argument("--check", help=f"judge each run by this anomaly instead of its signature: {checks}")
    u.add_argument("--grep", help="the log lines to excerpt, a regular expression (default: exceptions, errors, "
                                  "SyncStateSet and role changes)")
    u.add_argument("--source", action="append", metavar="PATH.java:FROM-TO@VERSION",
                   help="source lines to cite, read from that release's sources jar (repeatable)")
    u.add_argument("--notes", help="a Markdown file: the analysis and a proposed fix")
    u.add_argument("--repro", metavar="DIR", help="a `rmqchaos unit-repro` run (its --out): the section "
                                                  "'Reproduction without rmqchaos', with what each version printed")
    u.add_argument("--out", help="the report file (default docs/upstream-reports/<scenario>.md)")
    u.add_argument("--json", action="store_true")
    u.set_defaults(fn=cmd_report_upstream)
    r = sub.add_parser("unit-repro", help="compile and run a JUnit reproduction against each version's released jars",
                       description="Compiles the JUnit 4 tests under DIR (upstream's tree layout, e.g. "
                                   "java/repro/all-ack-sync-state-set) with javac against each RocketMQ version's jars "
                                   "and the pinned JUnit, runs them with JUnitCore, and prints one line per version: "
                                   "passes, or which assertion failed where. Exit 1 when a version did not compile or "
                                   "gave no JUnit report. docs/explore.md")
    r.add_argument("dir", metavar="DIR", help="the folder of the reproduction's test sources")
    r.add_argument("--versions", required=True, help="a comma list of releases, e.g. 5.3.3,5.5.0")
    r.add_argument("--out", help="where each version's classes, output and logs go (default runs/<time>-unit-repro-<name>)")
    r.add_argument("--patches", action="append", metavar="FILE[,FILE]",
                   help="unified diffs against upstream's tree: each version runs again with them applied "
                        "(cluster.patches' build, docs/spec.md), e.g. the proposed fix")
    r.add_argument("--json", action="store_true", help="each version's record as JSON")
    r.set_defaults(fn=cmd_unit_repro)
