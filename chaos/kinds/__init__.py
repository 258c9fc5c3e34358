"""One module per fault kind; each registers itself with chaos.protocol.register on import.
`registry()` imports them all and returns the registry."""
from __future__ import annotations

import importlib
import pkgutil

from pydantic import BaseModel

from chaos.protocol import KINDS, FaultError, FaultKind
from rmqchaos.spec import Fault


def registry() -> dict[str, type[FaultKind]]:
    """Every registered kind, by name."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
    return KINDS


def params_of(fault: Fault) -> BaseModel:
    """The typed parameters of a loaded fault."""
    k = registry().get(fault.kind)
    if k is None:
        raise FaultError(f"unknown fault kind {fault.kind!r}", f"known: {', '.join(sorted(registry()))}")
    return k.Params.model_validate(fault.params)
