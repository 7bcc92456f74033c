"""How the commands read: :func:`copyprof.reading.read_runs` with every core, the table cache
and a progress display on a terminal; the commands own their process (GC, pandas options)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from copyprof.events import Trace
    from copyprof.readers.discover import Source


def read_traces(sources: list[Source], jobs: int | None, cache: bool, *, background_writes: bool = False) -> list[Trace]:
    """Every source's traces. ``jobs``: decode processes (None: the available cores)."""
    from copyprof.cli.progress import reading_progress
    from copyprof.readers.kineto.pool import available_cores
    from copyprof.reading import read_runs

    return read_runs(sources, jobs=jobs or available_cores(), cache=cache, progress=reading_progress,
                     background_writes=background_writes, own_process=True)
