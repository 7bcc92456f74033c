"""The table's compact columns come out in the narrowest type of all their values, whatever
types the chunks arrive in.

Why: decode workers narrow each chunk's columns to what that chunk needs (a smaller result to
send), and the parent skips its own min/max for a chunk whose signed type is no wider than the
column's. Chunks arrive narrowed, un-narrowed (the Python path, a merged carry) or wider than
the column so far; the finished column must hold every value exactly, in the type
``narrowest_int`` gives for the whole column, as a single read of all values would.
"""
from __future__ import annotations

import numpy as np
import pytest

from copyprof.events import narrowest_int
from copyprof.readers.kineto.chunk import NARROWED
from copyprof.readers.kineto.reader import ColumnBuffer


@pytest.mark.parametrize("seed", range(12))
def test_chunks_of_any_integer_type_give_the_narrowest_column(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buf = ColumnBuffer(64)  # small: the room doubles on the way
    parts = []
    for _ in range(int(rng.integers(1, 9))):
        hi = int(rng.choice([100, 30_000, 40_000, 3_000_000_000]))
        values = rng.integers(-1, hi, int(rng.integers(0, 50)))
        narrow = len(values) and rng.random() < 0.5
        chunk = values.astype(narrowest_int(int(values.min()), int(values.max()))) if narrow else values
        parts.append(values)
        buf.append({"grid_x": chunk, "start_ns": values.astype(np.int64)}, len(values))
    cols = buf.take()
    everything = np.concatenate(parts)
    assert cols["grid_x"].tolist() == everything.tolist()
    want = narrowest_int(int(everything.min()), int(everything.max())) if len(everything) else np.dtype(np.int8)
    assert cols["grid_x"].dtype == want
    assert cols["start_ns"].dtype == np.int64  # a clock column keeps its type


def test_the_worker_narrows_exactly_the_compact_columns() -> None:
    assert "start_ns" not in NARROWED and {"dur_ns", "correlation", "grid_x", "rank_key"} <= set(NARROWED)
