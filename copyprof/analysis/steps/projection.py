"""Step ranges projected onto GPU work through the correlation ids of the runtime calls.

Why correlations and not times: on ROCm, graph kernels may run as a burst after the CPU marker
(sglang #31545), so a kernel's GPU time says nothing about the step whose CPU range launched it;
the runtime call's correlation id does. Why every thread of the process: a ``ProfilerStep#N``
range on the main thread owns what autograd's backward thread and helper threads launched
inside its window.
"""
from __future__ import annotations

import numpy as np

from copyprof.analysis.steps.rows import ROWS_PER_PASS, positions, step_dtype
from copyprof.columns import Columns
from copyprof.grouping import dense_index, distinct, positions_in
from copyprof.taxonomy.copies import d2d_mask


def project_through_correlations(events: Columns, ann: Columns, gpu_mask: np.ndarray,
                                  step_of: np.ndarray) -> np.ndarray:
    """Set ``step_of`` of the GPU work launched inside each CPU step range, matched through the
    correlation ids of the runtime calls; returns the table positions of the GPU ops that only
    other threads than the range's own launched (empty when the annotating thread alone gives
    the same steps).

    A step owns what the process launched inside its window: a ``ProfilerStep#N`` range on the
    main thread owns the kernels autograd's backward thread and helper threads launched
    meanwhile. A call is claimed first by a range of its own thread (so that ranges which
    several threads annotate keep each thread's own calls), and otherwise by any range of the
    process whose window holds it; among ranges, the first to claim an id wins.

    numpy columns only (a copy of the runtime rows as a frame cost ~400 MB on a 1 GB dense
    trace), int32 positions, and no sort of calls already in time order: 81 -> ~35 MB of
    temporaries on the 1.3 M runtime calls of a 1 GB eager A100 trace."""
    corr = events["correlation"]
    rt = positions((events["kind"] == "runtime") & (corr >= 0))
    if not len(rt):
        return rt
    keys, step_by_key, by_other = _claims(events, ann, rt, corr)
    if not len(keys):
        return rt[:0]
    if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():  # ids usually grow with time: sorted, unique
        keys, first = np.unique(keys, return_index=True)  # first claim of each id
        step_by_key, by_other = step_by_key[first], by_other[first]
    from_other = _assign_gpu_steps(corr, gpu_mask, step_of, keys, step_by_key, by_other)
    return np.concatenate(from_other) if from_other else rt[:0]


def _claims(events: Columns, ann: Columns, rt: np.ndarray,
            corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(correlation ids, the step that claimed each, whether a range of another thread did) of
    the runtime calls at table positions ``rt``, thread by thread; all own-thread claims come
    first, so that they win an id that is claimed twice."""
    rt_tid = events["stream"][rt]
    start = events["start_ns"]
    ann_tid = ann["stream"]
    ann_lo = ann["start_ns"]
    ann_hi = ann_lo + ann["dur_ns"]
    _, first_at = np.unique(rt_tid, return_index=True)
    threads = rt_tid[np.sort(first_at)].tolist()  # in order of first appearance
    own_keys, own_steps, other_keys, other_steps = [], [], [], []
    for tid in threads:
        mine = np.flatnonzero(ann_tid == tid)  # the step ranges of this thread, in time order
        rest = np.flatnonzero(ann_tid != tid)  # the process's other step ranges
        rows = rt if len(threads) == 1 else rt[rt_tid == tid]  # this thread's runtime calls (table rows)
        starts = start[rows]
        if len(starts) > 1 and (starts[1:] < starts[:-1]).any():  # usually listed in time order already
            order = np.argsort(starts, kind="stable")
            rows, starts = rows[order], starts[order]
            del order
        rt_step = np.full(len(rows), -1, dtype=step_dtype(len(ann)))
        _claim(rt_step, starts, ann_lo[mine], ann_hi[mine], mine)
        own = rt_step >= 0
        _claim(rt_step, starts, ann_lo[rest], ann_hi[rest], rest)
        del starts
        other = (rt_step >= 0) & ~own
        own_keys.append(corr[rows[own]])
        own_steps.append(rt_step[own])
        other_keys.append(corr[rows[other]])
        other_steps.append(rt_step[other])
    keys = np.concatenate(own_keys + other_keys)
    step_by_key = np.concatenate(own_steps + other_steps)
    by_other = np.repeat([False, True], [sum(map(len, own_keys)), sum(map(len, other_keys))])
    return keys, step_by_key, by_other


def _assign_gpu_steps(corr: np.ndarray, gpu_mask: np.ndarray, step_of: np.ndarray, keys: np.ndarray,
                      step_by_key: np.ndarray, by_other: np.ndarray) -> list[np.ndarray]:
    """Set ``step_of`` of the GPU ops whose correlation id is in ``keys`` (sorted, unique) to its
    step; returns, block by block, the positions of those that only another thread's call claimed."""
    from_other = []
    index = dense_index(keys, len(corr))
    for lo in range(0, len(corr), ROWS_PER_PASS):  # blockwise: the lookups' temporaries stay small
        gpu = lo + np.flatnonzero(gpu_mask[lo : lo + ROWS_PER_PASS])
        at = positions_in(keys, index, corr[gpu])
        hit = at >= 0
        step_of[gpu[hit]] = step_by_key[at[hit]]
        if by_other.any():
            from_other.append(gpu[hit][by_other[at[hit]]])
    return from_other


def _claim(rt_step: np.ndarray, starts: np.ndarray, lo_ns: np.ndarray, hi_ns: np.ndarray, index: np.ndarray) -> None:
    """Give the calls (``starts`` sorted) inside each range [lo, hi) the range's ``index``
    where no earlier range claimed them."""
    if not len(index) or not len(starts):
        return
    if len(index) > 1 and (lo_ns[1:] >= hi_ns[:-1]).all():  # disjoint ranges in time order (the usual case): one lookup
        at = np.searchsorted(lo_ns, starts, side="right") - 1
        inside = (at >= 0) & (starts < hi_ns[np.maximum(at, 0)]) & (rt_step < 0)
        rt_step[inside] = index[at[inside]]
        return
    lo = np.searchsorted(starts, lo_ns, side="left")
    hi = np.searchsorted(starts, hi_ns, side="left")
    for a, b, i in zip(lo.tolist(), hi.tolist(), index.tolist()):
        rt_step[a:b] = np.where(rt_step[a:b] < 0, i, rt_step[a:b])


def other_thread_note(events: Columns, from_other: np.ndarray, step_of: np.ndarray) -> str:
    """Say how the steps differ from what the annotating thread alone launched."""
    copies = int(d2d_mask(events[["kind", "name", "copy_dir"]].take(from_other)).sum())
    steps = len(distinct(step_of[from_other]))
    counted = int((step_of >= 0).sum())
    return (f"{len(from_other):,} of the {counted:,} GPU ops in the steps ({copies:,} device-to-device copies) were "
            f"launched inside the step windows by other threads of the process than the one with the step ranges "
            f"(autograd's backward thread, helper threads), in {steps} step(s); they are counted. The annotating "
            f"thread alone launched {counted - len(from_other):,} ops.")
