"""The one poll-until-deadline helper: every "wait until X, at most T seconds" loop goes through it."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from rmqchaos.errors import UserError
from rmqchaos.progress import say

T = TypeVar("T")


def poll_until(cond: Callable[[], T], timeout: float, what: str, *, interval: float = 0.25,
               check: Callable[[], None] | None = None, error: Callable[[], BaseException] | None = None,
               hint: str = "check `rmqchaos cluster status`", progress_every: float = 0.0,
               progress: Callable[[], str] | None = None, raise_on_timeout: bool = True) -> T | None:
    """Call `cond` every `interval` s until it returns something truthy, and return that.

    check: runs before each try and may raise (e.g. the node being waited for has exited).
    On timeout: raise `error()` if given, else UserError('timed out after Ns waiting for WHAT', hint);
    with raise_on_timeout=False return None instead (a bounded best-effort wait).
    progress: a line said every `progress_every` s while waiting (long waits show they are alive).
    """
    deadline = time.monotonic() + timeout
    last_say = time.monotonic()
    while True:
        if check is not None:
            check()
        v = cond()
        if v:
            return v
        now = time.monotonic()
        if now > deadline:
            if not raise_on_timeout:
                return None
            raise error() if error is not None else UserError(
                f"timed out after {timeout:.0f}s waiting for {what}", hint)
        if progress is not None and progress_every and now - last_say >= progress_every:
            say(progress())
            last_say = now
        time.sleep(interval)
