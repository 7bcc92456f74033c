"""The one read entry point: :func:`read_runs` turns user paths into traces.

Commands, tests and benchmarks all read through it, so they read the same way: sources
found by content (readers/discover.py), each read by its format's reader (readers/registry.py),
served from or stored into the on-disk table cache (cache/tables.py), big Kineto files decoded
chunk-parallel in worker processes (readers/kineto/pool.py). Ranks are read one after
another, each with every core: one rank's text in flight at a time (flat memory) and ranks of
any size balanced. Every path gives the tables a plain serial read gives.

Process setup lives here too, because it must be ordered around the pool: the workers fork
before any other thread starts; pandas is imported after they fork (a worker needs none);
the cyclic GC is paused while reading and what is alive afterwards is
frozen. A command that owns its process (``own_process=True``) also sets pandas' string
storage; a library caller's pandas options are left alone.
"""
from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from copyprof.readers.discover import Source, discover, read_source

if TYPE_CHECKING:
    from copyprof.events import Trace
    from copyprof.readers.kineto.pool import ChunkPool

Progress = Callable[[Source], None]
ProgressDisplay = Callable[[list[Source]], AbstractContextManager[Progress]]
"""A display (``cli/progress.py``) entered once the decode workers have forked — it may start a
thread — and told of each source before it is read."""


def read_runs(paths: Iterable[str] | list[Source], *, jobs: int = 1, cache: bool = False,
              progress: ProgressDisplay | None = None, background_writes: bool = False,
              own_process: bool = False) -> list[Trace]:
    """Every trace of ``paths`` (files, directories, run directories; or sources already found).

    ``jobs``: decode processes for big Kineto files (1: serial); ``cache``: serve from / store
    into the table cache (with ``background_writes`` new entries are written while the caller
    goes on: call ``copyprof.cache.tables.wait_for_writes()``); ``progress`` shows the reading (see
    ``ProgressDisplay``); ``own_process``: the caller is a copyprof command (see the module doc).
    """
    from copyprof.readers.kineto.columns import gc_paused

    items = list(paths)
    sources: list[Source] = ([s for s in items if isinstance(s, Source)] if all(isinstance(s, Source) for s in items)
                             else discover([str(s) for s in items]))
    pool = decode_pool(sources, jobs, cache)  # forks before any other thread starts
    try:
        with gc_paused():  # see settle_heap
            if own_process:
                use_python_strings()
            with progress(sources) if progress else contextlib.nullcontext(None) as advance:
                return read_sources(sources, pool=pool, cache=cache, progress=advance,
                                    background_writes=background_writes)
    finally:
        if pool is not None:
            pool.close()
        if own_process:
            settle_heap()


def decode_pool(sources: list[Source], jobs: int, cache: bool = False) -> ChunkPool | None:
    """Worker processes for chunk-parallel Kineto decoding, when ``jobs`` > 1 and a Kineto
    source is big enough to gain from them (and, with ``cache``, is not served from the
    cache). Start it before any other thread (a progress display); close it when done."""
    from copyprof.readers.files import json_size
    from copyprof.readers.kineto.pool import MIN_PARALLEL_BYTES, make_pool

    if jobs < 2:
        return None
    big = [s for s in sources if s.fmt == "kineto" and json_size(s.path) >= MIN_PARALLEL_BYTES]
    if cache and big:
        from copyprof.cache.tables import TableCache

        table_cache = TableCache()
        big = [s for s in big if not table_cache.fresh(s.fmt, s.paths)]
    return make_pool(jobs) if big else None


def read_sources(sources: list[Source], *, pool: ChunkPool | None = None, cache: bool = False,
                 progress: Progress | None = None, background_writes: bool = False) -> list[Trace]:
    """Read every source, Kineto chunks decoded in ``pool`` when given, through the cache."""
    from copyprof.cache.tables import TableCache, cached_read  # numpy/pandas: not needed to discover sources

    table_cache = TableCache() if cache else None
    traces: list[Trace] = []
    for src in sources:
        if progress:
            progress(src)
        traces.extend(cached_read(table_cache, src.fmt, src.paths, functools.partial(read_source, src, pool),
                                  background=background_writes))
    return traces


def settle_heap() -> None:
    """Move what reading left alive (modules, the tables) out of the cyclic GC's way.

    Importing pandas and reading make no garbage cycles worth a collection, yet the import
    allocates enough containers to trigger full collections that walk every live object, and
    the analysis after it would walk them again. So the GC is paused while reading (the
    decode workers pause it too) and everything alive afterwards is frozen into the
    permanent generation: later collections look only at the analysis' own objects. Measured
    by gc.callbacks on a cold report of the 1 GB H200-derived trace: 40-90 ms of collections
    in the parent before. (No collection before freezing: a full one costs ~20 ms here, and
    a cycle the read made, if any, would only outlive the command's short life.)"""
    gc.freeze()


def use_python_strings() -> None:
    """Python string storage for whatever pandas this command makes (see prefer_python_strings)."""
    from copyprof.columns import prefer_python_strings

    prefer_python_strings()
