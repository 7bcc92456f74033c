"""Row-level primitives of the step analysis: step ids, blockwise passes, per-step extents.

Why a module of its own: both the step rules (steps.py) and the correlation projection
(step_projection.py) need them, and neither should import the other's internals.
"""
from __future__ import annotations

import numpy as np



def step_dtype(n_steps: int) -> type[np.signedinteger]:
    """The narrowest integer type for step ids 0..n_steps-1 and -1 (no step). Step ids index
    the step rule's annotations, launches or segments, so their number is known before any
    event gets one: ``step_of`` holds one id per event, and int16 (most traces have fewer than
    32,767 steps) is half of int32 in the analysis' peak memory and in every gather from it."""
    return np.int16 if n_steps < np.iinfo(np.int16).max else np.int32


def no_steps(n_rows: int, n_steps: int) -> np.ndarray:
    """Every row's step before any is assigned: -1, in ``step_dtype(n_steps)``."""
    return np.full(n_rows, -1, dtype=step_dtype(n_steps))
# Rows a blockwise pass over the table takes at once. Its temporaries (~8 int64 arrays in the
# GPU-time pass) coincide with the analysis' memory peak: 1 << 14 keeps them near 1 MB, where
# 1 << 16 held 4 MB (memray, 1 GB trace), at no measurable cost in time.
ROWS_PER_PASS = 1 << 14


def positions(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` as int32 (int64 past 2**31 rows), found a block at a time so
    that no int64 array of every hit is made on the way."""
    out = np.empty(int(np.count_nonzero(mask)), dtype=np.int32 if len(mask) < 2**31 else np.int64)
    n = 0
    for lo in range(0, len(mask), ROWS_PER_PASS):
        hits = lo + np.flatnonzero(mask[lo : lo + ROWS_PER_PASS])
        out[n : n + len(hits)] = hits
        n += len(hits)
    return out


def step_extents(step_of: np.ndarray, start: np.ndarray, dur: np.ndarray, n: int,
                 rows_per_pass: int = ROWS_PER_PASS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step id 0..n-1: the earliest start, the latest end and the number of events.

    Per-step min/max by sorting (ufunc.at takes ~0.1 s per million events), a block of rows
    at a time: the sort's temporaries are a few MB whatever the trace's size (over the whole
    table at once they were ~50 MB on a 1 GB trace). Min and max are exact, so any block size
    gives the same figures."""
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    count = np.zeros(n, dtype=np.int64)
    for lo in range(0, len(step_of), rows_per_pass):
        ids = step_of[lo : lo + rows_per_pass]
        sel = ids >= 0
        if not sel.any():
            continue
        ids = ids[sel]
        starts = start[lo : lo + rows_per_pass][sel]
        ends = starts + dur[lo : lo + rows_per_pass][sel]
        order = np.argsort(ids, kind="stable")
        sid = ids[order]
        heads = np.concatenate(([0], np.flatnonzero(sid[1:] != sid[:-1]) + 1))
        at = sid[heads]
        first[at] = np.minimum(first[at], np.minimum.reduceat(starts[order], heads))
        last[at] = np.maximum(last[at], np.maximum.reduceat(ends[order], heads))
        count += np.bincount(ids, minlength=n)
    return first, last, count
