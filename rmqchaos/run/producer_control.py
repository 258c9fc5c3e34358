"""How the platform tells a running load process that its producer application crashed, and that it
is back (the `producer_crash` fault, issue 50): files in the run's `load/control/`, which every load
process polls. The fault and the load run in different processes (the load in `python -m loadgen`,
maybe several workers), so a file is the one channel they both reach, whichever backend runs them.

A request is `<name>.<down|up>`, written whole (rename); each load process answers it once with
`<name>.<down|up>.ack-<producer id>`, a JSON object of what it did (its evidence)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

Action = Literal["down", "up"]
ACTIONS: tuple[Action, ...] = ("down", "up")


def control_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / "load" / "control"


def _write(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)  # whole or not at all: a poller never reads half a request


def request(run_dir: Path | str, name: str, action: Action, **params: Any) -> None:
    _write(control_dir(run_dir) / f"{name}.{action}", {"name": name, "action": action, **params})


def pending(run_dir: Path | str, done: set[str]) -> list[dict[str, Any]]:
    """Requests not in `done` (their file names), oldest first; each with its `file`."""
    d = control_dir(run_dir)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.iterdir(), key=lambda p: p.stat().st_mtime_ns):
        if p.name in done or p.name.startswith(".") or p.suffix.lstrip(".") not in ACTIONS:
            continue
        try:
            out.append({**json.loads(p.read_text()), "file": p.name})
        except (OSError, ValueError):
            continue
    return out


def ack(run_dir: Path | str, request_file: str, producer_id: str, evidence: dict[str, Any]) -> None:
    _write(control_dir(run_dir) / f"{request_file}.ack-{producer_id}", {"producer_id": producer_id, **evidence})


def acks(run_dir: Path | str, name: str, action: Action) -> list[dict[str, Any]]:
    d = control_dir(run_dir)
    out = []
    for p in sorted(d.glob(f"{name}.{action}.ack-*")) if d.is_dir() else []:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out
