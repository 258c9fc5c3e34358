"""`rmqchaos report-upstream RUN...`: a Markdown report ready to file upstream, from analyzed runs
(one per version, or repeats), into docs/upstream-reports/. Sections, each filled or marked "not
measured": the title; the versions affected and not affected (each run's version and whether it
showed what its scenario shows); the minimal scenario and the command that runs it; the broker
settings that matter; what was measured, with the figures; log excerpts, each with its file; source
lines cited from the released sources jars (`--source`), never from decompiled classes.

What "showed" means for a run: its scenario's `expect:` reproduced, else its signature reached, else
an anomaly of analysis/judge/anomalies.py (`--check` names which)."""
from __future__ import annotations

import collections
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import yaml

from analysis.judge.anomalies import CHECKS, anomalies
from cluster.plan.rmqlog import log_dir
from pipeline.runs import as_run
from pipeline.workflows.repro import markdown
from rmqchaos.machine import paths
from rmqchaos.errors import UserError

OUT_DIR = paths.REPO / "docs" / "upstream-reports"
NOT_MEASURED = "_not measured_"
DEFAULT_GREP = r"Exception|ERROR|SyncStateSet|changeToMaster|change to master|removeConnection|shrink|expand"
EXCERPT_LINES = 8  # per log file
# matches that say nothing about the fault: JDK 17's reflection warnings, a request code a node does not serve
NOISE = re.compile(r"InaccessibleObjectException|request type \d+ not supported")
M2 = Path.home() / ".m2" / "repository" / "org" / "apache" / "rocketmq"
_SOURCE = re.compile(r"^(?P<path>[\w/$.-]+\.java):(?P<a>\d+)(?:-(?P<b>\d+))?@(?P<v>5\.\d+\.\d+)$")


def run_record(run_dir: str | Path, check: str | None = None) -> dict[str, Any]:
    """What the report reads of one run: {run_dir, scenario, version, showed (True/False/None), how
    (the words behind it), counts, verdict, settings, src}."""
    r = as_run(run_dir)
    if not r.summary_file.is_file():
        raise UserError(f"{r.path}: not analyzed (no analysis/summary.json)", f"run `rmqchaos analyze {r.path}` first")
    s = json.loads(r.summary_file.read_text())
    doc = yaml.safe_load((r.path / "scenario.yaml").read_text()) or {}
    versions = json.loads((r.path / "versions.json").read_text()) if (r.path / "versions.json").is_file() else {}
    if check is not None:
        if check not in CHECKS:
            raise UserError(f"--check {check}: no such anomaly check", f"checks: {', '.join(CHECKS)}")
        found = {a["check"]: a for a in anomalies(s)}
        showed: bool | None = check in found if s.get("complete") else None
        how = found[check]["seen"] if check in found else f"not {CHECKS[check]}"
    elif s.get("expect"):
        showed, how = s["expect"].get("reproduced"), s["expect"].get("words", "")
    elif s.get("signature"):
        showed, how = s["signature"].get("reached"), f"{s['signature'].get('shows')}: {s['signature'].get('words')}"
    else:
        found_ = anomalies(s)
        showed = bool(found_) if s.get("complete") else None
        how = "; ".join(a["seen"] for a in found_) or "no anomaly"
    src = r.path / "scenario.src.yaml"
    version = versions.get("rocketmq") or str((doc.get("cluster") or {}).get("rocketmq_version") or "")
    # a bisect's (or explore's) overlay names the scenario after its version: the report names the base
    scenario = re.sub(rf"-{re.escape(version.replace('.', '_'))}(-\d+)?$", "", str(s.get("scenario"))) if version \
        else s.get("scenario")
    return {"run_dir": str(r.path), "scenario": scenario, "version": version, "showed": showed, "how": how,
            "counts": s.get("counts") or {}, "verdict": (r.report_txt.read_text().splitlines() or [""])[0]
            if r.report_txt.is_file() else "", "settings": settings(doc),
            "src": (src.read_text() if src.is_file() else yaml.safe_dump(doc, sort_keys=False))
            .replace(f"{paths.REPO}/", ""),  # `extends:` as the rmqchaos repository names it
            "resolved": (r.path / "scenario.yaml").read_text().replace(f"{paths.REPO}/", ""),
            "complete": s.get("complete"), "mixed": versions.get("rocketmq_substituted") or {}}


def settings(doc: dict[str, Any]) -> dict[str, Any]:
    """The broker settings a maintainer asks about first: the cluster's shape and every broker config
    key the scenario sets (defaults left out: they are the version's)."""
    c = doc.get("cluster") or {}
    out: dict[str, Any] = {"rocketmq_version": c.get("rocketmq_version")}
    ctl = c.get("controllers")
    if ctl:
        out["controllers"] = {k: ctl.get(k) for k in ("mode", "count", "type") if ctl.get(k) is not None}
    out["brokers"] = [{k: b.get(k) for k in ("name", "replicas", "replication", "slave") if b.get(k) is not None}
                      for b in c.get("brokers") or []]
    out["broker_config"] = dict(((c.get("broker_defaults") or {}).get("config")) or {})
    for b in c.get("brokers") or []:
        if b.get("config"):
            out[f"config of {b['name']}"] = b["config"]
    return out


def excerpts(run_dir: str | Path, grep: str = DEFAULT_GREP, per_file: int = EXCERPT_LINES) -> list[dict[str, Any]]:
    """[{file (relative to the run), lines [(number, text)], head, skipped}]: of the lines matching `grep` in
    each node's RocketMQ logs and stdout (JDK-17 reflection warnings and unknown request codes left
    out), the first few and the last ones, `per_file` in all: the start shows the setup, the end what
    the faults led to (a run's first matches are all from before its faults). `head`: how many
    lines are the first ones; `skipped`: matches between the two, left out."""
    r = as_run(run_dir)
    try:
        pat = re.compile(grep)
    except re.error as e:
        raise UserError(f"--grep {grep!r} is not a regular expression: {e}", "e.g. --grep 'SyncStateSet|Exception'") from None
    head = max(1, per_file // 3)
    out = []
    cluster = r.path / "cluster"
    for node in sorted(p.name for p in cluster.iterdir() if p.is_dir()) if cluster.is_dir() else []:
        files = [cluster / node / "stdout.log", *sorted(log_dir(cluster, node).glob("*.log"))]
        for f in files:
            if not f.is_file():
                continue
            first: list[tuple[int, str]] = []
            last: collections.deque[tuple[int, str]] = collections.deque(maxlen=per_file - head)
            seen = 0
            with f.open(errors="replace") as fh:
                for i, line in enumerate(fh, 1):
                    if pat.search(line) and not NOISE.search(line):
                        seen += 1
                        (first if len(first) < head else last).append((i, line.rstrip()[:400]))
            if first:
                out.append({"file": str(f.relative_to(r.path)), "lines": first + list(last), "head": len(first),
                            "skipped": seen - len(first) - len(last)})
    return out


def source_lines(spec: str) -> dict[str, Any]:
    """`path/To/File.java:FROM-TO@VERSION` -> {spec, jar, path, lines [(number, text)]}, read from the
    released sources jar of that version in the local Maven repository (`mvn dependency:get
    -Dartifact=org.apache.rocketmq:rocketmq-store:5.5.0:jar:sources` fetches one)."""
    m = _SOURCE.match(spec.strip())
    if not m:
        raise UserError(f"--source {spec!r}: expected PATH.java:FROM-TO@VERSION",
                        "e.g. --source org/apache/rocketmq/common/utils/CheckpointFile.java:98-154@5.5.0")
    v, path = m.group("v"), m.group("path")
    a = int(m.group("a"))
    b = int(m.group("b") or a)
    if not 1 <= a <= b:
        raise UserError(f"--source {spec!r}: lines FROM-TO must have 1 <= FROM <= TO", "e.g. ...java:98-154@5.5.0")
    jars = sorted(M2.glob(f"rocketmq-*/{v}/rocketmq-*-{v}-sources.jar"))
    for jar in jars:
        with zipfile.ZipFile(jar) as z:
            if path in z.namelist():
                text = z.read(path).decode("utf-8", errors="replace").splitlines()
                if a > len(text):
                    raise UserError(f"--source {spec}: {path} has {len(text)} lines in {jar.name}", "cite lines it has")
                return {"spec": spec, "jar": jar.name, "path": path, "version": v,
                        "lines": [(i, text[i - 1]) for i in range(a, min(b, len(text)) + 1)]}
    raise UserError(f"--source {spec}: {path} is in none of the {len(jars)} RocketMQ {v} sources jar(s) under {M2}",
                    f"fetch the module's: mvn dependency:get -Dartifact=org.apache.rocketmq:<module>:{v}:jar:sources")


def render(title: str, recs: list[dict[str, Any]], logs: list[dict[str, Any]], sources: list[dict[str, Any]],
           notes: str | None = None, command: str | None = None, repro: str | None = None) -> str:
    """The report's Markdown; a section with nothing to show says so. `repro`: the section "Reproduction without
    rmqchaos" (pipeline/workflows/repro.py markdown), after the versions."""
    affected = sorted({x["version"] for x in recs if x["showed"] is True})
    clean = sorted({x["version"] for x in recs if x["showed"] is False} - set(affected))
    unknown = sorted({x["version"] for x in recs if x["showed"] is None} - set(affected) - set(clean))
    first = next((x for x in recs if x["showed"] is True), recs[0])
    md = [f"# {title}", ""]
    md += ["## Versions", "", f"- **Affected:** {', '.join(affected) or 'none measured'}",
           f"- **Not affected:** {', '.join(clean) or NOT_MEASURED}"]
    mixed = {x["version"]: x["mixed"] for x in recs if x.get("mixed")}
    md += [f"- {v} ran mixed (Maven Central lacks part of it): " + ", ".join(f"{a} {d}" for a, d in sorted(m.items()))
           for v, m in mixed.items()]
    if unknown:
        md.append(f"- **Could not tell** (the run did not finish): {', '.join(unknown)}")
    if repro:
        md += ["", repro.rstrip()]
    md += ["", "## The scenario", "",
           f"Run with rmqchaos on one machine (real JVMs on loopback addresses). The scenario of the run on "
           f"{first['version']}, as written (its `extends:` chain is in the rmqchaos repository):", "", "```yaml",
           first["src"].rstrip(), "```", "",
           "<details><summary>Every setting resolved, as the run used it: save as <code>scenario.yaml</code> and "
           "run <code>" + (command or "rmqchaos run scenario.yaml") + "</code></summary>", "", "```yaml",
           first["resolved"].rstrip(), "```", "", "</details>", ""]
    md += ["## Broker settings that matter", "", "```yaml",
           yaml.safe_dump(first["settings"], sort_keys=False).rstrip() or "{}", "```", ""]
    md += ["## What was measured", "", "| version | run | showed | what | acked | lost | duplicated |",
           "|---|---|---|---|---|---|---|"]
    for x in recs:
        c = x["counts"]
        md.append(f"| {x['version']} | `{Path(x['run_dir']).name}` | "
                  f"{ {True: 'yes', False: 'no', None: 'could not tell'}[x['showed']] } | {x['how']} | "
                  f"{c.get('acked', '-')} | {c.get('lost', '-')} | {c.get('duplicated', '-')} |")
    md += ["", "Each run's verdict:", ""] + [f"- {x['version']}: {x['verdict']}" for x in recs if x["verdict"]] + [""]
    md += ["## Logs", ""]
    if not logs:
        md += [NOT_MEASURED, ""]
    for e in logs:
        head = e["head"] if e.get("skipped") else len(e["lines"])
        md += [f"`{e['file']}`:", "", "```"] + [f"{n}: {t}" for n, t in e["lines"][:head]] + \
              ([f"... ({e['skipped']:,} more matching lines)"] if e.get("skipped") else []) + \
              [f"{n}: {t}" for n, t in e["lines"][head:]] + ["```", ""]
    md += ["## Source", ""]
    if not sources:
        md += [NOT_MEASURED + " (pass --source PATH.java:FROM-TO@VERSION)", ""]
    for s in sources:
        md += [f"`{s['path']}` lines {s['lines'][0][0]}-{s['lines'][-1][0]} of {s['jar']}:", "", "```java"] + \
              [f"{n:>4}  {t}" for n, t in s["lines"]] + ["```", ""]
    md += ["## Analysis and a proposed fix", "", notes.strip() if notes else NOT_MEASURED, ""]
    return "\n".join(md)


def report_upstream(runs: list[str], title: str | None = None, check: str | None = None, grep: str = DEFAULT_GREP,
                    sources: list[str] | None = None, notes_file: str | None = None,
                    out: str | Path | None = None, repro_dir: str | None = None) -> dict[str, Any]:
    """Write the report (default docs/upstream-reports/<scenario>.md) and return {report, affected,
    not_affected}. `repro_dir`: a `rmqchaos unit-repro` run whose record becomes the section "Reproduction without
    rmqchaos"."""
    if not runs:
        raise UserError("report-upstream needs at least one run directory", "pass the runs of each version")
    recs = [run_record(r, check) for r in runs]
    recs.sort(key=lambda x: tuple(int(p) for p in x["version"].split(".")) if re.match(r"^\d+(\.\d+)*$", x["version"])
              else (0,))
    showing = [x for x in recs if x["showed"] is True]
    logs = excerpts((showing or recs)[0]["run_dir"], grep)
    srcs = [source_lines(s) for s in sources or []]
    try:
        notes = Path(notes_file).read_text() if notes_file else None
    except OSError as e:
        raise UserError(f"--notes {notes_file}: cannot read it: {e.strerror}", "pass a Markdown file") from None
    name = title or f"{recs[0]['scenario']}: " + (showing[0]["how"] if showing else "not shown on any version measured")
    target = Path(out) if out else OUT_DIR / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', str(recs[0]['scenario']))}.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(name, recs, logs, srcs, notes, repro=markdown(repro_dir) if repro_dir else None))
    affected = {x["version"] for x in showing}
    return {"report": str(target), "affected": sorted(affected),
            "not_affected": sorted({x["version"] for x in recs if x["showed"] is False} - affected)}
