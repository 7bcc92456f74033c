"""Reading a command's sources: decode pool, progress display and table cache in one place.

Why shared: ``report`` and ``inspect`` read the same files the same way, so a trace inspected
first is served to the report from the table cache, and both get the chunk-parallel decode.
"""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from copyprof.events import Trace
    from copyprof.load import Source


def read_traces(sources: list[Source], jobs: int | None, cache: bool, *, background_writes: bool = False) -> list[Trace]:
    """Every source's traces. ``jobs``: decode processes (None: the available cores); ``cache``:
    serve from / store into the table cache (with ``background_writes``, new entries are
    written while the caller goes on: call ``copyprof.cache.wait_for_writes()``)."""
    from copyprof.cli.progress import reading_progress
    from copyprof.load import decode_pool, read_sources
    from copyprof.pandas_import import import_in_background, pandas
    from copyprof.parallel import available_cores
    from copyprof.readers.kineto_columns import gc_paused

    # The pool forks before any other thread starts (the pandas import, the progress display).
    pool = decode_pool(sources, jobs or available_cores(), cache)
    try:
        with gc_paused():  # see _settle_heap
            if pool is None or not import_in_background(use_python_strings):  # overlaps the decoding
                use_python_strings()
            with reading_progress(len(sources)) as advance:
                return read_sources(sources, pool=pool, cache=cache, progress=lambda src: advance(src.path),
                                    background_writes=background_writes)
    finally:
        if pool is not None:
            pool.close()
        pandas()  # the background import has finished, whatever happened
        _settle_heap()


def _settle_heap() -> None:
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
    """Store the string columns pandas makes (sites, kernel names, step labels) as Python
    objects, not Arrow arrays, in this command's process (never on import: a library user's
    pandas options are theirs). pandas >= 3 picks Arrow storage whenever pyarrow is installed,
    and loading its compute library cost ~50 MB of RSS in a report (1 GB trace: 247 -> 197 MB,
    same JSON) for no speed gain at a census's sizes. A no-op where pyarrow is absent (then
    "python" is the default)."""
    import pandas as pd

    pd.set_option("mode.string_storage", "python")
