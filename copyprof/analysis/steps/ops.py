"""The GPU ops of the counted steps as numpy columns, sorted by (step, start): the census's input.

Why a separate gather: a decode trace has millions of GPU ops but only about one copy per
layer per step. Gathering the few columns the census needs once (one lexsort, a handful of
``take``s) and answering every per-copy question with searchsorted / cumulative sums keeps
the census linear and vectorised; the earlier per-step pandas groups cost seconds per GB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.steps.segment import GPU_KINDS, ROWS_PER_PASS, Steps, positions
from copyprof.columns import Columns, filled
from copyprof.taxonomy.anchors import anchor_kind
from copyprof.taxonomy.copies import d2d_at, resolve_bytes_at

_ANCHOR_CODE = {"": 0, "mla": 1, "kda": 2}
MAX_RUNS = 1 << 16  # more runs of one step than this: one argsort beats a list of slices


@dataclass
class StepOps:
    """GPU ops of the counted steps (``o_*`` positions index them, in (step, start) order),
    and their d2d copies.

    step_ids / op_first: the counted steps (ascending) and each one's first op position;
    n_ops: the number of ops. mla_at / kda_at: positions of the MLA / KDA anchor ops. c_pos:
    op positions of the d2d copies, ascending; c_step, c_start, c_dur, c_code: their step,
    start, duration and name code; c_gap: idle time after each copy until the next op of the
    same step starts (>= 0); c_bytes / c_src: resolved bytes and byte source; c_next / c_prev:
    the name of the nearest kernel after / before each copy in its step ("" when none).
    o_code / o_struct (only when asked for, for the layer map): every op's name code and
    whether it carries structure (a kernel or memset that is not a copy): 5 bytes per op."""

    categories: np.ndarray
    step_ids: np.ndarray
    op_first: np.ndarray
    n_ops: int
    mla_at: np.ndarray
    kda_at: np.ndarray
    c_pos: np.ndarray
    c_step: np.ndarray
    c_start: np.ndarray
    c_dur: np.ndarray
    c_gap: np.ndarray
    c_code: np.ndarray
    c_bytes: np.ndarray
    c_src: np.ndarray
    c_next: np.ndarray
    c_prev: np.ndarray
    o_code: np.ndarray | None = None
    o_struct: np.ndarray | None = None
    o_stream: np.ndarray | None = None  # every op's GPU stream (with o_code): a copy's producer is on its stream
    c_row: np.ndarray | None = None  # the copies' positions in the event table
    o_row: np.ndarray | None = None  # every op's position in the event table

    def step_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step ids (ascending) and, per step, the first op and the first copy (with end sentinels)."""
        ops = np.append(self.op_first, self.n_ops)
        copies = np.append(np.searchsorted(self.c_step, self.step_ids, side="left"), len(self.c_pos))
        return self.step_ids, ops, copies

    def anchor_windows(self, op0: int, bounds: np.ndarray) -> list[str]:
        """Anchor kind ("mla", "kda", "both" or "") of the ops strictly between consecutive
        bounds; the first window starts at the step's first op ``op0``."""
        lo = np.concatenate(([op0], np.asarray(bounds[:-1], dtype=np.int64) + 1)) if len(bounds) else np.array([], dtype=np.int64)
        hi = np.asarray(bounds, dtype=np.int64)
        mla = _count_in(self.mla_at, lo, hi) > 0
        kda = _count_in(self.kda_at, lo, hi) > 0
        return ["both" if m and k else ("mla" if m else ("kda" if k else "")) for m, k in zip(mla.tolist(), kda.tolist())]


def _count_in(positions: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many of the sorted ``positions`` lie in [lo, hi) (per pair)."""
    return np.searchsorted(positions, hi, side="left") - np.searchsorted(positions, lo, side="left")


def step_ops(events: Columns, steps: Steps, counted: np.ndarray, cus: int | None,
             per_op: bool = False) -> StepOps:
    rows, op_first, step_ids = _counted_rows(events, steps, counted)
    n_ops = len(rows)
    start_all = events["start_ns"]
    codes_all = events["name"].codes
    categories = events["name"].categories
    kind = events["kind"]
    kind_codes = kind.codes[rows]
    o_codes = codes_all[rows]  # gathered once: the copies, the anchors and the layer map read them
    is_kernel = kind_codes == kind.code_of("kernel")  # a compare, not a gather through per-code flags
    c_pos = np.flatnonzero(d2d_at(events, rows, kind_codes, o_codes))
    c_rows = rows[c_pos]
    c_bytes, c_src = resolve_bytes_at(events, c_rows, cus)
    c_dur = events["dur_ns"][c_rows]
    c_start = start_all[c_rows]
    anchors = np.array([_ANCHOR_CODE[anchor_kind(n)] for n in categories], dtype=np.int8)
    op_anchor = anchors[o_codes] if len(categories) else np.zeros(n_ops, dtype=np.int8)
    mla_at = np.flatnonzero(op_anchor == _ANCHOR_CODE["mla"])
    kda_at = np.flatnonzero(op_anchor == _ANCHOR_CODE["kda"])
    del op_anchor
    c_k = np.searchsorted(op_first, c_pos, side="right") - 1  # each copy's step (index into step_ids)
    c_end = np.append(op_first[1:], n_ops)[c_k]  # one past the last op of the copy's step
    nxt = np.minimum(c_pos + 1, max(n_ops - 1, 0))
    c_gap = np.where(c_pos + 1 < c_end, np.maximum(start_all[rows[nxt]] - (c_start + c_dur), 0), 0)
    names = (rows, codes_all, categories)
    o_code = o_struct = o_stream = None
    if per_op:
        o_code = o_codes
        o_stream = events["stream"][rows]
        o_struct = is_kernel | (kind_codes == kind.code_of("memset"))
        o_struct[c_pos] = False
    del kind_codes
    return StepOps(
        categories=categories, step_ids=step_ids, op_first=op_first, n_ops=n_ops, mla_at=mla_at, kda_at=kda_at,
        c_pos=c_pos, c_step=step_ids[c_k], c_start=c_start, c_dur=c_dur, c_gap=c_gap, c_code=codes_all[c_rows],
        c_bytes=c_bytes, c_src=c_src,
        c_next=_kernel_names(is_kernel, op_first, c_pos, c_k, names, after=True),
        c_prev=_kernel_names(is_kernel, op_first, c_pos, c_k, names, after=False),
        o_code=o_code, o_struct=o_struct, o_stream=o_stream, c_row=c_rows, o_row=rows,
    )


def _counted_rows(events: Columns, steps: Steps, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Table positions of the counted steps' GPU ops on the step device, in (step, start)
    order, ties in table order — what a stable ``lexsort((start, step))`` gives, without its
    ~25 MB of sort keys and indices on a 1 GB trace — with each step's first position and the
    step ids (ascending). Rows come nearly sorted (a trace lists a stream's work in time
    order), so runs of one step are reordered only when steps interleave, then each step that
    is out of time order is sorted by start on its own."""
    rows = positions(_wanted_rows(events, steps, counted))
    runs, run_step = _runs(steps.step_of[rows])  # runs of rows of one step, in table order
    if len(run_step) > 1 and (run_step[1:] < run_step[:-1]).any():
        if len(run_step) <= MAX_RUNS:  # a stable sort of the runs by step keeps each step's rows in table order
            by_step = np.argsort(run_step, kind="stable")
            lengths = np.diff(runs)[by_step]
            rows = np.concatenate([rows[runs[i] : runs[i + 1]] for i in by_step.tolist()])
            runs, run_step = np.concatenate(([0], np.cumsum(lengths))), run_step[by_step]
        else:  # steps interleave op by op: one stable sort of all rows
            rows = rows[np.argsort(steps.step_of[rows], kind="stable")]
            runs, run_step = _runs(steps.step_of[rows])
    first_run = np.concatenate(([True], run_step[1:] != run_step[:-1]))[: len(run_step)]  # runs that start a step
    bounds = np.append(runs[:-1][first_run], len(rows)).astype(np.int64)
    start = events["start_ns"]
    for k in _steps_out_of_time_order(start, rows, bounds):
        part = rows[bounds[k] : bounds[k + 1]]
        part[:] = part[np.argsort(start[part], kind="stable")]
    return rows, bounds[:-1], run_step[first_run].astype(np.int64)


def _runs(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where runs of equal values start (then the end), and each run's value."""
    if not len(step):
        return np.zeros(1, dtype=np.int64), step[:0]
    runs = np.concatenate(([0], np.flatnonzero(step[1:] != step[:-1]) + 1, [len(step)]))
    return runs, step[runs[:-1]]


def _wanted_rows(events: Columns, steps: Steps, counted: np.ndarray) -> np.ndarray:
    """Mask of the GPU ops on the step device in a counted step, built a block of rows at a
    time (through the kind column's codes and a lookup by step: no table-sized temporaries)."""
    step_of = steps.step_of
    on_gpu = events["on_gpu"]
    kind = events["kind"]
    kind_codes = kind.codes
    gpu_kind = kind.flags(set(GPU_KINDS).__contains__)
    device = events["device"] if steps.device >= 0 else None
    counted = np.asarray(counted, dtype=np.int64)
    wanted = np.zeros(max(int(step_of.max(initial=-1)), int(counted.max(initial=-1))) + 2, dtype=bool)
    wanted[counted[counted >= 0] + 1] = True  # indexed by step + 1: row -1 (no step) is never wanted
    mask = np.empty(len(on_gpu), dtype=bool)
    for lo in range(0, len(on_gpu), ROWS_PER_PASS):
        block = slice(lo, lo + ROWS_PER_PASS)
        mask[block] = on_gpu[block] & gpu_kind[kind_codes[block]] & wanted[step_of[block] + 1]
        if device is not None:
            mask[block] &= device[block] == steps.device
    return mask


def _steps_out_of_time_order(start: np.ndarray, rows: np.ndarray, bounds: np.ndarray) -> list[int]:
    """Indexes of the steps (``bounds``: first row of each, then the end) with an op that
    starts before the op listed ahead of it; read a block at a time."""
    found: set[int] = set()
    for lo in range(0, max(len(rows) - 1, 0), ROWS_PER_PASS):
        hi = min(lo + ROWS_PER_PASS, len(rows) - 1)
        t = start[rows[lo : hi + 1]]
        back = lo + np.flatnonzero(t[1:] < t[:-1])  # row back+1 starts before row back
        step_of_next = np.searchsorted(bounds, back + 1, side="right") - 1
        inside = bounds[step_of_next] != back + 1  # not the first row of a step
        found.update(step_of_next[inside].tolist())
    return sorted(found)


NEAR_OPS = 64  # ops looked at on each side of a copy before its step's kernels are indexed


def _kernel_names(is_kernel: np.ndarray, op_first: np.ndarray, at: np.ndarray, at_step: np.ndarray,
                  names: tuple[np.ndarray, np.ndarray, np.ndarray], *, after: bool) -> np.ndarray:
    """Name of the nearest kernel after (or before) each op position in ``at`` (whose steps,
    as indexes into ``op_first``, are ``at_step``), in the same step ("" when the step has
    none there). ``is_kernel``: per op; ``names``: (rows, table name codes, categories).

    The neighbour is nearly always a few ops away, so the ops next to the copies are looked at
    one offset at a time (NEAR_OPS at most); only copies still without a kernel then get a
    search in the positions of every kernel, which on a 1 GB trace are 4 MB at the analysis'
    memory peak when taken for all."""
    rows, codes_all, categories = names
    out = filled(len(at), "")
    if not len(at) or not len(categories):
        return out
    ends = np.append(op_first[1:], len(is_kernel))
    limit = ends[at_step] if after else op_first[at_step]  # the step's end (exclusive) or first op
    found = np.full(len(at), -1, dtype=np.int64)
    pending = np.arange(len(at))
    step = 1 if after else -1
    for d in range(1, NEAR_OPS + 1):
        pos = at[pending].astype(np.int64) + step * d
        inside = pos < limit[pending] if after else pos >= limit[pending]
        hit = inside & is_kernel[np.clip(pos, 0, len(is_kernel) - 1)]
        found[pending[hit]] = pos[hit]
        pending = pending[inside & ~hit]
        if not len(pending):
            break
    if len(pending):  # kernels far away: a search among the positions of every kernel
        kernels = np.flatnonzero(is_kernel)
        j = np.searchsorted(kernels, at[pending], side="right") if after else \
            np.searchsorted(kernels, at[pending], side="left") - 1
        k = kernels[np.clip(j, 0, max(len(kernels) - 1, 0))] if len(kernels) else j
        ok = (j >= 0) & (j < len(kernels)) & ((k < limit[pending]) if after else (k >= limit[pending]))
        found[pending[ok]] = k[ok]
    hit = found >= 0
    out[hit] = categories[codes_all[rows[found[hit]]]]
    return out
    at_k = at.astype(kernels.dtype)  # same dtype: searchsorted would otherwise cast (copy) all of kernels
    j = np.searchsorted(kernels, at_k, side="right") if after else np.searchsorted(kernels, at_k, side="left") - 1
    inside = (j >= 0) & (j < len(kernels))
    k = kernels[np.clip(j, 0, len(kernels) - 1)]
    ok = inside & (np.searchsorted(op_first, k, side="right") - 1 == at_step)
    if len(categories):
        out[ok] = categories[codes_all[rows[k[ok]]]]
    return out
