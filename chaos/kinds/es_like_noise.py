"""es_like_noise: an Elasticsearch-like disk profile with fio, `instances` of them (the incident's
host ran three ES nodes). Each instance is one fio process with three jobs:
  translog  small sequential appends, fdatasync after each (index.translog.durability: request);
  merge     segment merges: large sequential O_DIRECT writes, deep queue, optionally rate-capped;
  refresh   periodic bursts: `burst_mb` of buffered writes then an fsync, every `burst_every`.
Files are bounded in size (fio wraps around within `file_mb`), live under the run directory and
are deleted at stop; fio's own JSON result is the evidence."""
from __future__ import annotations

import json
import shlex
import signal
from typing import Any

from pydantic import Field

from chaos.noise import NoiseKind, NoiseParams, require
from chaos.protocol import register
from rmqchaos.spec import Duration


class EsLikeParams(NoiseParams):
    instances: int = Field(3, ge=1, le=16)
    translog_kb: int = Field(4, ge=1, le=1024)  # one translog append
    merge_mb_s: int | None = Field(None, ge=1)  # None: as fast as the disk takes it
    merge_iodepth: int = Field(16, ge=1, le=256)
    burst_mb: int = Field(32, ge=1, le=1024)
    burst_every: Duration = 2.0
    file_mb: int = Field(256, ge=16, le=8192)  # per job and instance


def job_file(p: EsLikeParams, directory: str, runtime_s: int) -> str:
    rate = f"rate={p.merge_mb_s}m\n" if p.merge_mb_s else ""
    blocks = max(1, p.burst_mb * 1024 // 128)
    return (f"[global]\ndirectory={directory}\ntime_based=1\nruntime={runtime_s}\nsize={p.file_mb}m\n"
            "create_serialize=0\nrandrepeat=0\n\n"
            f"[translog]\nrw=write\nbs={p.translog_kb}k\nioengine=psync\nfdatasync=1\n\n"
            f"[merge]\nrw=write\nbs=1m\ndirect=1\nioengine=libaio\niodepth={p.merge_iodepth}\n{rate}\n"
            f"[refresh]\nrw=write\nbs=128k\nioengine=psync\nthinktime={int(p.burst_every * 1e6)}\n"
            f"thinktime_blocks={blocks}\nfsync={blocks}\n")


@register
class EsLikeNoise(NoiseKind):
    name = "es_like_noise"
    Params = EsLikeParams
    programs = ("fio",)
    install_hint = "apt-get install fio (make setup installs it)"

    @classmethod
    def compose_services(cls, params: Any, image: str, volume: str, root: str,
                         bound_s: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        services, files = {}, {}
        for i in range(params.instances):
            d, job = f"{root}/noise/es-{i}", f"docker/es-noise-{i}.fio"
            files[job] = job_file(params, d, bound_s)
            services[f"es-noise-{i}"] = cls.compose_service(image, volume, root, [
                "sh", "-c", f"mkdir -p {d} && exec {shlex.join(_fio(d, '/etc/rmqchaos/es.fio'))}"],
                volumes=[f"./{job}:/etc/rmqchaos/es.fio:ro"])
        return services, files

    def begin(self) -> None:
        self.procs: dict[int, Any] = {}
        for i in range(self.params.instances):  # type: ignore[attr-defined]
            d = self.dir / f"es-{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "es.fio").write_text(job_file(self.params, str(d), int(self.bound_s())))  # type: ignore[arg-type]
            self.procs[i] = self.spawn(f"fio-{i}", _fio(str(d), str(d / "es.fio")), d / "fio.log")
        for i, proc in self.procs.items():
            require(proc.running(), f"es_like_noise: fio instance {i} exited at once",
                    f"see {self.dir / f'es-{i}' / 'fio.log'}")

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, proc in getattr(self, "procs", {}).items():
            d = self.dir / f"es-{i}"
            how = proc.end(signal.SIGINT, 30)  # SIGINT: fio ends its jobs, writes results
            out[str(i)] = {"end": how, "jobs": _jobs(d / "fio.json")}
            for f in d.iterdir():  # noise data, not evidence
                if f.suffix not in (".fio", ".json", ".log"):
                    f.unlink()
        total = sum(j["write_mb"] for r in out.values() for j in (r["jobs"] or {}).values())
        return {"instances": len(out), "write_mb": round(total, 1), "fio": out}


def _fio(directory: str, job_file: str) -> list[str]:
    """One instance: its jobs from `job_file`, fio's JSON result in `directory` (the evidence)."""
    return ["fio", "--output-format=json", f"--output={directory}/fio.json", job_file]


def _jobs(f: Any) -> dict[str, Any] | None:
    """Per job: MB written, write IOPS, fsyncs and their p99 latency (fio's JSON, version 3)."""
    try:
        text = f.read_text()
        data = json.loads(text[text.index("{"):])  # fio may print notes before the JSON
    except (OSError, ValueError):
        return None
    out = {}
    for j in data.get("jobs", []):
        w, sync = j["write"], j.get("sync", {})
        lat = sync.get("lat_ns") or {}
        pct = lat.get("percentile") or {}
        out[j["jobname"]] = {"write_mb": round(w["io_bytes"] / 1e6, 1), "write_iops": round(w["iops"], 1),
                             "fsyncs": lat.get("N", 0),  # fio 3.33 leaves sync.total_ios at 0
                             "fsync_p99_ms": round(pct.get("99.000000", 0) / 1e6, 2) if pct else None}
    return out
