"""The loss/duplication report: one self-contained HTML file (inline SVG plots, no scripts, no
network) from one or more analysis/summary.json files; several runs are shown side by side. The
verdict's words are analysis/report/verdict.py's, the plots analysis/report/plots.py's."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from analysis.evidence.findings import (NONE, fault_intents, fmt, has_cluster_evidence, has_host_evidence, kills, reached_pct,
                                        route_outages, time_origin)
from analysis.report.plots import (plot_cluster, plot_compare, plot_errors, plot_host, plot_latency, plot_links,
                                   plot_lost_dup, plot_throughput)
from analysis.ledgers.rules import BUSY_PREFIXES, CLASSES
from analysis.report.compare import comparisons
from analysis.report.page import page
from analysis.report.report_contracts import contract_sections
from analysis.judge.serving import rows as serving_rows, words as serving_words
from analysis.judge.signature import missed
from analysis.report.verdict import faults_phrase, lost_phrase, pct, settings, truncated_words, verdict
from rmqchaos.errors import UserError
from rmqchaos.run.stagetimes import ORDER, time_by_stage

__all__ = ["NONE", "comparisons", "faults_phrase", "fmt", "load_summary", "lost_phrase", "render", "route_outages",
           "settings", "verdict", "write_report"]


def load_summary(run_or_file: str | Path) -> dict[str, Any]:
    p = Path(run_or_file)
    f = p / "analysis" / "summary.json" if p.is_dir() else p
    if not f.is_file():
        raise UserError(f"{f} does not exist", f"run `rmqchaos analyze {p}` first")
    return json.loads(f.read_text())


def compare_rows(sums: list[dict[str, Any]]) -> list[list[Any]]:
    """The shared-host comparison, a row per run: busy answers of each kind, lost, duplicated keys and
    their extra deliveries by cause, p99 send latency from the intended time."""
    rows = []
    for s in sums:
        busy = s["errors"]["by_remark_prefix"]
        causes = ", ".join(f"{k} {v}" for k, v in s["duplicates_by_cause"].items() if v) or "-"
        rows.append([s["scenario"], s["run_id"][-6:], s["counts"]["attempts"], *[busy.get(p, 0) for p in BUSY_PREFIXES],
                     s["counts"]["lost"], s["counts"]["duplicated"], causes,
                     s["latency_ms"]["send_from_intended"]["p99"]])
    return rows


COMPARE_HEAD = ["scenario", "run", "attempts", *BUSY_PREFIXES, "LOST", "DUPLICATED keys",
                "extra deliveries by cause", "p99 send from intended (ms)"]


def _table(rows: list[list[Any]], head: list[str]) -> str:
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in head)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(str(fmt(x)))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{b}</table>"


def _where(x: dict[str, Any]) -> str:
    return f"{fmt(x.get('broker'))} queue {fmt(x.get('queue_id'))} offset {fmt(x.get('queue_offset'))}"


def _evidence(s: dict[str, Any]) -> list[str]:
    """The store check of lost keys, and every damaged or unexpected delivery listed with its evidence."""
    out = []
    sc = s.get("store_check")
    if sc is None:
        if s["counts"]["lost"]:
            out.append("<p class=warn>The lost keys were not checked against the brokers' stores (no store in this "
                       "run directory).</p>")
    elif sc["checked"]:
        out.append(f"<h3>Lost and indeterminate keys, looked up in the brokers' stores</h3><p>{sc['checked']} keys "
                   f"looked up in the store files of {html.escape(', '.join(sc['nodes']))} (by {sc['method']}, "
                   f"{sc['seconds']} s): lost {sc['lost_from_store']} in no commit log{truncated_words(sc)}, <b>{sc['lost_in_delivery']} "
                   f"stored but never delivered</b>; indeterminate: {sc['indeterminate_stored']} stored and never "
                   f"delivered, {sc['indeterminate_not_stored']} never stored.</p>")
        rows = [[e["key"], e["class"], e["verdict"].replace("_", " "),
                 "; ".join(f"{x['node']} queue {x['queue_id']} offset {x['queue_offset']} (commit log {x['commit_offset']}"
                           + (", past its truncated log" if x.get("in_log") is False else "") + ")" for x in e["stored_at"])] for e in sc["examples"] if e["stored_at"]]
        if rows:  # the stored ones, with where: a consumer or offset problem, not the broker's
            out.append(_table(rows, ["key", "class", "verdict", "stored at"]))
        absent = [e["key"] for e in sc["examples"] if not e["stored_at"]]
        if absent:
            out.append(f"<p>Lost keys in no commit log, e.g.: {html.escape(', '.join(absent[:10]))}"
                       + (" …" if sc["lost_from_store"] > 10 else "") + "</p>")
    kinds = s.get("corrupted_by_kind") or {}
    if any(kinds.values()):
        out.append("<h3>Damaged deliveries</h3><p>" + html.escape(", ".join(f"{k.replace('_', ' ')} {v}"
                                                                           for k, v in kinds.items())) + "</p>")
        out.append(_table([[x["kind"].replace("_", " "), x["key"], _where(x), x["msg_id"], x["damage"]]
                           for x in s.get("corrupted", [])],
                          ["kind", "counted for key", "read from", "msgId", "what was damaged"]))
    if s.get("unexpected_examples"):
        out.append("<h3>Deliveries of keys never sent</h3>" + _table(
            [[x["key"], x.get("body_key"), x.get("body_ok"), _where(x), x["msg_id"]] for x in s["unexpected_examples"]],
            ["KEYS property", "body's key", "body intact", "read from", "msgId"]))
    return out


def _failover(s: dict[str, Any]) -> list[str]:
    """Each failover of a replicated group (analysis/replication/failover.py): its times, the acks per node, the
    two-master seconds and where the group's lost keys are; nothing without a replicated group."""
    fo = s.get("failover")
    if not fo:
        return []
    out = ["<h3>Failovers of the replicated groups</h3>"]
    if fo["failovers"]:
        out.append(_table([[f["group"], f"{f['fault_kind']} {f['fault_id']}", f["old_master"], f["was_master"],
                            f["detection_s"], f["election_s"], f["new_master"], f["first_ack_new_master_s"],
                            f"{fmt(f['first_ack_any_s'])} ({fmt(f['first_ack_any_node'])})", f["lost_in_switch"],
                            fmt(f.get("stale_reads")), len(f["two_master_seconds"]), "; ".join(f"{k}: {v}" for k, v in f["reasons"].items())]
                           for f in fo["failovers"]],
                          ["group", "fault", "node hit", "was master", "detected (s)", "elected (s)", "new master",
                           "first ack on it (s)", "first ack on any node (s)", "lost in the switch",
                           "read from it after the election", "two-master seconds", "not seen"]))
    else:
        out.append("<p>No fault hit a node of a replicated group.</p>")
    out.append("<p>Acknowledged sends by the node that stored them (the offsetMsgId's store host): " + html.escape(
        "; ".join(f"{g}: " + ", ".join(f"{n} {k:,}" for n, k in d["acked_by_node"].items())
                  for g, d in fo["groups"].items())) + "</p>")
    if fo["two_master_windows"]:
        out.append("<p class=warn>Seconds in which two nodes of one group acknowledged sends:</p>" + _table(
            [[w["group"], w["t"], ", ".join(f"{n} {k}" for n, k in w["nodes"].items())] for w in fo["two_master_windows"]],
            ["group", "second (epoch)", "acks by node"]))
    lost = fo.get("lost")
    if lost and lost["checked"]:
        out.append("<p>Lost keys of the replicated groups in every replica's store: " + html.escape(", ".join(
            f"{k.replace('_', ' ')} {lost[k]}" for k in ("lost_in_switch", "stored_on_other_replica",
                                                       "stored_on_acking_node", "stored_ack_node_unknown",
                                                       "truncated_on_replica", "never_stored")))
                   + (f" ({lost['cut_back']} of those lost in the switch were past the end of the old master's log "
                      "once it was back, and written over)" if lost.get("cut_back") else "") + "</p>" + _table(
            [[e["key"], e["verdict"].replace("_", " "), ", ".join(e["acked_by"]),
              ", ".join([*(f"{n} ({'up' if u else 'down' if u is False else '?'})" for n, u in e["stored_on_up"].items()),
                         *(f"{n} (truncated)" for n in e.get("truncated_on") or [])])]
             for e in lost["examples"]], ["key", "where", "acknowledged by", "stored on (at the last sample)"]))
    again = fo.get("duplicates_after_switch")
    if again:  # absent in summaries before it; null without the receive ledger
        out.append("<p>Deliveries of a stored copy repeated, by who served them (the pulling client's view): "
                   + html.escape(f"{again['served_by_another_node']:,} by another node of the group than the first "
                                 f"(read again across a switch), {again['served_by_the_same_node']:,} by the same node "
                                 f"(a re-pull), {again['server_unknown']:,} not known") + ".</p>")
    return out


def _intents(s: dict[str, Any]) -> list[str]:
    """Each fault's achieved against asked (its evidence's `intent`, chaos/intent.py): the worst
    measure's reach and the fault's own words; a short one says SHORT."""
    xs = fault_intents(s)
    if not xs:
        return []
    return ["<h3>What each fault achieved against what it was asked</h3>" + _table(
        [[x["fault_id"], x["fault_kind"], x["target"], pct(reached_pct(x["intent"])),
          "SHORT" if x["intent"].get("short") else "", x["intent"].get("words")] for x in xs],
        ["fault", "kind", "target", "reached (worst measure)", "short of intent", "what it achieved"])]


def _serving(s: dict[str, Any]) -> list[str]:
    """Whether the consumers were served (analysis/judge/serving.py): the gate, code-25 refusals per broker, restarts."""
    sv = s.get("serving")
    if not sv:
        return []
    warn = (sv.get("gate") or {}).get("outcome") == "refused" or any(
        v["within_bound"] is False for r in sv["restarts"] for v in r["groups"].values())
    return [f"<h3>Consumers served</h3><p{' class=warn' if warn else ''}>{html.escape(serving_words(sv))}</p>"
            + _table(*serving_rows(sv))]


def _run_section(s: dict[str, Any], several: bool = False) -> str:
    c = s["counts"]
    lat = s["latency_ms"]
    load = s.get("load") or {}
    tsp = {b: conf.get("transientStorePoolEnable", "false") for b, conf in s["cluster"]["brokers"].items()}
    parts = [f"<h2>{html.escape(s['scenario'])} <small>{html.escape(s['run_id'])}</small></h2>",
             *([f"<p><b>{html.escape(verdict(s))}</b></p>"] if several else []),
             f"<p>RocketMQ {html.escape(str(s['versions'].get('rocketmq', '?')))}; policy "
             f"{html.escape(str((load.get('policy') or {}).get('kind', '-')))}; transientStorePoolEnable "
             f"{html.escape(json.dumps(tsp))}; run directory <code>{html.escape(s['run_dir'])}</code></p>"]
    if s.get("complete") is False:
        parts.insert(1, f"<p class=warn><b>INCOMPLETE RUN: loss not verified.</b> "
                        f"{html.escape('; '.join(s.get('incomplete_reasons', [])))}. "
                        f"{c.get('undelivered_at_stop', 0)} acknowledged keys were not delivered before the consumers "
                        "stopped: counted as undelivered at stop, not as lost.</p>")
    for w in s.get("warnings", []):
        parts.append(f"<p class=warn>warning: {html.escape(w)}</p>")
    parts.append(_table([[c["keys"], c["attempts"], c["acked"], c["acked_weak"], c["ok"], c["lost"],
                          c.get("undelivered_at_stop", 0), c["duplicated"],
                          c["duplicate_deliveries"], c["recovered"], c["failed"], c["indeterminate"], c["unexpected"],
                          c.get("corrupted_deliveries", 0)]],
                        ["keys", "attempts", "acked", "acked weak", "ok", "LOST", "undelivered at stop (not verified)",
                         "DUPLICATED", "extra deliveries", "recovered", "failed", "indeterminate", "unexpected",
                         "CORRUPTED copies"]))
    pace = s.get("load_pace")
    if pace:
        parts.append(f"<p{' class=warn' if pace['short'] else ''}>Load: {html.escape(pace['words'])} "
                     f"({pace['first_attempts']:,} of {pace['asked_messages']:,} messages sent).</p>")
    parts += _evidence(s) + _failover(s) + _serving(s)
    parts += [f"<h3>{html.escape(t)}</h3><p>{html.escape(note)}</p>" + _table(rows, head)
              for t, note, rows, head in contract_sections(s)]
    parts.append("<h3>Duplicates by cause</h3>" + _table([list(s["duplicates_by_cause"].values())],
                                                          list(s["duplicates_by_cause"])))
    rb = s.get("retried_keys_by_batch_position") or {}
    if any(rb.values()):
        parts.append("<p>Keys redelivered through %RETRY%, by their place in the listener batches of their "
                     "first-hand deliveries (a consumer that acks only index 0 sends back exactly 1..n-1): " + html.escape(
                         f"always at index 0: {rb['first_in_batch']}; at index 1..n-1: {rb['later_in_batch']}; "
                         f"never delivered first-hand: {rb['never_first']}") + "</p>")
    weak = {k: v for k, v in (s["errors"].get("by_status") or {}).items() if k not in ("SEND_OK", "None")}
    if c["acked_weak"] or weak:
        parts.append("<p>Stored with a weak status (the send returned, but the flush or the slave did not "
                     "confirm in time): " + html.escape(", ".join(f"{k} {v}" for k, v in sorted(weak.items())))
                     + f"; {c['acked_weak']} keys acknowledged only that way, <b>{c['acked_weak_lost']} of them "
                     "lost</b>.</p>")
    parts.append("<h3>Latency (ms)</h3>" + _table(
        [[k, v["n"], v["p50"], v["p95"], v["p99"], v["max"]] for k, v in lat.items()],
        ["measure", "n", "p50", "p95", "p99", "max"]))
    if s.get("windows"):
        parts.append("<h3>Event windows</h3>" + _table(
            [[w["id"], w["kind"], w["target"], round((w["end_ms"] - w["start_ms"]) / 1000, 1),
              ", ".join(f"{k} {v}" for k, v in sorted(w["keys_by_class"].items())),
              w["latency_from_intended_ms"]["p99"], w["throughput_drop"], w["rto_s"]] for w in s["windows"]],
            ["id", "kind", "target", "seconds", "keys meant to be sent inside", "p99 from intended (ms)",
             "throughput drop", "RTO (s)"]))
    parts += _intents(s)
    by_broker = [[w["id"], b, *[d[k][x] for k in ("during", "outside") for x in ("n", "p50", "p99")]]
                 for w in s.get("windows") or [] if w["kind"] == "fault"
                 for b, d in (w.get("send_ms_by_broker") or {}).items()]
    if by_broker:
        parts.append("<h3>Send latency by broker (acked sends' round trip, ms)</h3>" + _table(
            by_broker, ["window", "broker", "n inside", "p50 inside", "p99 inside", "n outside", "p50 outside",
                        "p99 outside"]))
    if s.get("answers"):
        parts.append("<h3>Answers, and what was stored all the same</h3><p>An attempt counts as stored when its "
                     "own msgId (a fresh UNIQ_KEY per attempt) was delivered.</p>" + _table(
                         [[a["answer"], a["attempts"], a["stored"], a["dup_keys_first_answer"], a["dup_keys_first_stored"]]
                          for a in s["answers"]],
                         ["answer", "attempts", "stored all the same", "duplicated keys with this first answer",
                          "… whose first attempt was stored"]))
    parts += [f"<div class=plot>{plot_throughput(s)}</div>", f"<div class=plot>{plot_lost_dup(s)}</div>",
              f"<div class=plot>{plot_errors(s)}</div>", f"<div class=plot>{plot_latency(s)}</div>"]
    if has_host_evidence(s):
        parts.append(f"<div class=plot>{plot_host(s)}</div>")
    if has_cluster_evidence(s):
        t0 = time_origin(s)
        fe = ([m for m in s.get("monitor") or [] if "frame_errors" in m] or [{}])[-1].get("frame_errors") or {}
        for o in route_outages(s):
            until = f"{o['end_ms'] / 1000 - t0:.0f} s" if o["end_ms"] else "the end of the run"
            parts.append(f"<p class=warn>{html.escape(o['broker'])} answered but was <b>not listed by namesrv</b> from "
                         f"{o['start_ms'] / 1000 - t0:.0f} s to {until} (since the first attempt); sends acked in that "
                         f"time: {o['acked_on_it']} on it, {o['acked_elsewhere']} elsewhere, {o['failed']} failed."
                         + (f" Namesrv refused {fe['count']} frame(s) as too long (last {fe['last_length']} bytes, "
                            f"limit {fe['limit']})." if fe.get("count") else "") + "</p>")
        parts.append(f"<div class=plot>{plot_cluster(s)}</div>")
    if (s.get("links") or {}).get("links"):
        parts.append(f"<div class=plot>{plot_links(s)}</div>")
    return "<section>" + "\n".join(parts) + "</section>"


def spread(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario: runs, and min / median / max of lost, lost per kill and duplicated."""
    import statistics
    out = []
    for name in dict.fromkeys(s["scenario"] for s in summaries):
        ss = [s for s in summaries if s["scenario"] == name]
        lost = [s["counts"]["lost"] for s in ss]
        per_kill = [s["counts"]["lost"] / kills(s) for s in ss if kills(s)]
        dup = [s["counts"]["duplicated"] for s in ss]

        def mmm(v: list[float]) -> str:
            return f"{min(v):g} / {statistics.median(v):g} / {max(v):g}" if v else "-"
        out.append({"scenario": name, "runs": len(ss), "lost": mmm(lost), "lost_per_kill": mmm(per_kill),
                    "duplicated": mmm(dup), "acked": mmm([s["counts"]["acked"] for s in ss])})
    return out


def render(summaries: list[dict[str, Any]], title: str = "RocketMQ loss and duplication report",
           extra: str = "") -> str:
    """extra: a section of HTML after the runs' own (the run history's trends: analysis/history/trends.py)."""
    # misses first: a run that did not show what its scenario exists to show is read before the rest
    first = sorted(summaries, key=lambda s: not missed(s))
    body = [f"<h1>{html.escape(title)}</h1>", _signatures(first), "<section id=verdict><h2>Verdict</h2>"
            + "".join(f"<p class=verdict>{html.escape(v)}</p>" for v in [verdict(s) for s in first] + comparisons(summaries))
            + "</section>"]
    if len(summaries) > 1:
        body.append("<h2>Spread per scenario (min / median / max)</h2>")
        body.append(_table([[r["scenario"], r["runs"], r["acked"], r["lost"], r["lost_per_kill"], r["duplicated"]]
                            for r in spread(summaries)],
                           ["scenario", "runs", "acked", "lost", "lost per kill", "duplicated"]))
        body.append("<h2>Side by side</h2>")
        body.append(_table([[s["scenario"], s["run_id"], s["counts"]["acked"]] + [s["counts"].get(c, 0) for c in CLASSES]
                            + [kills(s)] for s in summaries], ["scenario", "run", "acked", *CLASSES, "kills"]))
        body.append(f"<div class=plot>{plot_compare(summaries)}</div>")
        body.append("<h2>Busy answers, loss, duplicates and latency</h2>" + _table(compare_rows(summaries), COMPARE_HEAD))
    body += [_run_section(s, len(summaries) > 1) for s in summaries]
    body.append(extra)
    body.append(time_table(summaries))
    return page(title, "".join(body))


def _signatures(summaries: list[dict[str, Any]]) -> str:
    """Per run (misses first): what its scenario exists to show and whether it did, with what failed."""
    rows = [[s["scenario"], s["run_id"][-6:], (s.get("signature") or {}).get("shows", NONE),
             {True: "reproduced", False: "NOT reproduced", None: "NOT verified"}[(s.get("signature") or {}).get("reached")]
             if s.get("signature") else "no signature",
             "; ".join(f"{m['what']} ({m['seen']})" for m in (s.get("signature") or {}).get("misses") or []) or NONE]
            for s in summaries]
    return "<section id=signatures><h2>Signatures</h2>" + _table(rows, ["scenario", "run", "exists to show", "",
                                                                         "what failed"]) + "</section>"


def with_times(s: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The summary with where the run's time went (state.json's stages: up to this report)."""
    f = run_dir / "state.json"
    if run_dir.is_dir() and f.is_file():
        s["time"] = time_by_stage(json.loads(f.read_text()).get("stages") or {})
    return s


def time_table(summaries: list[dict[str, Any]]) -> str:
    """Per run: seconds by stage, between stages (task hops), wall, and wall against the load."""
    rows = [s for s in summaries if s.get("time")]
    if not rows:
        return ""
    names = [n for n in ORDER if any(n in s["time"]["stages"] for s in rows)]
    return "<h2>Where the time went (s)</h2>" + _table(
        [[s["scenario"], *[fmt(s["time"]["stages"].get(n)) for n in names], s["time"]["between_s"],
          s["time"]["wall_s"], fmt(s["time"]["ratio"])] for s in rows],
        ["scenario", *names, "between stages", "wall", "wall / load"])


def write_report(runs: list[str | Path], out: str | Path, extra: str = "") -> Path:
    sums = [with_times(load_summary(r), Path(r)) for r in runs]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(sums, extra=extra))
    return out
