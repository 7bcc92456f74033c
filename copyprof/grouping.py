"""Groups and summaries over columns (copyprof/columns.py), with pandas' orders.

Semantics kept from the pandas code these replaced, where results depend on them: groups come
in order of first appearance (``group_ids``) or sorted by key (``sort=True``), the commonest
value of a column breaks ties by first appearance (``commonest``), a descending sort breaks
ties as ``sort_values(ascending=False)`` does, and medians skip None and NaN. Tested with pandas
as the oracle (tests/test_columns.py).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from copyprof.columns import Categorical


def distinct(values: Any, axis: int | None = None) -> np.ndarray:
    """``np.unique(values, axis=axis)``: the sorted distinct values (rows with ``axis=0``).

    Why not that call: asked for the values alone, numpy >= 2.3 takes a hash-table path,
    measured here 4-5x slower than its sort on integer columns (2 M int64 of 1,000 values:
    43 vs 8.5 ms; 65 k of 400: 1.14 vs 0.33 ms). Asking for the counts too takes the sort
    path, which gives the same values."""
    return np.unique(values, return_counts=True, axis=axis)[0]


def median(values: Any) -> Any:
    """``np.median(values)``, the same value, for a 1-D array of numbers without NaN: the middle
    order statistics from np.partition, averaged by np.mean as np.median averages them.

    Why not np.median: on floats it checks for NaN through ``np.ma``, whose first use imports
    numpy.ma (~10 ms), paid again by each forked child of the analysis that takes a median.
    Anything else (NaN, other shapes or types, no values) goes to np.median itself."""
    arr = np.asarray(values)
    if not _plain_numbers(arr):
        return np.median(arr)
    half = len(arr) // 2
    if len(arr) % 2:
        return np.mean(np.partition(arr, half)[half : half + 1])
    return np.mean(np.partition(arr, [half - 1, half])[half - 1 : half + 1])


def percentile(values: Any, q: float) -> Any:
    """``np.percentile(values, q)`` (its linear method), the same value, for a 1-D array of
    integers or float64 without NaN: the two order statistics around index (n - 1) * q / 100
    from np.partition, then numpy's own interpolation (its ``_lerp``: from the lower value below
    half way, from the upper one from half way on). Why, and what else goes to numpy: as
    :func:`median`."""
    arr = np.asarray(values)
    if not _plain_numbers(arr):
        return np.percentile(arr, q)
    at = (len(arr) - 1) * (q / 100)
    if at >= len(arr) - 1:  # numpy's index -1 for both, and its gamma from that index
        lo = hi = len(arr) - 1
        gamma = at + 1
    else:
        lo = int(np.floor(at))
        hi, gamma = lo + 1, at - lo
    part = np.partition(arr, sorted({lo, hi}))
    below, above = part[lo], part[hi]
    diff = above - below
    return above - diff * (1 - gamma) if gamma >= 0.5 else below + diff * gamma


def _plain_numbers(arr: np.ndarray) -> bool:
    """A 1-D array of some integers or float64 without NaN: what :func:`median` and
    :func:`percentile` take themselves."""
    return arr.ndim == 1 and len(arr) > 0 and (arr.dtype.kind in "iu" or (
        arr.dtype == np.float64 and not np.isnan(arr).any()))


def dense_index(keys: np.ndarray, bound: int) -> np.ndarray | None:
    """Each key's position in ``keys`` (sorted, unique, non-negative integers) at index key, -1
    elsewhere and in a last entry that :func:`positions_in` sends other values to: a gather per
    value instead of a binary search (1.2 M correlation ids: 10 -> 3 ms). None where the largest
    key is not below ``bound`` (a table's row count: the index is then no larger than a 4-byte
    column of it); :func:`positions_in` searches instead."""
    if not len(keys) or int(keys[0]) < 0 or int(keys[-1]) >= bound:
        return None
    index = np.full(int(keys[-1]) + 2, -1, dtype=np.int32)
    index[keys] = np.arange(len(keys), dtype=np.int32)
    return index


def positions_in(keys: np.ndarray, index: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """Each value's position in ``keys`` (sorted, unique, non-negative), -1 where it is none of
    them: through ``index`` (:func:`dense_index` of them) where there is one, else by search."""
    if index is not None:
        return index[np.where((values >= 0) & (values < len(index) - 1), values, len(index) - 1)]
    at = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    return np.where(keys[at] == values, at, -1)


def group_ids(*keys: np.ndarray | Categorical, sort: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group id over the combined ``keys``, and each group's first row.

    ``sort=False``: groups numbered in order of first appearance (pandas ``groupby(sort=False)``);
    ``sort=True``: in order of the keys' values (pandas' default), the first key first."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    inverse = [_key_codes(k, sort) for k in keys]
    radices = [int(codes.max()) + 1 for codes in inverse]
    if len(inverse) == 1:
        combined = inverse[0].astype(np.int64)
    elif float(np.prod(np.array(radices, dtype=float))) < 2.0 ** 62:
        # One mixed-radix number per row (first key most significant): the same order as the
        # keys' values, with one sort below instead of one per key.
        combined = inverse[0].astype(np.int64)
        for codes, radix in zip(inverse[1:], radices[1:]):
            combined = combined * radix + codes
    else:
        combined = np.zeros(n, dtype=np.int64)
        for codes, radix in zip(inverse, radices):  # renumbered after each key so it never overflows
            combined = np.unique(combined * radix + codes, return_inverse=True)[1].ravel()
    uniq, first, inv = np.unique(combined, return_index=True, return_inverse=True)
    inv = inv.ravel()
    if sort:
        return inv.astype(np.int64), first.astype(np.int64)
    order = np.argsort(first, kind="stable")  # group ids by first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inv], first[order].astype(np.int64)


def _key_codes(key: np.ndarray | Categorical, sort: bool) -> np.ndarray:
    """Integer codes of a key column that order as its values do (int32: a key has fewer
    distinct values than 2**31 rows; group_ids combines them in int64)."""
    if isinstance(key, Categorical):
        key = key.strings(None) if sort else key.codes
    arr = np.asarray(key)
    if arr.dtype == object:
        if not sort:
            return first_seen_codes(arr)[0].astype(np.int32)
        values = arr.tolist()
        index = {v: i for i, v in enumerate(sorted(set(values), key=_sort_key))}
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return np.unique(arr, return_inverse=True)[1].ravel().astype(np.int32)


def first_seen_codes(values: Sequence[Any] | np.ndarray,
                     fn: Callable[[Any], Any] | None = None) -> tuple[np.ndarray, list[Any]]:
    """Each row's code and each code's label: ``fn`` of the row's value (computed once per
    distinct value) or the value itself, labels numbered in order of first appearance. One
    dictionary lookup per row, in C: the copies' group keys are object columns of few values."""
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    seen = dict.fromkeys(items)
    mapped = {v: fn(v) for v in seen} if fn is not None else {v: v for v in seen}
    labels = {m: i for i, m in enumerate(dict.fromkeys(mapped.values()))}
    index = {v: labels[m] for v, m in mapped.items()}
    return np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items)), list(labels)


def _sort_key(v: Any) -> tuple[int, Any]:
    return (1, "") if v is None else (0, v)


def group_rows(gid: np.ndarray, n_groups: int | None = None) -> list[np.ndarray]:
    """The row positions of each group (ascending within a group), group by group."""
    n_groups = int(gid.max()) + 1 if n_groups is None and len(gid) else (n_groups or 0)
    order = np.argsort(gid, kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(n_groups + 1))
    return [order[bounds[g]:bounds[g + 1]] for g in range(n_groups)]


def commonest(values: Sequence[Any] | np.ndarray) -> Any:
    """The most frequent value; ties go to the one seen first (pandas ``value_counts`` order).
    None when ``values`` is empty."""
    counts = Counter(values.tolist() if isinstance(values, np.ndarray) else values)
    if not counts:
        return None
    best = max(counts.values())
    return next(v for v, c in counts.items() if c == best)


def commonest_text(values: np.ndarray) -> str:
    """The most frequent non-empty value as text ("" when there is none; None and NaN are
    not values), ties to the one seen first: the shape or producer that names a group."""
    best, most = None, 0
    for value, n in Counter(values.tolist()).items():  # in order of first appearance
        if n > most and value and value == value:  # counted before filtering: one pass in C over the rows
            best, most = value, n
    return "" if best is None else str(best)


def descending_order(values: np.ndarray) -> np.ndarray:
    """The order pandas' ``sort_values(ascending=False)`` gives (no NaN): a quicksort of the
    reversed values, reversed back, which is how it breaks ties."""
    rev = np.arange(len(values))[::-1]
    return rev[values[::-1].argsort(kind="quicksort")][::-1]


def float_values(values: Any) -> np.ndarray:
    """A column as float64, None as NaN (an object column of numbers and None, as the
    per-step tables hold for figures a step may lack)."""
    arr = np.asarray(values)
    if arr.dtype == object:
        return np.array([np.nan if v is None else float(v) for v in arr.tolist()], dtype=float)
    return arr.astype(float)


def known_floats(values: Any) -> np.ndarray:
    """The values that are numbers, as float64 (None and NaN dropped)."""
    arr = float_values(values)
    return arr[~np.isnan(arr)]


def median_of(values: Any) -> float | None:
    """The median of the values that are numbers (None and NaN dropped); None when none are."""
    arr = known_floats(values)
    return float(median(arr)) if len(arr) else None
