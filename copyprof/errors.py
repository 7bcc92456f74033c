"""One error type for everything a user can cause, mapped to exit codes by the CLI.

Readers and analyses raise :class:`CopyprofError` with a message that names the file and
what is wrong; the CLI prints it on one line and exits with ``exit_code`` (no traceback
unless ``--debug``).
"""
from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_CAPTURE_FAILED = 3


class CopyprofError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, path: str | None = None, exit_code: int | None = None) -> None:
        self.path = path
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__(f"{path}: {message}" if path else message)


class UnsupportedFormat(CopyprofError):
    """A file copyprof recognises but cannot read directly (pftrace, .nsys-rep, OTF2)."""
