"""The pre-release test against a baseline: the candidate (the release manager's RocketMQ version and
broker.conf overrides over the base scenario) and the baseline (the base scenario on Param
`baseline_version`, default the pinned version, no overrides; the same load and faults: 4.9.7 against
5.5.0 is the upgrade question, prerelease.py maps or refuses the keys that differ) run alternately on this machine, C1, B1, C2, B2 ...,
each a normal run directory. The verdict adds relative gates to the absolute ones: the candidate's
worst round loses no more than the baseline's worst, its p99 send latency stays within
+max_p99_increase_pct % of the baseline's worst round (the baseline's spread), and its busy rate is
not above the baseline's (+ BUSY_EPSILON). compare.json and compare.html beside the runs show the
sides side by side."""
from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from analysis.report.page import page
from pipeline.workflows import gates, maxrate, prerelease
from pipeline.workflows.matrix import failures
from pipeline.runs import as_run, default_run_dir
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir

#: busy answers per attempt the candidate may exceed the baseline by: two healthy runs of a few
#: thousand attempts differ by a handful of busy answers, which is not a regression
BUSY_EPSILON = 0.001
MAX_ROUNDS = 5
#: relative gate -> (what it compares, unit, the summary value of gates.GATES it reads)
RELATIVE: dict[str, tuple[str, str, str]] = {
    "lost_vs_baseline": ("acknowledged keys never delivered, the candidate's worst round vs the baseline's worst",
                         "keys", "max_lost"),
    "p99_vs_baseline": ("p99 send latency, the candidate's worst round vs the baseline's worst "
                        "+ max_p99_increase_pct %", "ms", "max_p99_send_ms"),
    "busy_vs_baseline": (f"busy answers per attempt, the candidate's worst round vs the baseline's worst "
                         f"+ {BUSY_EPSILON:g}", "", "max_busy_error_rate"),
}
_ROWS = (("lost", "max_lost"), ("duplicated", "max_duplicated"), ("p99_send_ms", "max_p99_send_ms"),
         ("busy_rate", "max_busy_error_rate"))


def prepare(params: dict[str, Any]) -> list[str]:
    """The run directories of a pre-release test, in the order they run: candidate and baseline
    (Param `baseline`, default true) alternately for `rounds` rounds. Each names the run before it
    (state `after`): the cluster slot keeps that order."""
    rounds = 1 if params.get("rounds") is None else params["rounds"]
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise UserError(f"rounds {rounds!r} is not a whole number from 1 to {MAX_ROUNDS}",
                        "rounds: how many times the candidate (and the baseline) run")
    maxrate.settings(params.get("max_rate_search"))  # a bad search setting fails here, before any cluster
    sides = ("candidate", "baseline") if params.get("baseline", True) else ("candidate",)
    stamp = first = default_run_dir("prerelease")
    n = 1
    while stamp.with_name(f"{stamp.name}-candidate-1").exists():  # another test prepared in the same second
        n += 1
        stamp = first.with_name(f"{first.name}.{n}")
    prerelease.check(params, stamp)  # both sides, keys across their versions too, before any run directory
    out: list[str] = []
    for i in range(1, rounds + 1):
        for side in sides:
            run = prerelease.create(params, stamp.with_name(f"{stamp.name}-{side}-{i}"), baseline=side == "baseline")
            run.update_state(prerelease={"side": side, "round": i, "comparison": str(stamp)},
                             after=out[-1] if out else None)
            out.append(str(run.path))
    return out


def label(run_dir: str | Path | RunDir) -> str:
    """"candidate round 1" / "baseline round 2": which run of the test this is."""
    st = as_run(run_dir).state().get("prerelease") or {}
    return f"{st.get('side', 'candidate')} round {st.get('round', 1)}"


def _overrides(run: RunDir) -> dict[str, Any]:
    """The broker.conf overrides the pre-release overlay (written beside the run) laid over the base."""
    src = run.path.with_name(run.path.name + ".scenario.yaml")
    try:
        doc = yaml.safe_load(src.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return ((doc.get("cluster") or {}).get("broker_defaults") or {}).get("config") or {}


def measure(run_dir: str | Path | RunDir) -> dict[str, Any]:
    """One run's row of the comparison: its side, round, version, overrides, what went wrong
    (matrix.failures: failed stages, unverified loss) and the gated values (None: not measured)."""
    r = as_run(run_dir)
    st = r.state().get("prerelease") or {}
    row: dict[str, Any] = {"run": str(r.path), "side": st.get("side", "candidate"), "round": st.get("round", 1),
                           "rocketmq_version": r.scenario().cluster.rocketmq_version,
                           "broker_config": _overrides(r), "renamed_keys": r.state().get("renamed_keys") or {}, "failures": failures(r, signature_misses="flag"), "complete": False,
                           "acknowledged": None, **{k: None for k, _ in _ROWS}}
    if not r.summary_file.exists():
        row["failures"] = row["failures"] or ["not analyzed"]
        return row
    s = json.loads(r.summary_file.read_text())
    row["complete"] = bool(s.get("complete"))
    row["acknowledged"] = s["counts"].get("acked")
    for key, gate in _ROWS:
        row[key] = gates.GATES[gate][2](s)
    return row


def _worst(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows]
    return None if not vals or any(v is None for v in vals) else max(vals)


def relative(rows: list[dict[str, Any]], max_p99_increase_pct: float | None) -> list[gates.GateResult]:
    """The relative gates on measured rows (max_p99_increase_pct None: no p99 gate); none without a
    baseline row. A value not measured on either side fails its gate."""
    cand = [r for r in rows if r["side"] == "candidate"]
    base = [r for r in rows if r["side"] == "baseline"]
    if not base:
        return []
    out = []
    for name, (what, unit, gate) in RELATIVE.items():
        key = dict((g, k) for k, g in _ROWS)[gate]
        b, c = _worst(base, key), _worst(cand, key)
        if name == "p99_vs_baseline":
            if max_p99_increase_pct is None:
                continue
            limit = None if b is None else round(b * (1 + max_p99_increase_pct / 100), 3)
        elif name == "busy_vs_baseline":
            limit = None if b is None else round(b + BUSY_EPSILON, 6)
        else:
            limit = b
        out.append(gates.GateResult(name, limit, c, limit is not None and c is not None and c <= limit, what, unit))
    return out


def evaluate(run_dirs: list[str], params: dict[str, Any], searches: list[str] | None = None) -> dict[str, Any]:
    """The verdict on a pre-release test's runs: each run's failures, the absolute gates (Params
    max_lost ...) on every candidate round, and, with a baseline and Param `relative_gates` (default
    true), the relative gates. Passed only if no run failed or is unverified and every gate held."""
    rows = [measure(d) for d in run_dirs]
    absolute = {g: params.get(g) for g in gates.GATES}
    results: list[dict[str, Any]] = []
    for row in rows:
        if row["side"] != "candidate" or row["failures"]:
            continue
        for g in gates.evaluate(row["run"], absolute)["gates"]:
            results.append(g | {"line": f"candidate round {row['round']}: {g['line']}"})
    rel = relative(rows, params.get("max_p99_increase_pct", 50)) if params.get("relative_gates", True) else []
    verified = bool(rows) and not any(r["failures"] for r in rows)
    if not verified:  # a relative gate against a run that failed or lost unverified says nothing
        rel = []
    results += [asdict(g) | {"line": g.line()} for g in rel]
    problems = [f"{r['side']} round {r['round']} failed: {'; '.join(r['failures'])}" for r in rows if r["failures"]]
    found, missing = maxrate.collect(searches or [])  # informational: no gate on the rates
    if maxrate.settings(params.get("max_rate_search")) and not searches:
        missing.append("max-rate search asked for, but none was prepared (see the failed `search_sides` task)")
    return {"passed": verified and not missing and all(g["passed"] for g in results), "runs": rows,
            "gates": results, "problems": problems + missing, "max_rate": found}


def judge(run_dirs: list[str], params: dict[str, Any], searches: list[str] | None = None) -> dict[str, Any]:
    """evaluate(), compare.json and compare.html written beside the runs, and a UserError naming each
    failed run and each crossed gate with its limit and measured value. Returns the verdict with
    `report` (the HTML)."""
    if not run_dirs:
        raise UserError("the pre-release test has no run", "see the failed `prepare` task")
    v = evaluate(run_dirs, params, searches)
    first = as_run(run_dirs[0])
    stem = Path((first.state().get("prerelease") or {}).get("comparison") or first.path)
    out_json, out_html = stem.with_name(stem.name + "-compare.json"), stem.with_name(stem.name + "-compare.html")
    out_json.write_text(json.dumps(v, indent=1))
    out_html.write_text(render(v))
    v["report"] = str(out_html)
    for m in v["max_rate"]:
        print(f"max-rate search, {m['side']}: {m['verdict']}", flush=True)
    for g in v["gates"]:
        print(("held: " if g["passed"] else "CROSSED: ") + g["line"], flush=True)
    crossed = [g["line"] for g in v["gates"] if not g["passed"]]
    problems = v["problems"] + (["pre-release gate crossed: " + " | ".join(crossed)] if crossed else [])
    if problems:
        raise UserError(" | ".join(problems), f"see {out_html}")
    return v


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "none"
    if isinstance(v, list):
        return "; ".join(map(str, v)) or "none"
    return f"{v:g}" if isinstance(v, float) else str(v)


def render(v: dict[str, Any]) -> str:
    """compare.html: the runs in columns (candidate and baseline alternating, as they ran), then the gates."""
    rows = v["runs"]
    head = "".join(f"<th>{r['side']} {r['round']}</th>" for r in rows)
    lines = [("RocketMQ version", "rocketmq_version"), ("broker.conf overrides", "broker_config"),
             ("keys renamed for its version", "renamed_keys"),
             ("acknowledged keys", "acknowledged"), ("lost", "lost"), ("duplicated", "duplicated"),
             ("p99 send, ms", "p99_send_ms"), ("busy answers per attempt", "busy_rate"),
             ("loss verified", "complete"), ("failures", "failures")]
    body = "".join(f"<tr><th>{label}</th>" + "".join(f"<td>{html.escape(_cell(r[k]))}</td>" for r in rows) + "</tr>"
                   for label, k in lines)
    links = "".join(f'<td><a href="{html.escape(Path(r["run"]).name)}/report.html">report</a></td>' for r in rows)
    gate_rows = "".join(
        f"<tr class={'ok' if g['passed'] else 'bad'}><td>{html.escape(g['gate'])}</td>"
        f"<td>{html.escape(g['line'])}</td><td>{'held' if g['passed'] else 'CROSSED'}</td></tr>" for g in v["gates"])
    verdict = "passed" if v["passed"] else "FAILED"
    ver = {side: ", ".join(sorted({r["rocketmq_version"] for r in rows if r["side"] == side}))
           for side in ("candidate", "baseline")}
    title = (f"candidate {ver['candidate']} vs baseline {ver['baseline']}"  # the upgrade question: two versions
             if ver["baseline"] and ver["baseline"] != ver["candidate"] else "candidate vs baseline")
    # the reports' one frame and style (analysis/report/page.py); only the gates' row colours are this page's
    return page("pre-release: candidate vs baseline",
                "<style>.bad{background:#fdd}.ok{background:#efe}</style>"
                f"<h1>Pre-release: {html.escape(title)} — {verdict}</h1>"
                + "".join(f"<p class=bad>{html.escape(p)}</p>" for p in v["problems"])
                + f"<table><tr><th></th>{head}</tr>{body}<tr><th>run</th>{links}</tr></table>"
                f"<h2>Gates</h2><table><tr><th>gate</th><th>limit and measured</th><th></th></tr>{gate_rows}</table>"
                + _max_rate(v.get("max_rate") or []))


def _max_rate(found: list[dict[str, Any]]) -> str:
    """The maximum-rate search's section: each side's last rate that held, then its steps."""
    if not found:
        return ""
    s = found[0]["settings"]
    out = (f"<h2>Maximum rate (informational)</h2><p>steps of {s['step_duration']:g} s from {s['start']:g} msg/s "
           f"(x{s['factor']:g}, at most {s['steps']} steps); a step holds with p99 send ≤ {s['max_p99_send_ms']:g} ms, "
           f"error rate ≤ {s['max_error_rate']:g} and an achieved rate ≥ {maxrate.MIN_ACHIEVED:.0%} of the asked</p>"
           "<table><tr><th>side</th><th>last rate that held, msg/s</th><th>verdict</th></tr>"
           + "".join(f"<tr><td>{m['side']}</td><td>{_cell(m['max_rate']) if m['max_rate'] else 'none'}</td>"
                     f"<td>{html.escape(m['verdict'])}</td></tr>" for m in found) + "</table>")
    cols = ("rate", "achieved_rate", "p99_send_ms", "error_rate", "attempts", "acked")
    for m in found:
        out += (f"<h3>{m['side']}: steps</h3><table><tr><th>asked msg/s</th><th>achieved msg/s</th><th>p99 send, ms"
                "</th><th>error rate</th><th>attempts</th><th>acknowledged</th><th></th></tr>"
                + "".join("<tr class=" + ("ok" if st["held"] else "bad") + ">"
                          + "".join(f"<td>{html.escape(_cell(st[c]))}</td>" for c in cols)
                          + f"<td>{'held' if st['held'] else html.escape('broke: ' + st['why'])}</td></tr>"
                          for st in m["steps"]) + "</table>")
    return out
