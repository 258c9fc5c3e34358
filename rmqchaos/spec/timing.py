"""A timer load's checks and the times the rest of the platform derives from it: the brokers' delay
levels (messageDelayLevel), a delay level's delay, and how long after the load the last message is due."""
from __future__ import annotations

from typing import Any

from rmqchaos.spec.scenario import Scenario

#: MessageStoreConfig.messageDelayLevel's default (the same in 5.1.0-5.5.0)
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}  # ScheduleMessageService.parseDelayLevel


def parse_levels(text: str) -> list[int]:
    """messageDelayLevel as the broker parses it: space-separated <n><unit>, unit s, m, h or d -> ms."""
    out = []
    for part in str(text).split():
        unit, n = part[-1:], part[:-1]
        if unit not in _UNIT_MS or not n.isdigit():
            raise ValueError(f"{part!r} is not a delay level (<n> followed by s, m, h or d)")
        out.append(int(n) * _UNIT_MS[unit])
    return out


def broker_levels(s: Scenario) -> dict[str, str]:
    """Each broker group's messageDelayLevel text (its own config over broker_defaults over the default)."""
    base = str(s.cluster.broker_defaults.config.get("messageDelayLevel", DEFAULT_DELAY_LEVELS))
    return {b.name: str(b.config.get("messageDelayLevel", base)) for b in s.cluster.brokers}


def level_ms(s: Scenario, level: int) -> int:
    """A delay level's delay in ms on this scenario's brokers (checked equal on all by timer_errors)."""
    return parse_levels(next(iter(broker_levels(s).values())))[level - 1]


def max_due_after_s(s: Scenario) -> float:
    """How long after a message is made it is due at the latest (0 without a timer load)."""
    t = s.load.timer if s.load else None
    if t is None:
        return 0.0
    if t.delay_level is not None:
        return level_ms(s, t.delay_level) / 1000
    return (t.delay or 0.0) + t.spread


def timer_errors(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """A delay level the brokers do not have, brokers that disagree on their levels, and loads a timer
    does not combine with here."""
    t = s.load.timer if s.load else None
    if t is None:
        return []
    errs: list[tuple[tuple[Any, ...], str]] = []
    levels = broker_levels(s)
    parsed: dict[str, list[int]] = {}
    for name, text in levels.items():
        try:
            parsed[name] = parse_levels(text)
        except ValueError as e:
            errs.append((("cluster", "brokers"), f"broker {name}'s messageDelayLevel: {e}"))
    if errs:
        return errs
    if len({tuple(v) for v in parsed.values()}) > 1:
        errs.append((("load", "timer", "delay_level"), "the brokers' messageDelayLevel differ: a delay level would "
                                                       "mean a different delay on each; give them one"))
    n = min(len(v) for v in parsed.values())
    if t.delay_level is not None and t.delay_level > n:
        errs.append((("load", "timer", "delay_level"), f"delay level {t.delay_level} is outside the brokers' "
                                                       f"messageDelayLevel ({n} levels: {next(iter(levels.values()))}): "
                                                       f"use 1 to {n}"))
    if s.load is not None and s.load.order is not None:
        errs.append((("load", "timer"), "a timer load is not an ordered one here: drop load.order"))
    if s.load is not None and s.load.transaction is not None:
        errs.append((("load", "timer"), "a timer load is not a transactional one here: drop load.transaction"))
    return errs
