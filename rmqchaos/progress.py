"""Progress lines on stderr for anything that takes more than a few seconds."""
from __future__ import annotations

import os
import sys
import time

_quiet = bool(os.environ.get("RMQCHAOS_QUIET"))


def say(msg: str) -> None:
    if not _quiet:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
