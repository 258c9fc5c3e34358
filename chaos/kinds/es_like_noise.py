"""es_like_noise: an Elasticsearch-like disk profile with fio, `instances` of them (the incident's
host ran three ES nodes). Each instance is one fio process with three jobs, each at a rate:
  translog  small sequential appends, fdatasync after each (index.translog.durability: request),
            `translog_iops` of them a second;
  merge     segment merges: large sequential O_DIRECT writes, deep queue, `merge_mb_s` MB/s;
  refresh   periodic bursts: `burst_mb` of buffered writes then an fsync, every `burst_every`.
Within a byte budget: `budget_mb` per occurrence, split across instances and jobs, which fio itself
enforces (`io_size` per job: the job ends once it has written its share). Files are bounded in size
(fio wraps around within `file_mb`), live under the run directory and are deleted at stop; fio's
own JSON result is the evidence, with what each job achieved against its rate (`intent`).
MB here is 10^6 bytes throughout (fio is given bytes, not its binary `m`)."""
from __future__ import annotations

import json
import shlex
import signal
from typing import Any

from pydantic import Field, model_validator

from chaos.intent import intent, measure
from chaos.noise import NoiseKind, NoiseParams, require
from chaos.protocol import register
from rmqchaos.spec import Duration

MB = 1_000_000
JOBS = ("translog", "merge", "refresh")
REFRESH_BS = 128 * 1024
MERGE_BS = 1 << 20


class EsLikeParams(NoiseParams):
    instances: int = Field(3, ge=1, le=16)
    translog_kb: int = Field(4, ge=1, le=1024)  # one translog append (KiB)
    # Each append fsynced, one per index/bulk request (durability: request). Uncapped, fio did ~2,900 a
    # second on this quiet disk; 200 is a busy node's request rate (and the Redis noise's rate).
    translog_iops: int = Field(200, ge=1, le=100_000)
    # Merges capped by default at a rate an Elasticsearch host sustains: Elasticsearch throttled merges
    # to 20 MB/s per node by default before 2.0 (`indices.store.throttle.max_bytes_per_sec: 20mb`) and
    # auto-throttles them since (elastic/elasticsearch PR #9243). Uncapped, one shared-host run's merges
    # wrote ~72 GB in 46 s (~1.6 GB/s, host-cached). 0: uncapped, as fast as the disk takes it.
    merge_mb_s: int = Field(20, ge=0)
    merge_iodepth: int = Field(16, ge=1, le=256)
    burst_mb: int = Field(32, ge=1, le=1024)  # MiB of one refresh burst (128 KiB writes)
    burst_every: Duration = 2.0
    file_mb: int = Field(256, ge=16, le=8192)  # per job and instance
    # Bytes all instances may write in one occurrence. At the defaults the 3 instances ask ~113 MB/s
    # (merge 20 + refresh 16.8 + translog 0.8 each), so 6,000 MB is 53 s at full rate: the 35 s of
    # noise in scenarios/shared-host.yaml with room, ~12x less than the uncapped run's 72 GB, and it
    # stops a longer or uncapped noise at 6 GB instead of terabytes a night.
    budget_mb: int = Field(6000, ge=1)

    @model_validator(mode="after")
    def _budget_holds_a_write_of_every_job(self) -> "EsLikeParams":
        need = self.instances * sum(shares(self).values())
        if need > self.budget_mb * MB:
            raise ValueError(f"budget_mb {self.budget_mb} is too small for {self.instances} instance(s): each job's "
                             f"share must hold one write, and those shares come to {-(-need // MB)} MB")
        return self


def rates(p: EsLikeParams) -> dict[str, tuple[str, float, float]]:
    """Per job: (what its rate counts, the rate asked, the MB/s that writes); no entry for an uncapped merge."""
    blocks = _burst_blocks(p)
    out = {"translog": ("fsyncs/s", float(p.translog_iops), p.translog_iops * p.translog_kb * 1024 / MB),
           "refresh": ("MB/s", blocks * REFRESH_BS / MB / p.burst_every, blocks * REFRESH_BS / MB / p.burst_every)}
    if p.merge_mb_s:
        out["merge"] = ("MB/s", float(p.merge_mb_s), float(p.merge_mb_s))
    return out


def shares(p: EsLikeParams) -> dict[str, int]:
    """Per job of one instance, the bytes it may write (fio's io_size): the instance's equal part of
    `budget_mb`, split in proportion to the jobs' asked MB/s, so at their rates they all spend their
    shares at the same moment. An uncapped merge asks no rate: it gets half the instance's part, the
    other jobs split the other half. Each share is whole blocks of its job, at least one."""
    per_instance = p.budget_mb * MB / p.instances
    r = {j: v[2] for j, v in rates(p).items()}
    capped = per_instance if p.merge_mb_s else per_instance / 2
    raw = {j: capped * mb_s / sum(r.values()) for j, mb_s in r.items()}
    if not p.merge_mb_s:
        raw["merge"] = per_instance - capped
    bs = {"translog": p.translog_kb * 1024, "merge": MERGE_BS, "refresh": REFRESH_BS}
    return {j: max(1, int(raw[j] // bs[j])) * bs[j] for j in JOBS}


def _burst_blocks(p: EsLikeParams) -> int:
    return max(1, p.burst_mb * 1024 * 1024 // REFRESH_BS)


def job_file(p: EsLikeParams, directory: str, runtime_s: int) -> str:
    """One instance's fio jobs. No time_based: a job ends at `runtime_s` or once it has written its
    io_size (its share of the budget), whichever comes first; io_size above size wraps within the file."""
    size, blocks = shares(p), _burst_blocks(p)
    rate = f"rate={p.merge_mb_s * MB}\n" if p.merge_mb_s else ""
    return (f"[global]\ndirectory={directory}\nruntime={runtime_s}\nsize={p.file_mb}m\n"
            "create_serialize=0\nrandrepeat=0\n\n"
            f"[translog]\nrw=write\nbs={p.translog_kb}k\nioengine=psync\nfdatasync=1\nrate_iops={p.translog_iops}\n"
            f"io_size={size['translog']}\n\n"
            f"[merge]\nrw=write\nbs=1m\ndirect=1\nioengine=libaio\niodepth={p.merge_iodepth}\n{rate}"
            f"io_size={size['merge']}\n\n"
            f"[refresh]\nrw=write\nbs=128k\nioengine=psync\nthinktime={int(p.burst_every * 1e6)}\n"
            f"thinktime_blocks={blocks}\nfsync={blocks}\nio_size={size['refresh']}\n")


def es_intent(p: EsLikeParams, fio: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per instance and job with a rate: MB/s (merge, refresh) or fsyncs/s (translog) over the job's own
    runtime (refresh: at least its bursts' periods, as the first burst comes at once), against its rate. A job that spent its byte budget ended early: its rate over the time it
    ran counts, and the words say the budget ended it. An instance without fio's result counts 0."""
    measures, spent = [], []
    for i, inst in sorted(fio.items(), key=lambda x: int(x[0])):
        jobs = inst.get("jobs") or {}
        for job, (what, asked, _) in rates(p).items():
            j = jobs.get(job) or {}
            secs = j.get("seconds") or 0
            if job == "refresh":  # a burst is due once a period: bursts written early (budget, stop) are not faster
                secs = max(secs, j.get("write_mb", 0) * MB / (_burst_blocks(p) * REFRESH_BS) * p.burst_every)
            done = (j.get("fsyncs", 0) if what == "fsyncs/s" else j.get("write_mb", 0)) / secs if secs else 0.0
            measures.append(measure(what, f"es-{i} {job}", asked, done))
            if j.get("budget_spent"):
                spent.append((f"es-{i} {job}", secs))
        if p.merge_mb_s == 0 and (jobs.get("merge") or {}).get("budget_spent"):
            spent.append((f"es-{i} merge", jobs["merge"].get("seconds") or 0))
    note = ""
    if spent:
        names = ", ".join(f"{w} after {s:.1f} s" for w, s in spent[:3]) + (f" and {len(spent) - 3} more"
                                                                         if len(spent) > 3 else "")
        note = f"its byte budget ({p.budget_mb} MB) ended {names}"
    return intent(measures, "es-like noise", of="jobs", note=note)


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
        share = shares(self.params)  # type: ignore[arg-type]
        for i, proc in getattr(self, "procs", {}).items():
            d = self.dir / f"es-{i}"
            how = proc.end(signal.SIGINT, 30)  # SIGINT: fio ends its jobs, writes results
            out[str(i)] = {"end": how, "jobs": _jobs(d / "fio.json", share)}
            for f in d.iterdir():  # noise data, not evidence
                if f.suffix not in (".fio", ".json", ".log"):
                    f.unlink()
        total = sum(j["write_mb"] for r in out.values() for j in (r["jobs"] or {}).values())
        ev: dict[str, Any] = {"instances": len(out), "write_mb": round(total, 1),
                              "budget_mb": self.params.budget_mb, "fio": out}  # type: ignore[attr-defined]
        if out:
            ev["intent"] = es_intent(self.params, out)  # type: ignore[arg-type]
        return ev


def _fio(directory: str, job_file: str) -> list[str]:
    """One instance: its jobs from `job_file`, fio's JSON result in `directory` (the evidence)."""
    return ["fio", "--output-format=json", f"--output={directory}/fio.json", job_file]


def _jobs(f: Any, share: dict[str, int] | None = None) -> dict[str, Any] | None:
    """Per job: MB written, write IOPS, fsyncs and their p99 latency, its runtime (fio's JSON, version
    3); with `share` (bytes per job), its byte budget and whether it spent it (and so ended early)."""
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
                             "fsync_p99_ms": round(pct.get("99.000000", 0) / 1e6, 2) if pct else None,
                             "seconds": round(j.get("job_runtime", 0) / 1000, 3)}
        if share and j["jobname"] in share:
            out[j["jobname"]].update(budget_mb=round(share[j["jobname"]] / MB, 3),
                                     budget_spent=w["io_bytes"] >= share[j["jobname"]])
    return out
