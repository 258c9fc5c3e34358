"""Trends: per scenario, its figures run after run (night after night) from the run history, each
run's point over the trailing range the regression rule judges it by (analysis/history/regress.py), as
inline SVG for the self-contained report; and the regression flags of a report's runs in words.
Pure: history rows in, HTML out (pipeline/history/trends.py reads the history)."""
from __future__ import annotations

import html
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from analysis.report.plots import _svg, plt
from analysis.history.regress import Rule, baseline, flag_line, regressions

# figure (a history column) -> (axis label, scale): what the report plots per scenario
FIGURES: tuple[tuple[str, str, float], ...] = (
    ("lost", "lost (acked, never delivered)", 1), ("duplicated", "duplicated keys", 1),
    ("busy_rate", "busy answers (% of sends)", 100), ("send_p99_ms", "p99 send (ms)", 1),
    ("max_rto_s", "longest recovery (s)", 1))
MAX_RUNS = 60  # the runs plotted per scenario: its latest ones


def slug(text: str) -> str:
    """A scenario name as it appears in the plots' element ids (trend-<slug>-<figure>-points)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)


def points(rows: list[dict[str, Any]], rule: Rule = Rule(), upto_ms: int | None = None) -> list[dict[str, Any]]:
    """One scenario's rows (any order) -> its latest MAX_RUNS runs started by `upto_ms`, oldest first:
    {row, judged (regress.regressions of it), range {figure: (min, max) of its baseline, or None}}."""
    shown = sorted((r for r in rows if r.get("started_ms") is not None
                    and (upto_ms is None or r["started_ms"] <= upto_ms)),
                   key=lambda r: (r["started_ms"], r["run_id"]))[-MAX_RUNS:]
    out = []
    for r in shown:
        base = baseline(r, rows, rule)
        rng: dict[str, tuple[float, float] | None] = {}
        for fig, _, _ in FIGURES:
            vals = [b[fig] for b in base if b.get(fig) is not None]
            rng[fig] = (min(vals), max(vals)) if vals else None
        out.append({"row": r, "judged": regressions(r, rows, rule), "range": rng})
    return out


def _spans(xs: list[datetime]) -> list[datetime]:
    """Each x's span, halfway to its neighbours (the ends: as far out as inside; one run: 6 hours
    either side), as [start, end] pairs flattened: the band's x values."""
    half = [(b - a) / 2 for a, b in zip(xs, xs[1:])]
    left = [half[0] if half else timedelta(hours=6), *half]
    right = [*half, half[-1] if half else timedelta(hours=6)]
    return [v for x, lt, rt in zip(xs, left, right) for v in (x - lt, x + rt)]


def plot_trend(scenario: str, pts: list[dict[str, Any]]) -> str:
    """One figure per scenario, a panel per figure: the trailing range as a band (each run's own
    baseline min..max, -range), the complete runs' points (<g id="trend-<slug>-<figure>-points">, one
    <use> marker each), runs that did not finish as grey crosses (-unfinished: their loss is not
    verified), and what the rule flagged ringed: a new loss in red (-regression), a figure beyond its
    spread in orange (-flagged)."""
    import matplotlib.dates as mdates
    xs = [datetime.fromtimestamp(p["row"]["started_ms"] / 1000, timezone.utc) for p in pts]
    bx = _spans(xs)
    fig, axes = plt.subplots(len(FIGURES), 1, figsize=(9, 1.3 * len(FIGURES) + 0.8), sharex=True)
    nan = math.nan
    for ax, (f, label, k) in zip(axes, FIGURES):
        g = f"trend-{slug(scenario)}-{f}"

        def val(p: dict[str, Any]) -> float:
            v = p["row"].get(f)
            return nan if v is None else v * k
        done = [p["row"].get("complete") is True for p in pts]
        lo = [nan if p["range"][f] is None else p["range"][f][0] * k for p in pts]
        hi = [nan if p["range"][f] is None else p["range"][f][1] * k for p in pts]
        # each run's own range, as wide as halfway to its neighbours; edged, so that a range of one
        # value (a control's 0..0) still shows as a line
        ax.fill_between(bx, [v for v in lo for _ in "ab"], [v for v in hi for _ in "ab"], facecolor="#bbdefb",
                        edgecolor="#64b5f6", lw=0.8, gid=f"{g}-range", label="its trailing range (min..max)")
        cx = [(x, val(p)) for x, d, p in zip(xs, done, pts) if d and p["row"].get(f) is not None]
        ax.plot([x for x, _ in cx], [v for _, v in cx], marker="o", ms=4, lw=1, color="#1565c0", gid=f"{g}-points",
                label="a run")
        ux = [(x, val(p)) for x, d, p in zip(xs, done, pts) if not d and p["row"].get(f) is not None]
        if ux:
            ax.plot([x for x, _ in ux], [v for _, v in ux], "x", color="#757575", ms=6, gid=f"{g}-unfinished",
                    label="did not finish (not verified)")
        for kind, fails, color in (("regression", True, "#b71c1c"), ("flagged", False, "#ef6c00")):
            fx = [(x, val(p)) for x, p in zip(xs, pts)
                  if any(fl["figure"] == f and fl["fails"] == fails for fl in p["judged"]["flags"])]
            if fx:  # ringed: markers of a Line2D, so that each is one <use> in the SVG like the points
                ax.plot([x for x, _ in fx], [v for _, v in fx], "o", ms=10, mfc="none", mew=2, color=color,
                        zorder=5, gid=f"{g}-{kind}", label="a new loss (fails)" if fails else "beyond its range")
        ax.set_title(label, fontsize=8, loc="left")
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
    handles = {lb: h for ax in axes for h, lb in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=len(handles), fontsize=7, frameon=False)
    loc = mdates.AutoDateLocator(tz=timezone.utc)
    axes[-1].xaxis.set_major_locator(loc)
    axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=timezone.utc))
    fig.subplots_adjust(left=0.07, right=0.98, top=0.92, bottom=0.06, hspace=0.45)  # tight_layout: 0.8 s a plot
    return _svg(fig)


def render(judged: list[dict[str, Any]], by_scenario: dict[str, list[dict[str, Any]]], rule: Rule = Rule(),
           note: str | None = None) -> str:
    """The report's section: the report's runs' flags (judged: regress results), then per scenario
    its trend (by_scenario: its history rows, the report's runs among them)."""
    e = html.escape
    parts = ["<section id=trends><h2>Against the run history</h2>",
             f"<p>Each run is judged {e(rule.words())} (docs/history.md).</p>"]
    if note:
        parts.append(f"<p class=warn>{e(note)}</p>")
    flags = [(j, f) for j in judged for f in j["flags"]]
    parts.append("<ul class=flags>" + "".join(f"<li class=warn data-fails={str(f['fails']).lower()}>"
                                              f"{e(flag_line(j, f))}</li>" for j, f in flags) + "</ul>" if flags else
                 "<p>Nothing in " + ("this run" if len(judged) == 1 else "these runs") + " left its range.</p>")
    for j in judged:
        parts += [f"<p><small>{e(j['scenario'])} (run {e(j['run_id'])}): note: {e(n)}</small></p>"
                  for n in j["notes"]]
    for name, rows in by_scenario.items():
        ours = {j["run_id"] for j in judged}
        # up to the report's latest run of the scenario: a report of older runs shows their time, not today's
        upto = max((r["started_ms"] for r in rows if r["run_id"] in ours and r.get("started_ms") is not None),
                   default=None)
        pts = points(rows, rule, upto)
        if not pts:
            continue
        first, last = (datetime.fromtimestamp(p["row"]["started_ms"] / 1000, timezone.utc).strftime("%Y-%m-%d")
                       for p in (pts[0], pts[-1]))
        parts.append(f"<h3>Trend: {e(name)} <small>{len(pts)} run(s), {first} to {last}</small></h3>"
                     f"<div class=plot data-scenario=\"{e(name)}\" data-runs={len(pts)}>{plot_trend(name, pts)}</div>")
    return "\n".join(parts) + "</section>"
