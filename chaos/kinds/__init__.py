"""One module per fault kind; each registers itself with chaos.protocol.register on import.
`registry()` imports them all and returns the registry."""
from __future__ import annotations

import importlib
import pkgutil

from chaos.protocol import KINDS, FaultKind


def registry() -> dict[str, type[FaultKind]]:
    """Every registered kind, by name."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
    return KINDS

