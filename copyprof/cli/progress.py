"""Progress on stderr while reading (only on a terminal, so pipes and JSON stay clean)."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from copyprof.readers.discover import Source


def _may_be_a_terminal() -> bool:
    """Whether rich could take stderr for a terminal: a tty, or its environment overrides
    (FORCE_COLOR, TTY_COMPATIBLE=1). Asked first because rich's console and progress modules
    are ~3 MB of resident memory that a report into a pipe or a file never needs."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) or os.environ.get("FORCE_COLOR") is not None or \
        os.environ.get("TTY_COMPATIBLE") == "1"


@contextmanager
def reading_progress(sources: list[Source]) -> Iterator[Callable[[Source], None]]:
    """A spinner with the file being read (stderr, terminal only); see reading.ProgressDisplay."""
    if os.environ.get("CI") or not _may_be_a_terminal():
        yield lambda _source: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _source: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("reading", total=len(sources))

        def advance(source: Source) -> None:
            progress.update(task, description=f"reading {os.path.basename(source.path)}")
            progress.advance(task)

        yield advance
