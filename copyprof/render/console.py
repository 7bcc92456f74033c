"""The rich console every text report prints to.

On a terminal rich fits tables to its width and cells fold rather than end in "…"; piped or
redirected (``report > file``) there is no width to fit, so the console gets a width no table
reaches and lines are never cut: a number in a file is always the whole number.
"""
from __future__ import annotations

import sys

from rich.console import Console

UNBOUNDED = 10_000  # columns: wider than any table copyprof draws


def output_console() -> Console:
    tty = sys.stdout.isatty()
    return Console(width=None if tty else UNBOUNDED, soft_wrap=not tty)
