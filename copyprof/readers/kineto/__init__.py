"""Everything that reads Kineto (Chrome trace) JSON, behind one entry point: :func:`read_kineto`.

The pipeline, one module each:

- ``stream``: the file as pieces of the event array, cut at candidate event boundaries
  (``files.BlockStream`` underneath, gzip or plain); ``repair`` and ``tail`` keep what a
  damaged or cut-off file still holds and find where the array ends when keys follow it;
- ``native`` decodes a piece with the C scanner (``low_level/``, optional, with its own
  tests) and falls back to ``columns``, the Python decode (msgspec), which gives the same
  columns; ``chunk`` is what both share (categories, kept rows, assembly);
- ``pool``: pieces decoded in worker processes fed through shared memory;
- ``merged``: files that hold several ranks (TraceLens, SGLang mergers) split by rank;
- ``reader``: the above put together into :class:`~copyprof.events.Trace` objects.
"""
from __future__ import annotations

from copyprof.readers.kineto.reader import read_kineto

__all__ = ["read_kineto"]
