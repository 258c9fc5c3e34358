"""cluster.patches: each file there, on the local backend, and the patched release built from them
(rmqchaos/rocketmq/patched.py), each problem one line at its key."""
from __future__ import annotations

from typing import Any

from rmqchaos.errors import UserError
from rmqchaos.rocketmq import patched
from rmqchaos.spec.scenario import Scenario


def patch_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Missing files and the docker backend first (said at once); then the build (first use: the
    release's sources jars fetched, the patches applied, the modules compiled), whose failure names the
    patch and the hunk or source line."""
    c = s.cluster
    errs: list[tuple[tuple[Any, ...], str]] = [
        (("cluster", "patches", i), f"{p}: no such patch file") for i, p in enumerate(c.patch_files()) if not p.is_file()]
    if c.patches and c.backend != "local":
        # the docker image holds a release's jars (cluster/container/image.py), one image per version
        errs.append((("cluster", "patches"), f"patches need the local backend, not {c.backend}: use backend: local"))
    if errs or not c.patches:
        return errs
    try:
        patched.ensure(c.rocketmq_version, c.patch_files())
    except UserError as e:  # at the patch the line names first (a build problem of them all: the key)
        at = next((i for i, p in enumerate(c.patches) if e.line().startswith(f"{p}:")), None)
        return [(("cluster", "patches") + (() if at is None else (at,)), e.line())]
    return []
