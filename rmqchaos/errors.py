"""The one error type a user sees: what is wrong and what to do, on one line."""
from __future__ import annotations


class UserError(Exception):
    """Bad input or an environment problem. `str()` is the one line the CLI prints.

    `detail` holds extra lines (e.g. a node's log tail) printed below that line.
    """

    def __init__(self, message: str, hint: str = "", detail: str = "") -> None:
        self.message = message
        self.hint = hint
        self.detail = detail
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message
