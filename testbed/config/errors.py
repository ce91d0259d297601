"""The one user-facing error type.

Anything the user can fix (a bad spec, a missing tool, a full disk, an address
where no cluster answers) is raised as ``UserError``; the CLI prints its message
as one line on stderr and exits with code 2. Everything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

__all__ = ["UserError", "EXIT_USER_ERROR"]

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A problem with the user's input or environment, with a message saying how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line, always
        return " ".join(self.message.split())
