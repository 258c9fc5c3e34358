"""The loss/duplication report: one self-contained HTML file (inline SVG plots, no scripts, no
network) from one or more analysis/summary.json files; several runs are shown side by side."""
from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.broker_log import slow_share  # noqa: E402
from analysis.rules import BUSY_PREFIXES, CLASSES  # noqa: E402
from rmqchaos.errors import UserError  # noqa: E402

COLORS = {"ok": "#4caf50", "lost": "#d32f2f", "duplicated": "#ff9800", "recovered": "#2196f3",
          "failed": "#9e9e9e", "indeterminate": "#9c27b0", "undelivered_at_stop": "#ffeb3b"}
BUSY_COLORS = ("#c62828", "#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")
SHADE = {"fault": "#ffcdd2", "load": "#e3f2fd", "drain": "#f1f8e9"}


NONE = "\u2014"  # what an absent value reads as (never Python's None)


def fmt(x: Any) -> Any:
    return NONE if x is None else x


# ---------------------------------------------------------------- the verdict, in words

FAULT_WORDS = {"oom_kill": ("kernel OOM kill", "kernel OOM kills"), "jvm_oom": ("JVM OutOfMemoryError", "JVM OutOfMemoryErrors"),
               "kill": ("SIGKILL", "SIGKILLs"), "pause": ("pause", "pauses"), "restart": ("restart", "restarts"),
               "blkio_throttle": ("disk throttle", "disk throttles"), "page_cache_limit": ("page-cache limit", "page-cache limits"),
               "redis_noise": ("Redis disk noise", "Redis disk noise"), "es_like_noise": ("fio disk noise", "fio disk noise"),
               "topic_flood": ("%RETRY% topic flood", "%RETRY% topic floods"),
               "cleanup_retry_topics": ("%RETRY% topic cleanup", "%RETRY% topic cleanups")}
_NUM = {1: "one", 2: "two", 3: "three"}
SETTINGS = ("brokerRole", "flushDiskType", "transientStorePoolEnable")  # named in every verdict


def _n(n: int, one: str, many: str) -> str:
    return f"{_NUM.get(n, n)} {one if n == 1 else many}"


def faults_phrase(s: dict[str, Any]) -> str:
    """The faults applied in a run, e.g. 'one kernel OOM kill of broker-a' ('' for none)."""
    seen: dict[tuple[str, str], int] = {}
    for e in s.get("events", []):
        if e.get("kind") == "fault" and e.get("outcome") == "ok":
            k = (e.get("params", {}).get("fault_kind") or "fault", str(e.get("target")))
            seen[k] = seen.get(k, 0) + 1
    killed = {t for k, t in seen if k in ("oom_kill", "jvm_oom", "kill")}
    # the restart after a kill is its recovery, not a fault of its own
    parts = [_n(n, *FAULT_WORDS.get(k, (k, k + "s"))) + f" of {t}" for (k, t), n in seen.items()
             if not (k == "restart" and t in killed)]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def settings(s: dict[str, Any]) -> dict[str, str]:
    """What decides loss, per run: the masters' role, flush and TSP settings, and the send policy."""
    masters = [c for c in s["cluster"]["brokers"].values() if c.get("brokerRole", "ASYNC_MASTER") != "SLAVE"]
    out = {k: "/".join(sorted({c.get(k, {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
                                         "transientStorePoolEnable": "false"}[k]) for c in masters})) for k in SETTINGS}
    out["policy"] = str(((s.get("load") or {}).get("policy") or {}).get("kind", NONE))
    return out


def _settings_words(st: dict[str, str]) -> str:
    return f"{st['brokerRole']}, {st['flushDiskType']}, transientStorePoolEnable={st['transientStorePoolEnable']} " \
           f"and the {st['policy']} send policy"


def lost_phrase(s: dict[str, Any]) -> str:
    c, sc = s["counts"], s.get("store_check")
    out = f"lost {_n(c['lost'], 'acknowledged message', 'acknowledged messages')}"
    if not c["lost"]:
        return out
    if sc is None:
        return out + " (not checked against the brokers' stores)"
    if sc["lost_from_store"] == c["lost"]:
        return out + " (verified absent from every broker's store)"
    return out + f" ({sc['lost_from_store']} verified absent from every broker's store, {sc['lost_in_delivery']} " \
                 "stored but never delivered)"


def verdict(s: dict[str, Any]) -> str:
    """One sentence a release manager reads: what was done to the cluster, and what it lost."""
    c, sc = s["counts"], s.get("store_check")
    head = f"{s['scenario']}: with {_settings_words(settings(s))}, {faults_phrase(s) or 'a run without faults'}"
    if s.get("complete") is False:
        return (f"{head}: the run did not finish ({'; '.join(s.get('incomplete_reasons') or [])}), so loss is not "
                f"verified: {c.get('undelivered_at_stop', 0)} acknowledged messages were not delivered before the "
                "consumers stopped.")
    causes = {k: v for k, v in s["duplicates_by_cause"].items() if v}
    dup = (f"{c['duplicated']} delivered more than once (extra deliveries: "
           + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in causes.items()) + ")") if c["duplicated"] else \
        "none delivered twice"
    extra = []
    if c.get("acked_weak"):
        extra.append(f"{c['acked_weak']} acknowledged only with a weak flush/slave status ({c['acked_weak_lost']} of them lost)")
    if sc and sc.get("indeterminate_stored"):
        extra.append(f"{sc['indeterminate_stored']} unanswered sends were stored and never delivered")
    if c.get("corrupted_deliveries"):
        extra.append(f"{c['corrupted_deliveries']} damaged deliveries")
    if c.get("unexpected"):
        extra.append(f"{c['unexpected']} deliveries of keys never sent")
    return f"{head} {lost_phrase(s)}; {dup}" + "".join(f"; {x}" for x in extra) + "."


def comparisons(sums: list[dict[str, Any]]) -> list[str]:
    """A sentence per pair of different scenarios, taken in order, that had the same faults and differ in
    at most three of the settings that decide loss: the difference, and what each lost."""
    out = []
    first = list({s["scenario"]: s for s in reversed(sums)}.values())[::-1]  # each scenario's first run
    for a, b in zip(first, first[1:]):
        if faults_phrase(a) != faults_phrase(b) or a.get("complete") is False or b.get("complete") is False:
            continue
        sa, sb = settings(a), settings(b)
        diff = [k for k in sa if sa[k] != sb[k]]
        if not 0 < len(diff) <= 3:
            continue
        d = ", ".join(f"{k}={sa[k]}" for k in diff)
        other = ", ".join(f"{k}={sb[k]}" for k in diff)
        under = f"Under {faults_phrase(a)}" if faults_phrase(a) else "Without faults"
        out.append(f"{under}: with {d} ({a['scenario']}) the cluster {lost_phrase(a)}; with {other} "
                   f"({b['scenario']}), {b['counts']['lost']}.")
    return out


def load_summary(run_or_file: str | Path) -> dict[str, Any]:
    p = Path(run_or_file)
    f = p / "analysis" / "summary.json" if p.is_dir() else p
    if not f.is_file():
        raise UserError(f"{f} does not exist", f"run `rmqchaos analyze {p}` first")
    return json.loads(f.read_text())


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _shade(ax: Any, s: dict[str, Any], t0: float) -> None:
    for w in s.get("windows", []):
        kind = w["kind"] if w["kind"] in SHADE else "fault"
        ax.axvspan((w["start_ms"] / 1000) - t0, max(w["end_ms"], w["start_ms"] + 300) / 1000 - t0,
                   color=SHADE[kind], alpha=0.6, lw=0, zorder=0)  # under the data
        if kind == "fault":
            ax.text((w["start_ms"] / 1000) - t0, ax.get_ylim()[1] * 0.95, w["id"], fontsize=7, va="top", color="#b71c1c")


def _series_plot(s: dict[str, Any], title: str, xlabel: str, ylabel: str, height: float,
                 draw: Callable[[Any, list[int], list[dict[str, Any]]], None],
                 rows: Callable[[dict[str, Any]], bool] = lambda r: True) -> str:
    """One plot over the run's per-second series (x = seconds since the first attempt), with the
    event windows shaded; `draw(ax, xs, rows)` draws the lines or bars."""
    ser = [r for r in s["series"] if rows(r)]
    fig, ax = plt.subplots(figsize=(9, height))
    if ser:
        t0 = s["series"][0]["t"]
        draw(ax, [r["t"] - t0 for r in ser], ser)
        _shade(ax, s, t0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    return _svg(fig)


def plot_throughput(s: dict[str, Any]) -> str:
    def draw(ax: Any, xs: list[int], ser: list[dict[str, Any]]) -> None:
        ax.plot(xs, [r["acked"] for r in ser], label="acked/s", color="#2e7d32")
        ax.plot(xs, [r["deliveries"] for r in ser], label="received/s (first delivery)", color="#1565c0", lw=1)
        ax.plot(xs, [r["errors"] + r["timeouts"] for r in ser], label="errors+timeouts/s", color="#c62828")
    return _series_plot(s, "Throughput and error rate (shaded: load, drain and fault windows)",
                        "seconds since first attempt", "messages / s", 3, draw)


def plot_latency(s: dict[str, Any]) -> str:
    def draw(ax: Any, xs: list[int], ser: list[dict[str, Any]]) -> None:
        ax.plot(xs, [r["send_p50_ms"] for r in ser], label="send p50", color="#455a64")
        ax.plot(xs, [r["send_p99_ms"] for r in ser], label="send p99", color="#f57c00")
        ax.plot(xs, [r["intended_p99_ms"] for r in ser], label="p99 from intended time", color="#6a1b9a", ls="--")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
    return _series_plot(s, "Send latency over time (acknowledged attempts)", "seconds since first attempt", "ms",
                        3, draw, rows=lambda r: r["send_p50_ms"] is not None)


def _draw_lost_dup(ax: Any, xs: list[int], ser: list[dict[str, Any]]) -> None:
    """Keys lost / duplicated / indeterminate per second, stacked."""
    bottom = [0] * len(ser)
    for c in ("lost", "duplicated", "indeterminate"):
        vals = [r[c] for r in ser]
        ax.bar(xs, vals, bottom=bottom, color=COLORS[c], label=c, width=1.0)
        bottom = [b + v for b, v in zip(bottom, vals)]


def plot_lost_dup(s: dict[str, Any]) -> str:
    return _series_plot(s, "Lost / duplicated / indeterminate keys over time",
                        "second the message was meant to be sent", "keys", 2.6, _draw_lost_dup)


def _legend(ax: Any, loc: str = "upper right") -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
        ax.legend(fontsize=7, loc=loc)


def has_host_evidence(s: dict[str, Any]) -> bool:
    return bool(s.get("disk")) or any(v.get("write_memory") or v.get("pagecachert")
                                      for v in (s.get("broker_evidence") or {}).values())


def time_origin(s: dict[str, Any]) -> int:
    """Second 0 of a run's time axes: its first attempt, else the first disk or monitor sample."""
    if s["series"]:
        return int(s["series"][0]["t"])
    first = [x[0]["ts_ms"] // 1000 for x in (s.get("disk"), s.get("monitor")) if x]
    return min(first, default=0)


def plot_host(s: dict[str, Any]) -> str:
    """One time axis (seconds since the first attempt) for the shared-host questions: the disk's
    pressure, the brokers' own put latency, each busy text, and the keys lost / duplicated."""
    t0 = time_origin(s)
    fig, axes = plt.subplots(4, 1, figsize=(9, 8.5), sharex=True)
    ax = axes[0]
    disk = s.get("disk") or []
    if disk:
        xs = [d["ts_ms"] / 1000 - t0 for d in disk]
        ax.plot(xs, [d["write_mb_s"] for d in disk], color="#5d4037", label="device write MB/s")
        ax.set_ylabel("MB/s")
        ax2 = ax.twinx()
        ax2.plot(xs, [d["await_ms"] for d in disk], color="#f57c00", lw=1, label="await ms")
        ax2.plot(xs, [d["flushes_s"] for d in disk], color="#7b1fa2", lw=1, ls="--", label="flushes/s")
        ax2.set_yscale("symlog", linthresh=1)
        _legend(ax2, "upper left")
        ax.set_title(f"Disk {disk[0]['device']} (/proc/diskstats, each second)")
    _legend(ax)
    ax = axes[1]
    for b, ev in sorted((s.get("broker_evidence") or {}).items()):
        wm = ev.get("write_memory") or []
        if wm:  # a 10 s window ending at t: drawn as a step over it
            ax.step([w["t_ms"] / 1000 - t0 for w in wm], [w["max_ms"] for w in wm], where="pre",
                    label=f"{b} put max (10 s)")
            ax.step([w["t_ms"] / 1000 - t0 for w in wm], [w["p99_ms"] for w in wm], where="pre", lw=1, ls="--",
                    label=f"{b} put p99 (10 s)")
        sp = ev.get("slow_puts") or []
        if sp:
            ax.scatter([x["t_ms"] / 1000 - t0 for x in sp], [x["ms"] for x in sp], s=8, marker="x",
                       label=f"{b} slow puts (> 500 ms)")
        for pc in ev.get("pagecachert") or []:
            share = slow_share(pc)
            if share:
                ax.annotate(f"{b}: {share:.2%} of puts >10 ms (60 s)", (pc["t_ms"] / 1000 - t0, 0), fontsize=6,
                            rotation=90, va="bottom")
    ax.set_ylabel("ms")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_title("Broker put latency, from its own store log")
    _legend(ax)
    ax = axes[2]
    stack: dict[int, int] = {}
    for i, (prefix, pts) in enumerate(sorted((s.get("busy_series") or {}).items())):
        ax.bar([p[0] - t0 for p in pts], [p[1] for p in pts], bottom=[stack.get(p[0], 0) for p in pts], width=1.0,
               color=BUSY_COLORS[i % len(BUSY_COLORS)], label=prefix)
        for p in pts:
            stack[p[0]] = stack.get(p[0], 0) + p[1]
    ax.set_ylabel("answers / s")
    ax.set_title("Busy answers by text (code 2), each second")
    _legend(ax)
    ax = axes[3]
    _draw_lost_dup(ax, [r["t"] - t0 for r in s["series"]], s["series"])
    ax.set_ylabel("keys")
    ax.set_xlabel("seconds since first attempt")
    ax.set_title("Keys lost / duplicated / indeterminate, by the second they were meant to be sent")
    _legend(ax)
    for a in axes:
        _shade(a, s, t0)
    fig.tight_layout()
    return _svg(fig)


def route_outages(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each stretch in which the monitor saw a broker answer while namesrv did not list it:
    {broker, start_ms, end_ms (None: still out at the last sample), acked_on_it, acked_elsewhere}."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    mon = [m for m in s.get("monitor") or [] if "brokers" in m]
    for m in mon:
        for b, st in m["brokers"].items():
            if st.get("registered") is False and st.get("up") and b not in open_:
                open_[b] = {"broker": b, "start_ms": m["ts_ms"], "end_ms": None}
            elif st.get("registered") and b in open_:
                o = open_.pop(b)
                o["end_ms"] = m["ts_ms"]
                out.append(o)
    out += open_.values()
    last_t = max((r["t"] for r in s["series"]), default=0)
    for o in out:
        # still out at the last sample: every send from its start on counts
        end_t = o["end_ms"] // 1000 if o["end_ms"] else last_t + 1
        rows = [r for r in s["series"] if o["start_ms"] // 1000 <= r["t"] < end_t]
        group = o["broker"].removesuffix("-s")
        o["acked_on_it"] = sum((r.get("acked_by_broker") or {}).get(group, 0) for r in rows)
        o["acked_elsewhere"] = sum(n for r in rows for b, n in (r.get("acked_by_broker") or {}).items() if b != group)
        o["failed"] = sum(r["errors"] + r["timeouts"] for r in rows)
    return out


def has_cluster_evidence(s: dict[str, Any]) -> bool:
    """Whether the cluster monitor saw what its plot is for: many %RETRY% topics, a broker out of
    namesrv's registrations, a refused frame, or messages going through %RETRY%."""
    for m in s.get("monitor") or []:
        if (m.get("frame_errors") or {}).get("count"):
            return True
        for b in (m.get("brokers") or {}).values():
            if b.get("registered") is False or (b.get("topics") or {}).get("retry", 0) > 100:
                return True
        if any(g.get("retry_stored") for g in (m.get("backlog") or {}).values()):
            return True
    return False


def plot_cluster(s: dict[str, Any]) -> str:
    """The cluster monitor on the run's time axis: topics each broker holds, whether namesrv lists
    it (and frames namesrv refused), where the acked sends went, and each group's backlog."""
    mon = [m for m in s.get("monitor") or [] if "brokers" in m]
    t0 = time_origin(s)
    xs = [m["ts_ms"] / 1000 - t0 for m in mon]
    names = sorted({b for m in mon for b in m["brokers"]})
    fig, axes = plt.subplots(4, 1, figsize=(9, 8.5), sharex=True)
    ax = axes[0]
    for b in names:
        ax.plot(xs, [(m["brokers"].get(b) or {}).get("topics", {}).get("retry") for m in mon], label=f"{b}: %RETRY% topics")
    ax.plot(xs, [sum((m.get("namesrv") or {}).get("topics", {}).values()) if (m.get("namesrv") or {}).get("up")
                 else None for m in mon], color="k", ls="--", lw=1, label="namesrv: all topics")
    ax.set_ylabel("topics")
    ax.set_title("Topics each broker holds (its registration carries them all)")
    _legend(ax, "upper left")
    ax = axes[1]
    for i, b in enumerate(names):
        ax.step(xs, [None if (r := (m["brokers"].get(b) or {}).get("registered")) is None else int(r) + 1.5 * i
                     for m in mon], where="post", label=f"{b} listed by namesrv (1 = yes)")
    seen = 0
    for m in mon:
        fe = m.get("frame_errors") or {}
        if fe.get("count", 0) > seen and fe.get("last_ms"):
            ax.axvline(fe["last_ms"] / 1000 - t0, color="#c62828", lw=1, ls=":")
        seen = fe.get("count", 0)
    last = (mon[-1].get("frame_errors") or {}) if mon else {}
    title = "Broker registration with namesrv"
    if last.get("count"):
        title += (f" (red: {last['count']} frame(s) refused, last {last['last_length']} bytes > limit "
                  f"{last['limit']})")
    ax.set_title(title, fontsize=9)
    ax.set_yticks([])
    _legend(ax, "lower left")
    ax = axes[2]
    ser = s["series"]
    for b in sorted({b for r in ser for b in r.get("acked_by_broker") or {}}):
        ax.plot([r["t"] - t0 for r in ser], [(r.get("acked_by_broker") or {}).get(b, 0) for r in ser], label=f"acked on {b}")
    ax.plot([r["t"] - t0 for r in ser], [r["errors"] + r["timeouts"] for r in ser], color="#c62828", lw=1,
            label="failed (error or timeout)")
    ax.set_ylabel("sends / s")
    ax.set_title("Where the sends went, each second")
    _legend(ax, "upper left")
    ax = axes[3]
    for g in sorted({g for m in mon for g in m.get("backlog") or {}}):
        rows = [(m.get("backlog") or {}).get(g) for m in mon]
        ax.plot(xs, [r and r["total"] for r in rows], label=f"{g}: total backlog")
        ax.plot(xs, [r and r["retry_stored"] for r in rows], ls="--", label=f"{g}: stored in %RETRY% so far")
        ax.plot(xs, [r and max(r["instances"].values(), default=0) for r in rows], lw=1,
                label=f"{g}: largest one consumer's backlog on its own queues")
    dl = [sum(b.get("delayed") or 0 for b in m["brokers"].values()) for m in mon]
    if any(dl):
        ax.plot(xs, dl, color="#6d4c41", lw=1, ls=":", label="waiting in the delay levels (every group)")
    ax.set_ylabel("messages")
    ax.set_xlabel("seconds since first attempt")
    ax.set_title("Consumer groups (from the brokers; per consumer by RocketMQ's default allocation)")
    _legend(ax, "upper left")
    for a in axes:
        _shade(a, s, t0)
    fig.tight_layout()
    return _svg(fig)


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


WEAK = ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
TRANSPORT = ("connection refused", "connection lost", "connect failed", "route lookup failed", "transport error")
ANSWER_KINDS = {"weak status (stored)": "#ffb300", "broker busy": "#e53935", "other broker answer": "#f4511e",
                "timeout": "#8e24aa", "transport": "#546e7a", "no answer recorded": "#212121"}


def answer_kind(answer: str) -> str:
    if answer in WEAK:
        return "weak status (stored)"
    if answer.startswith("[") or answer == "code 2":
        return "broker busy"
    if answer == "timeout":
        return "timeout"
    if answer in TRANSPORT:
        return "transport"
    return "other broker answer"


def plot_errors(s: dict[str, Any]) -> str:
    """Every attempt that did not end in a plain SEND_OK, by what it was, coloured by kind; the part of
    each bar that was stored all the same is hatched."""
    items = [(a["answer"], a["attempts"], a["stored"], answer_kind(a["answer"]))
             for a in s.get("answers") or [] if a["answer"] != "SEND_OK"]
    if s["errors"]["by_outcome"].get("no_outcome"):
        items.append(("no answer (producer died)", s["errors"]["by_outcome"]["no_outcome"], 0, "no answer recorded"))
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.32 * max(1, len(items))))
    if items:
        items.sort(key=lambda x: (list(ANSWER_KINDS).index(x[3]), -x[1]))
        names = [f"{a} ({n})" for a, n, _, _ in items][::-1]
        ax.barh(names, [n for _, n, _, _ in items][::-1], color=[ANSWER_KINDS[k] for *_, k in items][::-1])
        ax.barh(names, [st for _, _, st, _ in items][::-1], color="none", hatch="///", edgecolor="white", lw=0)
        ax.set_xscale("log")
        from matplotlib.patches import Patch
        handles = [Patch(color=col, label=k) for k, col in ANSWER_KINDS.items() if any(x[3] == k for x in items)]
        ax.legend(handles=handles + [Patch(facecolor="#bbb", hatch="///", edgecolor="white", label="stored all the same")],
                  fontsize=7, loc="lower right")
    else:
        ax.text(0.5, 0.5, "every attempt was answered SEND_OK", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    ax.set_title("Sends that failed or were stored with a weak status, by what they were")
    return _svg(fig)


def plot_compare(sums: list[dict[str, Any]]) -> str:
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": [1, 1]})
    names = [f"{s['scenario']}\n{s['run_id'][-6:]}" for s in sums]
    bottom = [0] * len(sums)
    for c in CLASSES:
        vals = [s["counts"].get(c, 0) for s in sums]  # summaries of older runs lack newer classes
        ax.bar(names, vals, bottom=bottom, color=COLORS[c], label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("keys")
    ax.set_title("Keys by class, per run")
    ax.legend(fontsize=7, ncol=3)
    # the classes that matter, on their own scale (a handful of lost keys vanish next to the ok ones)
    width = 0.8 / 4
    for i, c in enumerate(("lost", "duplicated", "recovered", "indeterminate")):
        xs = [k + (i - 1.5) * width for k in range(len(sums))]
        vals = [s["counts"][c] for s in sums]
        bars = ax2.bar(xs, vals, width=width, color=COLORS[c], label=c)
        ax2.bar_label(bars, fontsize=7)
    ax2.set_xticks(range(len(sums)), names)
    ax2.set_title("Lost, duplicated, recovered, indeterminate")
    ax2.legend(fontsize=7)
    return _svg(fig)


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
                   f"{sc['seconds']} s): lost {sc['lost_from_store']} in no commit log, <b>{sc['lost_in_delivery']} "
                   f"stored but never delivered</b>; indeterminate: {sc['indeterminate_stored']} stored and never "
                   f"delivered, {sc['indeterminate_not_stored']} never stored.</p>")
        rows = [[e["key"], e["class"], e["verdict"].replace("_", " "),
                 "; ".join(f"{x['node']} queue {x['queue_id']} offset {x['queue_offset']} (commit log {x['commit_offset']})"
                           for x in e["stored_at"])] for e in sc["examples"] if e["stored_at"]]
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
    parts += _evidence(s)
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
    return "<section>" + "\n".join(parts) + "</section>"


def kills(s: dict[str, Any]) -> int:
    """Process-ending faults applied in the run (oom_kill, jvm_oom, kill)."""
    return sum(1 for e in s.get("events", []) if e.get("kind") == "fault" and e.get("outcome") == "ok"
               and e.get("params", {}).get("fault_kind") in ("oom_kill", "jvm_oom", "kill"))


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


def render(summaries: list[dict[str, Any]], title: str = "RocketMQ loss and duplication report") -> str:
    body = [f"<h1>{html.escape(title)}</h1>", "<section id=verdict><h2>Verdict</h2>"
            + "".join(f"<p class=verdict>{html.escape(v)}</p>" for v in [verdict(s) for s in summaries] + comparisons(summaries))
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
    style = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eceff1}"
             ".warn{color:#b71c1c}.plot svg{max-width:100%;height:auto}section{margin-top:2em}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_report(runs: list[str | Path], out: str | Path) -> Path:
    sums = [load_summary(r) for r in runs]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(sums))
    return out
