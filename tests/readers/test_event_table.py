"""The event table's integer columns: start_ns stays int64, the others are compacted.

Why these tests: every integer column but the clock (durations, bytes, ids, launch geometry)
is stored in the narrowest dtype its values need (events.py), cutting the table by ~60 %; a
column filled chunk by chunk must end in the dtype one pass over all values would give, with
no value wrapped, and code that writes larger values into a copy of one must widen it.
"""
from __future__ import annotations

import numpy as np
import pytest

from copyprof.columns import Categorical
from copyprof.events import CLOCK_COLUMNS, COMPACT_COLUMNS, EventTableBuilder, compact_ints, narrowest_int
from copyprof.readers.kineto.reader import ColumnBuffer


@pytest.mark.parametrize("lo, hi, expected", [
    (-1, 0, np.int8), (-1, 127, np.int8), (-1, 128, np.int16), (-129, 0, np.int16),
    (-1, 2**15, np.int32), (-1, 2**31 - 1, np.int32), (-1, 2**31, np.int64), (-(2**40), 0, np.int64),
])
def test_narrowest_int_is_the_smallest_signed_type_holding_the_range(lo: int, hi: int, expected: type) -> None:
    assert narrowest_int(lo, hi) == np.dtype(expected)


def test_narrowest_int_respects_a_floor() -> None:
    assert narrowest_int(-1, 3, at_least=np.int32) == np.dtype(np.int32)


def test_compact_ints_keeps_values_and_caps_at_the_widest_width() -> None:
    values = np.array([-1, 7, 515], dtype=np.int64)
    out = compact_ints(values)
    assert out.dtype == np.int16 and out.tolist() == [-1, 7, 515]
    assert compact_ints(np.array([], dtype=np.int64)).dtype == np.int8
    assert compact_ints([2**33], "int64").tolist() == [2**33]


def test_builder_compacts_every_integer_column_but_the_clock() -> None:
    b = EventTableBuilder(rank=3)
    b.add("kernel", "k", 5_000_000_000_000, 2_000, on_gpu=True, device=0, stream=7, correlation=40_000,
          bytes_=-1, grid=(9216, 1, 1), block=(256, 1, 1))
    b.add("runtime", "cudaLaunchKernel", 5_000_000_000_100, 10, on_gpu=False, stream=2**33, correlation=40_000)
    ev = b.build()
    for col in CLOCK_COLUMNS:
        assert ev[col].dtype == np.int64, col
    assert ev["dur_ns"].dtype == np.int16 and ev["dur_ns"].tolist() == [2_000, 10]
    assert ev["bytes"].dtype == np.int8  # all unknown (-1)
    assert ev["rank"].dtype == np.int8 and ev["device"].dtype == np.int8
    assert ev["stream"].dtype == np.int64 and ev["stream"].tolist() == [7, 2**33]  # a host tid beyond int32
    assert ev["correlation"].dtype == np.int32 and ev["grid_x"].dtype == np.int16 and ev["block_x"].dtype == np.int16
    assert set(COMPACT_COLUMNS) | set(CLOCK_COLUMNS) == {c for c in ev.names if isinstance(ev[c], np.ndarray)
                                                          and ev[c].dtype.kind == "i"}


def test_chunked_columns_widen_when_a_later_chunk_needs_it() -> None:
    # First chunk: small ids (int8); later: an id past int16, then a tid past int32. The column
    # is widened in place and ends as compact_ints over all values would make it, values exact.
    cols = ColumnBuffer(capacity=4)
    chunks = [np.array([-1, 5]), np.array([70_000, 3]), np.array([2**35, -1]), np.array([1, 2])]
    for c in chunks:
        cols.append({"correlation": c.astype(np.int64), "start_ns": c.astype(np.int64)}, len(c))
    out = cols.take()
    every = np.concatenate(chunks)
    assert out["correlation"].dtype == compact_ints(every).dtype == np.int64
    assert out["correlation"].tolist() == every.tolist()
    assert out["start_ns"].dtype == np.int64  # the clock keeps the reader's dtype


def test_chunked_columns_stay_narrow_when_no_chunk_needs_more() -> None:
    cols = ColumnBuffer(capacity=2)
    for c in ([-1, 100], [300, 2], [7, 8]):  # the second chunk needs int16, the third does not
        cols.append({"stream": np.array(c, dtype=np.int64)}, len(c))
    out = cols.take()
    assert out["stream"].dtype == np.int16 and out["stream"].tolist() == [-1, 100, 300, 2, 7, 8]


def test_resolved_copy_sizes_are_not_wrapped_by_a_narrow_bytes_column() -> None:
    # A size-less rocclr copy: its bytes (-1) fit int8, the size resolved from its grid does
    # not; the resolved size must come back exact (an int8 copy of the column would wrap it).
    from copyprof.taxonomy.copies import resolve_bytes_at

    b = EventTableBuilder()
    b.add("kernel", "__amd_rocclr_copyBuffer", 1_000, 5_000, on_gpu=True, device=0, stream=1,
          grid=(16, 1, 1), block=(512, 1, 1))
    ev = b.build()
    assert ev["bytes"].dtype == np.int8
    nbytes, src = resolve_bytes_at(ev, np.array([0]), cus=256)
    assert nbytes.tolist() == [16 * 512 * 16]  # grid work-items x 16 B (taxonomy/copies.py)
    assert src.tolist() == ["grid-bound"]


def test_analysis_strings_are_python_objects_under_the_cli_option() -> None:
    # Where pyarrow is installed, pandas >= 3 stores inferred strings as Arrow arrays; loading
    # its compute library cost ~50 MB in a report (copyprof/reading.py: use_python_strings). The
    # census' and the steps' tables are Columns: their string columns must be numpy object
    # arrays of Python strings (no pandas or Arrow storage, whatever pandas' option says), and
    # the report must not change (the acceptance tests compare its figures).
    import pandas as pd

    from copyprof.analysis.report import analyze_rank
    from copyprof.models import load_layout
    from copyprof.reading import read_runs, use_python_strings
    from tests.conftest import REPO

    run = sorted((REPO / "traces").glob("replica-kimi-k3-tp8-c16-cuda-graph-baseline-2*"))[0]
    trace = read_runs([str(sorted(run.glob("rank0.*"))[0])])[0]
    with pd.option_context("mode.string_storage", pd.get_option("mode.string_storage")):
        use_python_strings()
        ra = analyze_rank(trace, load_layout("kimi-k3"))
    frames = {"copies": ra.census.copies, "steps": ra.steps.table}
    strings = [(name, col) for name, f in frames.items() for col in f.names
               if isinstance(f[col], np.ndarray) and f[col].dtype == object and len(f[col])
               and all(isinstance(v, str) for v in f[col].tolist())]
    assert ("copies", "site") in strings and ("steps", "label") in strings, strings
    assert all(isinstance(f[col], (np.ndarray, Categorical)) for f in frames.values() for col in f.names), \
        "every column is a numpy array or a Categorical, never pandas storage"
    assert (ra.census.copies["site"] == "mla").sum() == 24 * len(ra.census.per_step)  # 24 MLA layers per step
