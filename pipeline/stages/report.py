"""Stage `report`: the run's text report (stages, witness, counts) and its HTML report; and the
combined HTML report of several runs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.history import trends
from pipeline.runs import as_run
from pipeline.stages.stage import stage
from rmqchaos.errors import UserError
from rmqchaos.run.rundir import RunDir
from rmqchaos.run.stagetimes import time_by_stage, time_line


def run(run_dir: str | Path | RunDir, history: bool = False) -> dict[str, Any]:
    """report.txt / report.json (stages, witness, counts) and, when the run was analyzed, report.html
    (history: with the run history's trends and the run's regression flags, pipeline/history/trends.py)."""
    r = as_run(run_dir)
    with stage(r, "report"):
        _write(r, history)
    return {"txt": str(r.report_txt), "html": str(r.report_html) if r.report_html.exists() else None}


def rebuild(run_dirs: list[str | Path | RunDir], out: str | Path | None = None,
            history: bool = False) -> dict[str, Any]:
    """Each run's report again and, for several analyzed runs, one combined report (default
    runs/<time>-loss-report.html); history: with the trends. Returns {"report": the HTML to read, "runs": [...]}."""
    runs = list(dict.fromkeys(str(as_run(d).path) for d in run_dirs))  # each once, in order
    if not runs:
        raise UserError("no run directory to report on", "pass run_dirs (or trigger through an analysis)")
    htmls = [h for d in runs if (h := run(d, history)["html"])]
    if len(runs) == 1:
        return {"report": htmls[0] if htmls else str(as_run(runs[0]).report_txt), "runs": runs}
    from pipeline.runs import default_run_dir
    analyzed = [d for d in runs if as_run(d).summary_file.exists()]
    rep = combined(analyzed, out or str(default_run_dir("loss-report")) + ".html", history)["html"] if analyzed else None
    return {"report": rep, "runs": runs}


def combined(run_dirs: list[str | Path | RunDir], out: str | Path, history: bool = False,
             db: str | Path | None = None) -> dict[str, Any]:
    """One HTML report of several analyzed runs, side by side (e.g. TSP on vs off); history: with the
    run history's trends of their scenarios and their regression flags (db: the history file, default
    paths.history_db())."""
    from analysis.report.report import write_report  # matplotlib: only when a report is written
    from pipeline.history.explored import is_explored, section
    runs = [as_run(d) for d in run_dirs]
    # a drawn schedule is a scenario of its own with no history to trend against: its own section
    drawn = [str(r.path) for r in runs if is_explored(r.path)]
    extra = (trends.section([r for r in runs if str(r.path) not in drawn], db) if history else "") + section(drawn, db)
    html = write_report([r.path for r in runs], Path(out), extra)
    return {"html": str(html), "runs": [str(r.path) for r in runs]}


def _write(run: RunDir, history: bool = False) -> None:
    summary_f = run.summary_file
    if summary_f.exists():
        from analysis.report.report import write_report
        write_report([run.path], run.report_html, trends.section([run]) if history else "")
    st = run.state()
    tl = run.timeline()
    up_ev = next((e for e in tl if e["kind"] == "cluster_up"), None)
    scenario = run.scenario()
    w = scenario.checks.witness
    wfile = run.checks_dir / f"witness-{w.topic}.json" if w else None
    wres = json.loads(wfile.read_text()) if wfile and wfile.exists() else None
    stages = run.stages()
    summ = json.loads(summary_f.read_text()) if summary_f.exists() else None
    rep = {"run_id": st["run_id"], "scenario": scenario.name, "stages": stages,
           "cluster_up_s": round((up_ev["end_ms"] - up_ev["start_ms"]) / 1000, 1) if up_ev else None,
           "witness": wres}
    run.report_json.write_text(json.dumps(rep, indent=2) + "\n")
    lines = []
    if summ is not None and summ.get("complete") is False:  # the first line says what it cannot claim
        lines.append(f"INCOMPLETE RUN: loss not verified: {'; '.join(summ['incomplete_reasons'])}")
    if summ is not None:  # then the verdict, in the words of the HTML report
        from analysis.report.report import verdict
        lines.append(verdict(summ))
    patched = run.versions().get("rocketmq_patches")  # a release with patches: named where the run is
    lines += [f"run {st['run_id']}  scenario {rep['scenario']}"
              + (f"  RocketMQ {run.versions()['rocketmq']}" if patched else ""),
             f"cluster up: {rep['cluster_up_s']} s" if up_ev else "cluster up: (not run)"]
    for name, sg in stages.items():
        if name == "report":
            continue
        dur = (sg.get("end_ms", 0) - sg["start_ms"]) / 1000 if sg.get("end_ms") else None
        lines.append(f"  stage {name:8s} {sg['status']:8s} {'' if dur is None else f'{dur:.1f}s'}"
                     + (f"  {sg['error']}" if sg.get("error") else ""))
    lines.append(time_line(time_by_stage(stages)))  # where the time went, up to this report
    if wres:
        lines.append(f"witness ({wres['topic']}): sent {wres['sent']}, stored per broker "
                     f"{wres['stored_per_broker']}, read back {wres['read_back_total']} -> "
                     + ("OK" if wres["ok"] else "FAILED: " + "; ".join(wres["problems"])))
    if summ is not None:
        sig = summ.get("signature")
        lines.append(f"signature ({sig['shows']}): {sig['words']}" if sig else
                     "signature: none stated (the scenario says nothing it exists to show)")
        if summ.get("load_pace"):
            lines.append(f"load: {summ['load_pace']['words']}")
        c = summ["counts"]
        unverified = (f"undelivered at stop {c['undelivered_at_stop']} (not verified), "
                      if c.get("undelivered_at_stop") else "")
        lines.append(f"keys {c['keys']} (attempts {c['attempts']}, acked {c['acked']}, acked weak "
                     f"{c['acked_weak']}): ok {c['ok']}, LOST {c['lost']}, {unverified}DUPLICATED {c['duplicated']} "
                     f"(+{c['duplicate_deliveries']} deliveries), recovered {c['recovered']}, failed "
                     f"{c['failed']}, indeterminate {c['indeterminate']}; unexpected {c['unexpected']}")
        sc = summ.get("store_check")
        if sc and sc["checked"]:
            lines.append(f"store check ({sc['checked']} keys, {sc['method']}): lost in no commit log "
                         f"{sc['lost_from_store']}" + (f" ({sc['lost_truncated']} truncated from a replica's log)"
                                                        if sc.get("lost_truncated") else "") + f", stored but never delivered {sc['lost_in_delivery']}; indeterminate "
                         f"stored {sc['indeterminate_stored']}, never stored {sc['indeterminate_not_stored']}")
        ro = summ.get("reused_queue_offsets")
        if ro and ro["positions"]:
            lines.append(f"REUSED QUEUE OFFSETS: {ro['positions']} queue position(s) acknowledged to {ro['keys']} keys, "
                         f"{ro['lost']} of them lost, e.g. " + "; ".join(
                             f"{x['broker']} {x['topic']} queue {x['queue_id']} offset {x['queue_offset']}: "
                             + ", ".join(f"{a['key']} ({a['class']})" for a in x["acks"]) for x in ro["examples"][:2]))
        fo = summ.get("failover")
        if fo:
            lines.append("failover: acks by storing node " + "; ".join(
                f"{g} " + ", ".join(f"{n} {k}" for n, k in d["acked_by_node"].items()) for g, d in fo["groups"].items())
                + f"; {len(fo['failovers'])} failover(s), {len(fo['two_master_windows'])} two-master second(s)"
                + ("; lost of the replicated groups: " + ", ".join(
                    f"{k} {fo['lost'][k]}" for k in ("lost_in_switch", "stored_on_other_replica", "stored_on_acking_node",
                                                     "stored_ack_node_unknown", "truncated_on_replica", "never_stored"))
                   + (f" ({fo['lost']['cut_back']} of lost_in_switch past the end of the old master's log once it was back)"
                      if fo["lost"].get("cut_back") else "")
                   if fo.get("lost") else "")
                + (f"; {fo['stale_reads']} stale read(s) (delivered, stored by a deposed master after the election)"
                   if fo.get("stale_reads") else ""))
        if summ.get("serving"):
            from analysis.judge.serving import words as serving_words
            lines.append("serving: " + serving_words(summ["serving"]))
        if c.get("corrupted_deliveries"):
            lines.append(f"CORRUPTED: {c['corrupted_deliveries']} damaged deliveries ("
                         + ", ".join(f"{k} {v}" for k, v in summ["corrupted_by_kind"].items() if v) + "), e.g. "
                         + "; ".join(f"{x['kind']} from {x['broker']} queue {x['queue_id']} offset {x['queue_offset']}: "
                                     f"{x['damage']}" for x in summ["corrupted"][:3]))
        causes = {k: v for k, v in summ["duplicates_by_cause"].items() if v}
        if causes:
            lines.append("extra deliveries by cause: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
        prefixes = summ["errors"]["by_remark_prefix"]
        if prefixes:
            lines.append("broker busy texts: " + ", ".join(f"{k} {v}" for k, v in prefixes.items()))
        for a in summ.get("answers", []):
            if a["answer"] != "SEND_OK" or a["dup_keys_first_answer"]:
                lines.append(f"  answer {a['answer']}: {a['attempts']} attempts, {a['stored']} stored all the same; "
                             f"first answer of {a['dup_keys_first_answer']} duplicated keys "
                             f"({a['dup_keys_first_stored']} of those first attempts stored)")
        for w in summ["warnings"]:
            lines.append(f"warning: {w}")
        lines.append(f"html report: {run.report_html}")
    run.report_txt.write_text("\n".join(lines) + "\n")
