"""Progress on stderr while reading (only on a terminal, so pipes and JSON stay clean)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextmanager
def reading_progress(total: int) -> Iterator[Callable[[str], None]]:
    console = Console(stderr=True)
    if not console.is_terminal or os.environ.get("CI"):
        yield lambda _path: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("reading", total=total)

        def advance(path: str) -> None:
            progress.update(task, description=f"reading {os.path.basename(path)}")
            progress.advance(task)

        yield advance
