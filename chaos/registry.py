"""The fault registry: every kind of chaos/kinds/ (one module per kind, each registering itself with
chaos.protocol.register on import), imported on first use."""
from __future__ import annotations

import importlib
import pkgutil

import chaos.kinds
from chaos.protocol import KINDS, FaultKind


def registry() -> dict[str, type[FaultKind]]:
    """Every registered kind, by name."""
    for m in pkgutil.iter_modules(chaos.kinds.__path__):
        importlib.import_module(f"chaos.kinds.{m.name}")
    return KINDS
