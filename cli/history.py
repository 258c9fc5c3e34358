"""`rmqchaos history`: the run history (analysis/history/history.py) on the command line: list, show, compare,
import, and a run's regression flags (analysis/history/regress.py); --json for scripts."""
from __future__ import annotations

import argparse
import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from analysis.history import history
from rmqchaos.machine import paths
from rmqchaos.errors import UserError

LIST_COLS = (("run_id", "run"), ("scenario", "scenario"), ("rocketmq_version", "rocketmq"),
             ("started_ms", "started (UTC)"),
             ("complete", "complete"), ("signature_reached", "signature"), ("keys", "keys"), ("lost", "lost"), ("duplicated", "dup"),
             ("busy_total", "busy"), ("send_p99_ms", "p99 send"), ("intended_p99_ms", "p99 intended"),
             ("max_rto_s", "rto s"))


def when(ms: int | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def since_ms(text: str | None, now: float | None = None) -> int | None:
    """--since: a date or time in UTC (2026-11-20, 2026-11-20T02:00) or an age (36h, 7d, 2w)."""
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([hdw])", text.strip())
    if m:
        hours = float(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        return int(((now if now is not None else time.time()) - hours * 3600) * 1000)
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"--since {text!r} is neither a date nor an age",
                        "e.g. --since 2026-11-20, --since 2026-11-20T02:00 (UTC) or --since 7d") from None
    return int((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def pct(share: float) -> str:
    return "<0.01 %" if 0 < share < 0.0001 else f"{100 * share:.2f} %"


def _cell(k: str, v: Any) -> str:
    if k == "started_ms":
        return when(v)
    if k == "complete":
        return "yes" if v else ("NO" if v is False else "-")
    if k == "signature_reached":  # null: the scenario states none, or its run could not verify it
        return "reproduced" if v else ("NOT" if v is False else "-")
    return "-" if v is None else str(v)


def _table(rows: list[list[str]], head: list[str]) -> str:
    w = [max(len(x) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(c.ljust(n) for c, n in zip(r, w)).rstrip() for r in [head, *rows])


def _out(a: argparse.Namespace, data: Any, text: str) -> int:
    print(json.dumps(data, indent=1, default=str) if a.json else text)
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    rows = history.runs(a.db, a.scenario, a.version, since_ms(a.since), a.limit)
    text = (_table([[_cell(k, r[k]) for k, _ in LIST_COLS] for r in rows], [h for _, h in LIST_COLS])
            + f"\n{len(rows)} run(s) in {a.db or paths.history_db()}") if rows else \
        f"no run in {a.db or paths.history_db()} matches"
    return _out(a, rows, text)


def cmd_show(a: argparse.Namespace) -> int:
    r = history.get(a.run, a.db)
    if not a.summary:
        r = {k: v for k, v in r.items() if k != "summary"}
    ext = f" (extends {r['extends']})" if r.get("extends") else ""
    lines = [f"run {r['run_id']}  scenario {r['scenario']}{ext}",
             f"started {when(r['started_ms'])} UTC, analyzed {when(r['analyzed_ms'])} UTC; RocketMQ "
             f"{r['rocketmq_version'] or '-'}, platform {r['platform_commit'] or '- (not recorded)'}; settings "
             f"{r['settings_digest'] or '-'} (from the {r['settings_from'] or '-'})",
             "complete" if r["complete"] else
             "INCOMPLETE RUN: loss not verified: " + "; ".join(r["incomplete_reasons"])]
    lines.append(f"keys {r['keys']} (attempts {r['attempts']}, acked {r['acked']}, acked weak {r['acked_weak']}): "
                 + ", ".join(f"{k.upper() if k in ('lost', 'duplicated') else k.replace('_', ' ')} {r[k]}"
                             for k in history.COUNTS[4:] if r.get(k) is not None))
    causes = {k: v for k, v in (r["duplicates_by_cause"] or {}).items() if v}
    lines.append("extra deliveries by cause: " + (", ".join(f"{k} {v}" for k, v in causes.items()) or "none"))
    lines.append(f"busy answers: {r['busy_total']}" + (f" ({pct(r['busy_rate'])} of the sends)"
                                                      if r["busy_rate"] is not None else "")
                 + "".join(f", {k} {v}" for k, v in (r["busy_by_kind"] or {}).items()))
    lines.append("latency ms (p50 / p99): " + "; ".join(
        f"{n} {_cell('', r[f'{n}_p50_ms'])} / {_cell('', r[f'{n}_p99_ms'])}" for n, _ in history.LATENCY))
    for x in r["recovery"] or []:
        lines.append(f"fault {x['fault_id']} ({x['fault_kind']} of {x['target']}): recovery "
                     + (f"{x['rto_s']} s" if x["rto_s"] is not None else "- (no drop, or never back)"))
    for x in r["route_outages"] or []:
        lines.append(f"{x['broker']} out of namesrv's route for {x['seconds']} s")
    for x in r["noise"] or []:
        lines.append(f"noise {x['fault_kind']}: " + (x.get("words") or f"reached {x['reached_pct']} %")
                     + (" (SHORT of its intent)" if x["short"] else ""))
    rep = r.get("report")
    lines.append(f"report: {rep or '-'}" + ("" if not rep or Path(rep).is_file() else " (not there)"))
    return _out(a, r, "\n".join(lines))


def cmd_compare(a: argparse.Namespace) -> int:
    ra, rb = history.get(a.run_a, a.db), history.get(a.run_b, a.db)
    rows = history.compare(ra, rb)
    shown = rows if a.all else [x for x in rows if x["differs"] or x["figure"] in ("lost", "duplicated")]
    text = (f"A {ra['run_id']} ({when(ra['started_ms'])} UTC)\nB {rb['run_id']} ({when(rb['started_ms'])} UTC)\n"
            + _table([[x["figure"], _cell("", x["a"]), _cell("", x["b"]),
                       "" if x["change"] is None else f"{x['change']:+g}"] for x in shown],
                     ["figure", "A", "B", "B - A"])
            + ("" if a.all else f"\n({len(rows) - len(shown)} equal figure(s) not shown: --all shows them)"))
    return _out(a, {"a": ra["run_id"], "b": rb["run_id"], "figures": rows}, text)


def cmd_import(a: argparse.Namespace) -> int:
    done = history.import_paths(a.paths, a.db)
    new = sum(1 for x in done if x["new"])
    text = "\n".join(f"{'new     ' if x['new'] else 'replaced'} {x['run_id']}  ({x['summary']})" for x in done) + \
        f"\nimported {len(done)} run(s) into {a.db or paths.history_db()}: {new} new, {len(done) - new} already there"
    return _out(a, done, text)


def cmd_anomalies(a: argparse.Namespace) -> int:
    """Every recorded run that shows an anomaly (analysis/judge/anomalies.py), with the seed that drew its
    schedule when `rmqchaos explore` did: what an exploration found, night after night."""
    from analysis.judge.anomalies import anomalies
    rows = []
    for r in history.runs(a.db, a.scenario, a.version, since_ms(a.since), None, with_summary=True):
        found = [x["seen"] for x in anomalies(r["summary"] or {})] if (r["summary"] or {}).get("counts") else []
        if found and (not a.explored or r.get("explore_seed") is not None):
            rows.append({"run_id": r["run_id"], "scenario": r["scenario"], "rocketmq_version": r["rocketmq_version"],
                         "started_ms": r["started_ms"], "seed": r.get("explore_seed"), "base": r.get("explore_base"),
                         "anomalies": found, "run_dir": r["run_dir"]})
    text = (_table([[x["run_id"], x["scenario"] or "-", x["rocketmq_version"] or "-", when(x["started_ms"]),
                     "-" if x["seed"] is None else str(x["seed"]), "; ".join(x["anomalies"])] for x in rows],
                   ["run", "scenario", "rocketmq", "started (UTC)", "seed", "anomalies"])
            + f"\n{len(rows)} run(s) with an anomaly in {a.db or paths.history_db()}") if rows else \
        f"no run with an anomaly in {a.db or paths.history_db()}"
    return _out(a, rows, text)


def cmd_flags(a: argparse.Namespace) -> int:
    from analysis.history.regress import Rule, regressions
    cur = history.get(a.run, a.db)
    res = regressions(cur, history.runs(a.db, scenario=cur["scenario"]), Rule(nights=a.nights))
    lines = [f"{res['run_id']} against {len(res['baseline'])} earlier complete run(s) of {res['scenario']}: "
             + ("REGRESSION of a zero-loss scenario" if res["fails"] else
                f"{len(res['flags'])} figure(s) beyond their range" if res["flags"] else "nothing left its range")]
    lines += [f"  {'FAILS' if f['fails'] else 'flag '} {f['words']}" for f in res["flags"]]
    lines += [f"  note: {n}" for n in res["notes"]]
    lines.append(f"rule: {res['rule']}")
    return _out(a, res, "\n".join(lines))


def cmd_signatures(a: argparse.Namespace) -> int:
    """Per scenario of a matrix, its last run since --since: reproduced or NOT, when, on which commit."""
    from pipeline.workflows.matrix import signature_status
    st = signature_status(history.runs(a.db, since_ms=since_ms(a.since)), a.matrix)
    for x in st:
        x["last"] = x["last"] and {k: x["last"][k] for k in ("run_id", "started_ms", "platform_commit",
                                                              "complete", "signature_reached", "signature_words")}
    rows, by = [], {True: [], False: [], None: [], "never": []}  # scenario names by their last run's outcome
    for x in st:
        r, name = x["last"], x["scenario"]
        by[r["signature_reached"] if r else "never"].append(name)
        rows.append([name, "never run", "-", "-"] if not r else
                    [name, _cell("signature_reached", r["signature_reached"]), when(r["started_ms"]),
                     (r["platform_commit"] or "-")[:7]])
        rows[-1] += [f"{x['reached']}/{x['judged']}",
                     (r["signature_words"] or "") if r and r["signature_reached"] is False else ""]
    commits = sorted({(x["last"]["platform_commit"] or "-")[:7] for x in st if x["last"]})
    never = by["never"]
    text = (_table(rows, ["scenario", "last run", "started (UTC)", "commit", "reached", "miss"])
            + f"\n{len(by[True])} of {len(st)} scenarios reproduced in their last run"
            + (f" since {a.since}" if a.since else "") + f" (commits {', '.join(commits) or '-'})"
            + (f"; NOT: {', '.join(by[False])}" if by[False] else "")
            + (f"; not judged: {', '.join(by[None])}" if by[None] else "")
            + (f"; never run: {', '.join(never) if len(never) <= 8 else len(never)}" if never else ""))
    return _out(a, st, text)


def add_parsers(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help="the history file (default: $RMQCHAOS_HISTORY, else "
                                     "$RMQCHAOS_HOME/history.duckdb)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    h = sub.add_parser("history", help="the run history: every analyzed run, listed, shown, compared",
                       description="Every analyzed run is recorded in a DuckDB file (one row per run id: counts, "
                                   "duplicates by cause, busy answers by kind, latency, recovery times, noise "
                                   "reached, versions, the summary itself). docs/history.md")
    hs = h.add_subparsers(dest="action", required=True)
    ls = hs.add_parser("list", parents=[common], help="the runs, oldest first, with their counts",
                       description="One line per run: counts, busy answers, p99 latencies, the longest recovery.")
    ls.add_argument("--scenario", help="only this scenario name")
    ls.add_argument("--version", help="only this RocketMQ version, e.g. 5.5.0")
    ls.add_argument("--since", help="only runs started since a UTC date or time (2026-11-20, 2026-11-20T02:00) "
                                    "or an age (36h, 7d, 2w)")
    ls.add_argument("--limit", type=int, help="only the last N runs")
    ls.set_defaults(fn=cmd_list)
    sh = hs.add_parser("show", parents=[common], help="one run's row",
                       description="RUN: a run id, a unique end of one (e.g. the 6 hex digits the report shows), "
                                   "or a run directory.")
    sh.add_argument("run", metavar="RUN")
    sh.add_argument("--summary", action="store_true", help="with --json: the stored summary.json too")
    sh.set_defaults(fn=cmd_show)
    cp = hs.add_parser("compare", parents=[common], help="two runs side by side: every figure that differs",
                       description="Each figure of RUN_A and RUN_B with B - A: counts, duplicates by cause, busy "
                                   "answers by kind, latency, recovery per fault, noise reached, versions and the "
                                   "settings digest.")
    cp.add_argument("run_a", metavar="RUN_A")
    cp.add_argument("run_b", metavar="RUN_B")
    cp.add_argument("--all", action="store_true", help="the equal figures too")
    cp.set_defaults(fn=cmd_compare)
    im = hs.add_parser("import", parents=[common], help="record runs made before: from their analysis/summary.json",
                       description="PATH: a run directory, a summary.json, or a directory of runs (e.g. runs/). A run "
                                   "already in the history is replaced, never added twice.")
    im.add_argument("paths", nargs="+", metavar="PATH")
    im.set_defaults(fn=cmd_import)
    an = hs.add_parser("anomalies", parents=[common], help="every run that showed an anomaly, with its explore seed",
                       description="The runs whose figures flag an anomaly (lost acknowledged messages, unexplained "
                                   "duplicates, two masters, stale reads, reused queue offsets, damaged or unexpected "
                                   "deliveries, a node that did not start again): docs/explore.md.")
    an.add_argument("--scenario", help="only this scenario name")
    an.add_argument("--version", help="only this RocketMQ version")
    an.add_argument("--since", help="only runs started since a UTC date or an age (7d)")
    an.add_argument("--explored", action="store_true", help="only runs `rmqchaos explore` drew")
    an.set_defaults(fn=cmd_anomalies)
    fl = hs.add_parser("flags", parents=[common], help="what in one run left its scenario's trailing range",
                       description="RUN against the scenario's last complete runs before it (analysis/history/regress.py): "
                                   "any loss in a scenario none of whose runs lost (a regression: the nightly would "
                                   "fail on it), and each count, busy rate, p99 or recovery time above the trailing "
                                   "maximum by more than max(0.5 x their range, 25 % of it, a floor per figure). "
                                   "Exits 0 either way; --json's `fails` says it.")
    fl.add_argument("run", metavar="RUN")
    fl.add_argument("--nights", type=int, default=14, help="how many earlier runs make the baseline (default 14)")
    fl.set_defaults(fn=cmd_flags)
    sg = hs.add_parser("signatures", parents=[common], help="per scenario of a matrix: did its last run reproduce "
                                                            "its signature",
                       description="Each scenario of MATRIX (default scenarios/nightly.yaml) with its last run in the "
                                   "history (since --since): reproduced, NOT (with the condition that failed) or not "
                                   "judged, when, on which platform commit, and how many of its runs reached the "
                                   "signature. What the parts of a nightly (`make nightly PART=k/n`) showed together.")
    sg.add_argument("--matrix", default="scenarios/nightly.yaml", help="the matrix file (default scenarios/nightly.yaml)")
    sg.add_argument("--since", help="only runs started since a UTC date or time (2026-11-20T02:00) or an age (7d)")
    sg.set_defaults(fn=cmd_signatures)
