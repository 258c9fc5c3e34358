"""The combined report's "Explored schedules" section: one row per run `rmqchaos explore` drew
(records of pipeline/workflows/explore.py judge()), each with its seed, schedule and what it found; an anomaly
no earlier explored run of the same base showed (per the run history) is marked NEW, and its runs
come first, then the other anomalies, then the runs without one."""
from __future__ import annotations

import html
from typing import Any


def render(recs: list[dict[str, Any]]) -> str:
    if not recs:
        return ""
    e = html.escape
    found = [r for r in recs if r["anomalies"]]
    new = sum(len(r.get("new") or []) for r in recs)
    rows = []

    def seen(r: dict[str, Any], a: dict[str, Any]) -> str:
        return ("NEW " if a["check"] in (r.get("new") or []) else "") + a["seen"]
    # anomalies never found before first, then the others, then runs without one
    for r in sorted(recs, key=lambda x: (not x.get("new"), not x["anomalies"], x["complete"])):
        what = ("ANOMALY: " + "; ".join(seen(r, a) for a in r["anomalies"]) if r["anomalies"] else
                "nothing found" if r["complete"] else "did not finish: " + "; ".join(r["incomplete_reasons"] or r["failures"]))
        cls = " class=warn" if r["anomalies"] else ""
        rows.append(f"<tr{cls}><td>{e(str(r['seed']))}</td><td>{e(r['schedule'])}</td><td>{e(what)}</td>"
                    f"<td><code>{e(r['run_dir'] or '(removed: nothing found)')}</code></td></tr>")
    return ("<section id=explore><h2>Explored schedules: the anomalies they found</h2>"
            f"<p>{len(recs)} run(s) drew their faults at random (rmqchaos explore, docs/explore.md); "
            f"{len(found)} showed an anomaly"
            + (f", {new} of them (marked NEW) never shown before by an explored run of the same base" if new else "")
            + ". <code>rmqchaos shrink RUN</code> makes one smaller; "
            "the seed draws the same schedule again.</p>"
            "<table><tr><th>seed</th><th>schedule</th><th>found</th><th>run</th></tr>" + "".join(rows)
            + "</table></section>")
