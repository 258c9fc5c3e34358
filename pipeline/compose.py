"""`rmqchaos compose render`: docker-compose.yml and its files for a scenario. The cluster's services
come from the node plan (cluster/plan/compose.py); the disk-noise services (profile `noise`, started with
`docker compose --profile noise up`) from the noise kinds, on the first broker's store volume.
The scenario's own noise settings are used where it has them, else each kind's defaults."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.noise import NoiseKind
from chaos.registry import registry
from cluster.plan.compose import STORE, image_tag, render as render_cluster
from pipeline.runs import load_scenario

NOISE_IMAGE = "NOISE_IMAGE"  # the variable that picks another image with redis-server, fio and python3


def render(scenario_file: str | Path) -> dict[str, str]:
    """{relative path: text} for the scenario at `scenario_file`."""
    s = load_scenario(scenario_file)
    broker = next(b.name for b in s.cluster.brokers)
    image = f"${{{NOISE_IMAGE}:-{image_tag(s.cluster.rocketmq_version)}}}"
    services: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    for name, kind in sorted(registry().items()):
        if not issubclass(kind, NoiseKind):
            continue
        mine = [f for f in s.faults if f.kind == name]
        params = kind.Params.model_validate(mine[0].params if mine else {})
        svc, extra = kind.compose_services(params, image, f"{broker}-store", STORE, int(kind.bound(params, s)))
        services.update(svc)
        files.update(extra)
    return render_cluster(s, str(scenario_file), services, files)
