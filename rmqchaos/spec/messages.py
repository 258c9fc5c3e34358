"""How a validation error is worded: the dotted key, pydantic's message, the keys allowed where an
unknown one was found, and the error carrying every line."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from rmqchaos.errors import UserError
from rmqchaos.spec.scenario import Scenario

class SpecError(UserError):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0])
        self.lines = lines
        self.detail = "\n".join(lines[1:])


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _pydantic_message(e: dict[str, Any]) -> str:
    t = e["type"]
    if t == "extra_forbidden":
        return "unknown key (allowed here: see docs/spec.md)"
    msg = e["msg"]
    if t.startswith("value_error"):
        msg = msg.removeprefix("Value error, ")
    inp = e.get("input")
    if t not in ("missing",) and not isinstance(inp, (dict, list)) and "(got " not in msg:
        msg += f" (got {inp!r})"
    return msg


def _allowed_keys(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model else ""


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The spec model whose mapping contains the last key of `loc` (for 'allowed keys' hints)."""
    model: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        model = _inner_model(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in getattr(ann, "__args__", ()) or ():
        m = _inner_model(a)
        if m is not None:
            return m
    meta = getattr(ann, "__origin__", None)
    if meta is not None and isinstance(meta, type) and issubclass(meta, BaseModel):
        return meta
    return None
