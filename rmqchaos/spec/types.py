"""The spec's value types (durations, ports, names, config values) and the strict base model."""
from __future__ import annotations

import re
from typing import Annotated, Any, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _duration(v: Any) -> Any:
    """'500ms', '30s', '2m', '1h' or a bare number of seconds -> float seconds."""
    if isinstance(v, bool):
        raise ValueError("expected a duration such as 30s, 500ms or 2m")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if not m:
            if v.strip().startswith("-"):
                raise ValueError(f"duration must not be negative (got {v!r})")
            raise ValueError(f"expected a duration such as 30s, 500ms or 2m (got {v!r})")
        return float(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError("expected a duration such as 30s, 500ms or 2m")


def to_seconds(v: Any) -> float:
    """A duration as the spec reads it ('500ms', '30s', 2.5), in seconds; ValueError otherwise."""
    return float(_duration(v))


Duration = Annotated[float, BeforeValidator(_duration), Field(gt=0)]
Port = Annotated[StrictInt, Field(ge=1024, le=65535)]
ConfValue = Union[StrictBool, StrictInt, StrictFloat, str]
NodeName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,40}$")]

# A fault's target: a node's name, or a role resolved when the fault fires (chaos/targets.py):
# `master-of:<broker group>` or `controller-leader`; in a partition's groups also
# `slaves-of:<broker group>` (every other node of the group) and `controller-followers` (every
# standalone controller but the leader): several nodes, so no `target:`; and
# `slave-of:<broker group>#<k>`, the k-th of those other nodes in the group's order (1-based), to
# split a group's slaves between the sides of a partition.
MASTER_OF = "master-of:"
SLAVES_OF = "slaves-of:"
SLAVE_OF = "slave-of:"
CONTROLLER_LEADER = "controller-leader"
CONTROLLER_FOLLOWERS = "controller-followers"
MANY = (SLAVES_OF, CONTROLLER_FOLLOWERS)  # the roles that name several nodes (partition groups only)
FaultTarget = Annotated[str, Field(pattern=r"^((master-of:|slaves-of:)?[A-Za-z][A-Za-z0-9_-]{0,40}"
                                           r"|slave-of:[A-Za-z][A-Za-z0-9_-]{0,40}#[1-9])$")]


def is_role(target: str | None) -> bool:
    return target is not None and (target.startswith((MASTER_OF, SLAVES_OF, SLAVE_OF))
                                   or target in (CONTROLLER_LEADER, CONTROLLER_FOLLOWERS))


def role_group(target: str) -> str | None:
    """The broker group of `master-of:<group>`, `slaves-of:<group>`, `slave-of:<group>#<k>` (None for
    any other target)."""
    for prefix in (MASTER_OF, SLAVES_OF, SLAVE_OF):
        if target.startswith(prefix):
            rest = target[len(prefix):]
            return rest.split("#", 1)[0] if prefix == SLAVE_OF else rest
    return None


def slave_index(target: str) -> int | None:
    """k of `slave-of:<group>#<k>` (None for any other target, or without `#<k>`)."""
    if not target.startswith(SLAVE_OF) or "#" not in target:
        return None
    k = target.rsplit("#", 1)[1]
    return int(k) if k.isdigit() else None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


NonNegDuration = Annotated[float, BeforeValidator(_duration), Field(ge=0)]
TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,120}$")]
GroupName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,120}$")]
