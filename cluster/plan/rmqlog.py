"""RocketMQ's own log lines: their timestamp, written in GMT+8 by its logback layout
(`%d{yyy-MM-dd HH:mm:ss,GMT+8}`) at second resolution, and where each node's logs are."""
from __future__ import annotations

import calendar
import re
import time
from pathlib import Path

GMT8_S = 8 * 3600
LINE_TS = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\S* +\w+ +\S+ +- +"  # stamp, level, thread, " - "
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def epoch_ms(stamp: str) -> int:
    """'2026-11-25 07:51:07' written in GMT+8 → epoch milliseconds."""
    return (calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) - GMT8_S) * 1000


def line_ms(line: str) -> int | None:
    m = _STAMP.match(line)
    return epoch_ms(m.group(1)) if m else None


def log_dir(cluster_dir: Path, node: str) -> Path:
    return cluster_dir / node / "logs" / "rocketmqlogs"
