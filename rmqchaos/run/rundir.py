"""The run directory: all state of one run, so every stage can run on its own against it.

Layout (in full: docs/ledgers.md, "The run directory"):
  scenario.yaml        resolved scenario (every default filled in)
  scenario.src.yaml    the file as the user wrote it
  patches/             cluster.patches as the run applied them (scenario.yaml names these copies)
  state.json           run id, owner lease, cluster state, stage statuses (rewritten atomically)
  processes.jsonl      append-only: every process and cgroup started (what `down` reaps)
  timeline.jsonl       append-only: stage and cluster events with start/end ms
  versions.json        RocketMQ, Java, Python versions, the platform's git commit
  cluster/<node>/      rendered config, store/, logs/ (RocketMQ's own), stdout.log
  checks/              outputs of checks; report.json / report.txt
  metrics/disk.jsonl   the store's disk, once a second during the load (rmqchaos/machine/diskstats.py)
  noise/<occurrence>/  disk-noise faults: their configs, logs and results (their data is deleted)
A run with live processes is registered in $RMQCHAOS_HOME/active/<run id> so that `down --all`
and the next `up` can find it even after the platform itself was killed.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from rmqchaos.machine import paths
from rmqchaos.ledger.schema import LEDGER_DIR
from rmqchaos.machine.procs import ProcessLog, alive, now_ms, starttime
from rmqchaos.errors import UserError
from rmqchaos.spec import Scenario, dump_scenario, parse_scenario


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()

    # ------------------------------------------------------------ creation / loading
    @classmethod
    def create(cls, path: str | Path, scenario: Scenario, source_text: str, mode: str) -> "RunDir":
        """mode 'owned': processes end with the CLI that started them (`run`);
        'detached': they outlive it (`cluster up`, `stage up`) until `down`."""
        rd = cls(path)
        if rd.path.exists() and not rd.path.is_dir():
            raise UserError(f"{rd.path} exists and is not a directory", "choose a new --out directory")
        if (rd.path / "state.json").exists():
            raise UserError(f"{rd.path} already holds a run", "choose a new --out directory or remove it")
        try:
            rd.path.mkdir(parents=True, exist_ok=True)
            probe = rd.path / ".rmqchaos-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"cannot create the run directory {rd.path}: {e.strerror}",
                            "choose a writable --out directory") from None
        (rd.path / "scenario.src.yaml").write_text(source_text)
        if scenario.cluster.patches:  # the run keeps its own copies: its record names exactly what ran
            kept = rd._keep_patches(scenario.cluster.patch_files())
            scenario = scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"patches": kept})})
        _atomic_write(rd.path / "scenario.yaml", dump_scenario(scenario))
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{scenario.name}-{secrets.token_hex(3)}"
        rd._write_state({"run_id": run_id, "created_ms": now_ms(), "mode": mode, "owner": _me(),
                         "cluster": "new", "stages": {}})
        return rd

    def _keep_patches(self, files: list[Path]) -> list[str]:
        """patches/<name> (patches/<i>/<name> for a name given twice): paths relative to scenario.yaml,
        which is how the spec reads a relative patch path, so the run directory can move."""
        names = [f.name for f in files]
        kept = []
        for i, f in enumerate(files):
            rel = Path("patches") / (f"{i + 1}/{f.name}" if names.count(f.name) > 1 else f.name)
            (self.path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, self.path / rel)
            kept.append(str(rel))
        return kept

    @classmethod
    def open(cls, path: str | Path) -> "RunDir":
        rd = cls(path)
        if not (rd.path / "state.json").is_file():
            raise UserError(f"{rd.path} is not a run directory (no state.json)",
                            "pass the --out directory of `rmqchaos run` or `rmqchaos stage up`")
        return rd

    def scenario(self) -> Scenario:
        f = self.path / "scenario.yaml"
        return parse_scenario(f.read_text(), str(f))

    # ------------------------------------------------------------ named paths (the layout above)
    @property
    def ledgers_dir(self) -> Path:
        return self.path / LEDGER_DIR

    @property
    def load_dir(self) -> Path:
        return self.path / "load"

    @property
    def load_started_file(self) -> Path:
        """Written by the load process when it starts sending: the faults' clock starts there."""
        return self.load_dir / "started"

    @property
    def disk_metrics_file(self) -> Path:
        return self.path / "metrics" / "disk.jsonl"

    @property
    def analysis_dir(self) -> Path:
        return self.path / "analysis"

    @property
    def summary_file(self) -> Path:
        return self.analysis_dir / "summary.json"

    @property
    def probes_file(self) -> Path:
        """The `expect:` block's probes of the live cluster, taken before `down` (cluster/watch/end_probes.py)."""
        return self.path / "expect" / "probes.json"

    @property
    def checks_dir(self) -> Path:
        return self.path / "checks"

    @property
    def consumers_dir(self) -> Path:
        return self.path / "consumers"

    @property
    def report_html(self) -> Path:
        return self.path / "report.html"

    @property
    def report_txt(self) -> Path:
        return self.path / "report.txt"

    @property
    def report_json(self) -> Path:
        return self.path / "report.json"

    def node_dir(self, node: str) -> Path:
        return self.path / "cluster" / node

    # ------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        f = self.path / "state.json"
        try:
            st = json.loads(f.read_text())
        except ValueError as e:
            raise UserError(f"{f} is corrupt ({e.msg} at byte {e.pos})",
                            "restore it or start a new run; its ledgers stay where they are") from None
        if not isinstance(st, dict) or "run_id" not in st:
            raise UserError(f"{f} is not a run state (no run_id)", "restore it or start a new run")
        return st

    def _write_state(self, st: dict[str, Any]) -> None:
        _atomic_write(self.path / "state.json", json.dumps(st, indent=2) + "\n")

    def _modify_state(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """The one read-modify-write of state.json, under the lock."""
        with self.state_lock():
            st = self.state()
            change(st)
            self._write_state(st)
        return st

    @contextmanager
    def state_lock(self) -> Iterator[None]:
        """Exclusive across threads and processes (flock on state.lock): read-modify-write of
        state.json by a stage and, say, a fault thread or a second CLI never loses an update."""
        fd = os.open(self.path / "state.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def update_state(self, **kv: Any) -> dict[str, Any]:
        return self._modify_state(lambda st: st.update(kv))

    def stages(self) -> dict[str, dict[str, Any]]:
        """state.json's stages, a `running` one whose process is gone shown as `killed` (its process
        was SIGKILLed or the machine went down: it never recorded an end)."""
        out = {}
        for name, rec in (self.state().get("stages") or {}).items():
            rec = dict(rec)
            if rec.get("status") == "running" and rec.get("pid") and not alive(int(rec["pid"]), rec.get("starttime")):
                rec["status"] = "killed"
                rec.setdefault("error", "its process was killed before it recorded an end")
            out[name] = rec
        return out

    def set_stage(self, name: str, rec: dict[str, Any]) -> None:
        """state.json's `stages[name]`, under the lock."""
        def put(st: dict[str, Any]) -> None:
            st.setdefault("stages", {})[name] = rec
        self._modify_state(put)

    def take_ownership(self, mode: str) -> None:
        self.update_state(owner=_me(), mode=mode)

    @property
    def run_id(self) -> str:
        return str(self.state()["run_id"])

    @property
    def processes(self) -> ProcessLog:
        return ProcessLog(self.path / "processes.jsonl")

    def write_versions(self, rocketmq: str, java: str, substituted: dict[str, str] | None = None,
                       patches: list[dict[str, Any]] | None = None) -> None:
        """rocketmq: the version as the run names it (with patches: `5.5.0+fix.patch(<hash12>)`, and
        `rocketmq_patches` lists each patch's name, sha256 and the files it changes)."""
        from importlib.metadata import PackageNotFoundError, version
        def v(pkg: str) -> str | None:
            try:
                return version(pkg)
            except PackageNotFoundError:
                return None
        _atomic_write(self.path / "versions.json", json.dumps(
            {"rocketmq": rocketmq, **({"rocketmq_substituted": substituted} if substituted else {}),
             **({"rocketmq_patches": patches} if patches else {}),
             "java": java, "python": sys.version.split()[0],
             **{p: v(p) for p in ("locust", "pyspark", "apache-airflow", "gevent")},
             "platform_commit": paths.platform_commit()}, indent=2) + "\n")

    def versions(self) -> dict[str, Any]:
        f = self.path / "versions.json"
        return json.loads(f.read_text()) if f.exists() else {}

    def broker_configs(self) -> dict[str, dict[str, str]]:
        """Every broker node's broker.conf keys as rendered into cluster/<node>/, each with the value
        the broker reported running with (effective.conf, read back after `up`) where there is one."""
        out = {}
        for f in sorted((self.path / "cluster").glob("*/broker.conf")):
            kv = _props(f)
            eff = f.with_name("effective.conf")
            if eff.exists():
                e = _props(eff)
                kv = {k: e.get(k, v) for k, v in kv.items()}
            out[f.parent.name] = kv
        return out

    # ------------------------------------------------------------ timeline
    def event(self, kind: str, target: str, start_ms: int, end_ms: int | None, outcome: str,
              **params: Any) -> None:
        rec = {"kind": kind, "target": target, "params": params, "start_ms": start_ms, "end_ms": end_ms,
               "outcome": outcome}
        with open(self.path / "timeline.jsonl", "a") as f:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def timeline(self) -> list[dict[str, Any]]:
        f = self.path / "timeline.jsonl"
        if not f.exists():
            return []
        return [json.loads(x) for x in f.read_text().splitlines() if x.strip()]

    # ------------------------------------------------------------ registry of live runs
    def register(self) -> None:
        reg = registry_dir()
        reg.mkdir(parents=True, exist_ok=True)
        _atomic_write(reg / self.run_id, str(self.path) + "\n")

    def is_registered(self) -> bool:
        return (registry_dir() / self.run_id).is_file()

    def unregister(self) -> None:
        (registry_dir() / self.run_id).unlink(missing_ok=True)

    def is_orphan(self) -> bool:
        """Nobody will bring this run down: its owner died while owning it, or died mid-`up`."""
        st = self.state()
        o = st.get("owner") or {}
        owner_alive = alive(int(o.get("pid", 0)), o.get("starttime")) if o.get("pid") else False
        if owner_alive:
            return False
        return st.get("mode") == "owned" or st.get("cluster") not in ("ready",)


def _props(f: Path) -> dict[str, str]:
    kv = {}
    for line in f.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, _, val = line.partition("=")
            kv[k.strip()] = val.strip()
    return kv


def registry_dir() -> Path:
    """$RMQCHAOS_HOME/active/<run id>: one file per run that may have live processes, holding its path."""
    return paths.state_home() / "active"


def registered_runs() -> list[RunDir]:
    reg = registry_dir()
    out = []
    if reg.is_dir():
        for entry in sorted(reg.iterdir()):
            target = Path(entry.read_text().strip())
            if (target / "state.json").is_file():
                out.append(RunDir(target))
    return out


def lost_run_ids() -> list[str]:
    """Registered runs whose run directory is gone: only their cgroups remain to find their processes."""
    reg = registry_dir()
    if not reg.is_dir():
        return []
    return [e.name for e in sorted(reg.iterdir()) if not (Path(e.read_text().strip()) / "state.json").is_file()]


def _me() -> dict[str, Any]:
    return {"pid": os.getpid(), "starttime": starttime(os.getpid())}
