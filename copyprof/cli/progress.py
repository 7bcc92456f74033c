"""Progress on stderr while reading (only on a terminal, so pipes and JSON stay clean)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from copyprof.readers.discover import Source


@contextmanager
def reading_progress(sources: list[Source]) -> Iterator[Callable[[Source], None]]:
    """A spinner with the file being read (stderr, terminal only); see reading.ProgressDisplay."""
    console = Console(stderr=True)
    if not console.is_terminal or os.environ.get("CI"):
        yield lambda _source: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("reading", total=len(sources))

        def advance(source: Source) -> None:
            progress.update(task, description=f"reading {os.path.basename(source.path)}")
            progress.advance(task)

        yield advance
