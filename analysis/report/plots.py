"""The report's plots (matplotlib, inline SVG): throughput, latency, lost/duplicated over time, the
shared host's time axis, the cluster monitor, the answers, and several runs side by side."""
from __future__ import annotations

import io
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis.evidence.broker_log import slow_share  # noqa: E402
from analysis.evidence.findings import time_origin  # noqa: E402
from analysis.evidence.links import SLOW_MS, STATES, state  # noqa: E402
from analysis.ledgers.rules import CLASSES  # noqa: E402

COLORS = {"ok": "#4caf50", "lost": "#d32f2f", "duplicated": "#ff9800", "recovered": "#2196f3",
          "failed": "#9e9e9e", "indeterminate": "#9c27b0", "undelivered_at_stop": "#ffeb3b",
          "not_committed": "#bdbdbd"}
BUSY_COLORS = ("#c62828", "#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")
SHADE = {"fault": "#ffcdd2", "load": "#e3f2fd", "drain": "#f1f8e9"}


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


LINK_COLORS = dict(zip(STATES, ("#4caf50", "#ff9800", "#d32f2f")))


def plot_links(s: dict[str, Any]) -> str:
    """Each link a network fault names, one row on the run's time axis, each monitor sample's second
    coloured by what its probe got (summary `links`, analysis/evidence/links.py), the fault windows shaded."""
    from matplotlib.patches import Patch
    ls = s.get("links") or {"t_ms": [], "links": {}}
    t0 = time_origin(s)
    ts = [t / 1000 - t0 for t in ls["t_ms"]]
    keys = list(ls["links"])
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.35 * max(1, len(keys))))
    for row, k in enumerate(keys):
        spans: dict[str, list[tuple[float, float]]] = {st: [] for st in STATES}
        for i, r in enumerate(ls["links"][k]["rtt_ms"]):
            end = ts[i + 1] if i + 1 < len(ts) else ts[i] + 1
            spans[state(r)].append((ts[i], end - ts[i]))
        for st, xs in spans.items():
            ax.broken_barh(xs, (row - 0.35, 0.7), color=LINK_COLORS[st], lw=0, zorder=2)
    med = [ls["links"][k]["median_ms"] for k in keys]
    ax.set_yticks(range(len(keys)), [f"{k} (median {m} ms)" if m is not None else k for k, m in zip(keys, med)],
                  fontsize=8)
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_xlabel("seconds since first attempt")
    ax.set_title("Links (probed by the monitor)")
    _shade(ax, s, t0)
    ax.legend(handles=[Patch(color=LINK_COLORS["answered"], label="answered"),
                       Patch(color=LINK_COLORS["slow"], label=f"slow (> {SLOW_MS:.0f} ms)"),
                       Patch(color=LINK_COLORS["no answer"], label="no answer (0.5 s)")],
              fontsize=7, loc="upper right")
    return _svg(fig)


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
