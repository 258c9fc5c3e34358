"""The upgrade question measured by hand (scripts/upgrade_figures.py, docs/findings.md): the same
scenario files on two RocketMQ versions (4.9.7 and 5.5.0), each repeated, and one table of ranges over
the repeats: acknowledged keys lost, keys duplicated, p99 send latency, busy answers (code 2).
A run whose loss could not be verified is counted apart, never in a range."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from pipeline.runs import as_run
from rmqchaos.machine import paths

#: the scenarios that validate on 4.9.7 as they are (no controller mode, no proxy, no 5.x key): the
#: OOM kill with and without transientStorePoolEnable, the power loss of each, answers cut on the way back
SCENARIOS = ("oom-tsp-on", "oom-tsp-off", "power-loss-tsp-on", "power-loss-tsp-off", "partition-producers")
VERSIONS = ("4.9.7", "5.5.0")
#: column -> how it is read from an analyzed run's summary.json
FIGURES = {
    "lost": lambda s: s["counts"]["lost"],
    "duplicated": lambda s: s["counts"]["duplicated"],
    "p99 send, ms": lambda s: (s["latency_ms"].get("send") or {}).get("p99"),
    "busy answers": lambda s: s["errors"]["by_code"].get("2", 0),
}


def overlays(scenarios: list[str], versions: list[str], out: Path) -> list[Path]:
    """One overlay per scenario and version in `out` (scenario name `<name>-v<version>`), versions
    interleaved so that neither runs only on a cooler host."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name in scenarios:
        for v in versions:
            f = out / f"{name}-v{v}.yaml"
            f.write_text(yaml.safe_dump({"extends": str(paths.REPO / "scenarios" / f"{name}.yaml"),
                                         "name": f"{name}-v{v.replace('.', '-')}",
                                         "cluster": {"rocketmq_version": v}}, sort_keys=False))
            files.append(f)
    return files


def _span(vals: list[Any]) -> str:
    got = [v for v in vals if v is not None]
    if not got:
        return "–"
    lo, hi = min(got), max(got)
    fmt = (lambda x: f"{x:,.0f}") if all(float(x).is_integer() for x in got) else (lambda x: f"{x:,.1f}")
    return fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"


def table(run_dirs: list[Path]) -> str:
    """A Markdown table: one row per scenario and version, each figure as min-max over its verified
    runs; `runs` says how many ran and how many of them could not verify their loss."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in run_dirs:
        r = as_run(d)
        s = r.scenario()
        summ = json.loads(r.summary_file.read_text()) if r.summary_file.exists() else None
        v = s.cluster.rocketmq_version
        base = s.name.removesuffix(f"-v{v.replace('.', '-')}")  # the name overlays() gave it
        rows.setdefault((base, v), []).append(summ or {})
    head = ["scenario", "RocketMQ", "runs", *FIGURES]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (name, v), summs in sorted(rows.items()):
        ok = [x for x in summs if x.get("complete")]
        runs = f"{len(summs)}" + (f" ({len(summs) - len(ok)} unverified)" if len(ok) < len(summs) else "")
        out.append("| " + " | ".join([name, v, runs, *(_span([read(x) for x in ok]) for read in FIGURES.values())])
                   + " |")
    return "\n".join(out)
