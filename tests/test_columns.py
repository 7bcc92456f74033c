"""The pandas-free tables (copyprof/columns.py) keep the pandas semantics the analysis relied on.

pandas is the oracle here: the report's results must not change because its tables stopped
being DataFrames, so each helper is checked against what the pandas call it replaced gives,
on random keys with ties, missing values and repeated groups.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copyprof.columns import Categorical, Columns, constant
from copyprof.grouping import commonest, commonest_text, distinct, group_ids, group_rows, median, median_of, percentile
from copyprof.events import EventTableBuilder

_keys = st.lists(st.sampled_from(["b", "a", "c", "", "dd"]), min_size=1, max_size=60)
_ints = st.lists(st.integers(-3, 4), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_group_ids_number_groups_as_pandas_groupby(data):
    """sort=False: pandas numbers groups by first appearance; sort=True: by key order."""
    n = data.draw(st.integers(1, 60))
    a = np.array(data.draw(st.lists(st.sampled_from(["b", "a", "c", ""]), min_size=n, max_size=n)), dtype=object)
    b = np.array(data.draw(st.lists(st.integers(-3, 4), min_size=n, max_size=n)), dtype=np.int64)
    frame = pd.DataFrame({"a": a, "b": b})
    for sort in (False, True):
        gid, first = group_ids(a, b, sort=sort)
        expect = frame.groupby(["a", "b"], sort=sort).ngroup().to_numpy()
        assert gid.tolist() == expect.tolist()
        assert first.tolist() == [int(np.flatnonzero(expect == g)[0]) for g in range(expect.max() + 1)]


@settings(max_examples=100, deadline=None)
@given(_keys)
def test_group_rows_are_the_groups_rows_in_table_order(keys):
    gid, _ = group_ids(np.array(keys, dtype=object))
    rows = group_rows(gid)
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(keys)))
    for g, r in enumerate(rows):
        assert (gid[r] == g).all() and r.tolist() == sorted(r.tolist())


@settings(max_examples=150, deadline=None)
@given(_keys)
def test_commonest_breaks_ties_as_value_counts(keys):
    assert commonest(keys) == pd.Series(keys, dtype=object).value_counts().index[0]


def test_commonest_of_nothing_is_none():
    assert commonest([]) is None


_texts = st.lists(st.sampled_from(["a", "b", "c", "", None, float("nan")]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(_texts)
def test_commonest_text_skips_empty_none_and_nan_then_breaks_ties_as_value_counts(values):
    # The oracle: pandas' value_counts (first seen wins a tie) of the values that are text.
    text = [v for v in values if isinstance(v, str) and v]
    expected = pd.Series(text, dtype=object).value_counts().index[0] if text else ""
    assert commonest_text(np.array(values, dtype=object)) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6), st.integers(-10**6, 10**6)), max_size=30))
def test_median_of_skips_missing_values_as_pandas_median(values):
    expect = pd.Series([np.nan if v is None else v for v in values], dtype=float).median()
    got = median_of(values)
    assert (got is None and np.isnan(expect)) or got == pytest.approx(expect, rel=1e-12, abs=1e-12)


def test_categorical_compares_and_selects_by_value():
    col = Categorical(np.array([0, 1, -1, 1, 2], dtype=np.int8), ["kernel", "memcpy", "runtime"])
    assert (col == "memcpy").tolist() == [False, True, False, True, False]
    assert (col != "memcpy").tolist() == [True, False, True, False, True]
    assert (col == "absent").tolist() == [False] * 5  # a value no row has selects nothing
    assert col.isin({"kernel", "runtime"}).tolist() == [True, False, False, False, True]
    assert col.strings().tolist() == ["kernel", "memcpy", "", "memcpy", "runtime"]  # -1: missing
    assert col.map(len).tolist() == [6, 6, 0, 6, 7]
    assert col.take(np.array([4, 0])).strings().tolist() == ["runtime", "kernel"]
    assert col.used() == ["kernel", "memcpy", "runtime"]


def test_categorical_from_values_sorts_categories_as_pandas():
    col = Categorical.from_values(["DtoD", "", "HtoD", "DtoD"])
    expect = pd.Categorical(["DtoD", "", "HtoD", "DtoD"])
    assert col.categories.tolist() == expect.categories.tolist()
    assert col.codes.tolist() == expect.codes.tolist()


def test_columns_select_rows_and_refuse_a_column_of_another_length():
    t = Columns({"x": np.arange(5), "k": Categorical(np.array([0, 1, 0, 1, 0]), ["a", "b"])})
    sub = t[t["k"] == "b"]
    assert len(sub) == 2 and sub["x"].tolist() == [1, 3] and sub.strings("k").tolist() == ["b", "b"]
    assert t.take(np.array([4, 4]))["x"].tolist() == [4, 4]
    with pytest.raises(ValueError):
        t["y"] = np.arange(4)
    t["label"] = "same"
    assert t["label"].tolist() == ["same"] * 5


def test_event_table_round_trips_through_pandas_with_the_readers_dtypes():
    """``trace.events`` (the DataFrame a library user gets) is the table with the dtypes the
    event-table schema documents: categoricals for the string columns, narrow ints otherwise."""
    b = EventTableBuilder(rank=2)
    b.add("kernel", "k1", 1_000, 50, on_gpu=True, device=0, stream=7, correlation=3)
    b.add("memcpy", "Memcpy DtoD", 2_000, 10, on_gpu=True, device=0, stream=7, bytes_=4096, bytes_src="event",
          copy_dir="DtoD")
    table = b.build()
    frame = table.to_pandas()
    assert list(frame.columns) == list(table.names)
    assert frame["kind"].dtype == "category" and frame["name"].astype(str).tolist() == ["k1", "Memcpy DtoD"]
    assert frame["copy_dir"].astype(str).tolist() == ["", "DtoD"]
    back = Columns.from_pandas(frame)
    for name in table.names:
        a, b2 = table[name], back[name]
        if isinstance(a, Categorical):
            assert a.strings().tolist() == b2.strings().tolist()
        else:
            assert a.dtype == b2.dtype and a.tolist() == b2.tolist()


def test_filled_holds_one_object_not_one_per_row() -> None:
    # np.full(n, "text", dtype=object) makes a str per element (memray: 3.4 MB per column at
    # the census' 65k copies); filled() must give n references to the one value, equal to it.
    from copyprof.columns import filled

    text = "structure"
    out = filled(1000, text)
    assert out.dtype == object and len(out) == 1000
    assert all(v is text for v in out.tolist())
    assert filled(0, None).shape == (0,)


def test_group_ids_of_many_keys_whose_combinations_overflow_int64_match_pandas() -> None:
    # Keys are combined as one mixed-radix number per row; where the product of their distinct
    # counts passes 2**62 they are renumbered key by key instead. Both must number the groups as
    # pandas does: here 12 keys of 40 distinct values each (40**12 > 2**62).
    rng = np.random.default_rng(7)
    keys = [rng.permutation(40) for _ in range(12)]
    keys[3][5] = keys[3][6]  # not every row unique
    frame = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)})
    for sort in (False, True):
        gid, _ = group_ids(*keys, sort=sort)
        assert gid.tolist() == frame.groupby(list(frame.columns), sort=sort).ngroup().tolist()


def test_a_constant_column_holds_its_value_once_and_refuses_writes() -> None:
    # A column that says the same for every row (no stacks, one rank) is a stride-0 view: no
    # memory per row. Selecting rows gives an ordinary array; a write is an error, not a
    # silent change of every row at once.
    text, rank, empty = constant(70_000, "no stacks"), constant(70_000, np.int8(3)), constant(70_000, ())
    assert text.strides == (0,) and text.dtype == object and rank.dtype == np.int8
    assert text.tolist() == ["no stacks"] * 70_000 and empty[:2].tolist() == [(), ()]
    assert (rank == 3).all() and len(rank) == 70_000
    table = Columns({"why": text, "rank": rank}, 70_000)
    picked = table[np.arange(70_000) % 7 == 0]
    assert picked["why"].flags.writeable and picked["why"].tolist() == ["no stacks"] * 10_000
    with pytest.raises(ValueError):
        text[0] = "other"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(-5, 5), st.floats(-1e6, 1e6) | st.just(float("nan"))), max_size=40))
def test_distinct_is_numpys_unique(values):
    # The sort path it takes gives np.unique's values: sorted, NaN collapsed to one at the end.
    arr = np.array(values, dtype=float)
    np.testing.assert_array_equal(distinct(arr), np.unique(arr))
    ints = np.array([int(v) for v in values if v == v], dtype=np.int64)
    np.testing.assert_array_equal(distinct(ints), np.unique(ints))
    pairs = np.stack([ints, ints % 3], axis=1) if len(ints) else np.zeros((0, 2), dtype=np.int64)
    np.testing.assert_array_equal(distinct(pairs, axis=0), np.unique(pairs, axis=0))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9) | st.integers(-10**6, 10**6).map(float), max_size=41), st.booleans())
def test_median_is_numpys_median(values, as_ints):
    # The same value and type as np.median: odd and even lengths, ties, ints, floats; NaN and
    # empty go to np.median itself.
    arr = np.array([int(v) for v in values], dtype=np.int64) if as_ints else np.array(values, dtype=float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the median of nothing warns, in both
        ours, theirs = median(arr), np.median(arr)
    assert type(ours) is type(theirs)
    assert ours == theirs or (ours != ours and theirs != theirs)
    if len(arr) and not as_ints:
        with_nan = np.append(arr, np.nan)
        assert np.isnan(median(with_nan)) and np.isnan(np.median(with_nan))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=41), st.floats(0, 100), st.booleans())
def test_percentile_is_numpys_linear_percentile(values, q, as_ints):
    # The same value and type as np.percentile's default (linear) method, at any q, on floats
    # and ints, ties included; NaN goes to np.percentile itself.
    arr = np.array([int(v) for v in values], dtype=np.int64) if as_ints else np.array(values, dtype=float)
    for at in (q, 0.0, 10.0, 50.0, 90.0, 100.0):
        ours, theirs = percentile(arr, at), np.percentile(arr, at)
        assert type(ours) is type(theirs) and ours == theirs
    if not as_ints:
        assert np.isnan(percentile(np.append(arr, np.nan), q))
