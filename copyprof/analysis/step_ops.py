"""The GPU ops of the counted steps as numpy columns, sorted by (step, start): the census's input.

Why a separate gather: a decode trace has millions of GPU ops but only about one copy per
layer per step. Gathering the few columns the census needs once (one lexsort, a handful of
``take``s) and answering every per-copy question with searchsorted / cumulative sums keeps
the census linear and vectorised; the earlier per-step pandas groups cost seconds per GB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from copyprof.analysis.steps import GPU_KINDS, Steps
from copyprof.taxonomy.anchors import anchor_kind
from copyprof.taxonomy.copies import d2d_mask, resolve_bytes_at


_ANCHOR_CODE = {"": 0, "mla": 1, "kda": 2}


@dataclass
class StepOps:
    """GPU ops of the counted steps (``o_*`` positions index these arrays), and their d2d copies.

    step: per op (int32). c_pos: op positions of the d2d copies, in (step, start) order;
    c_step, c_start, c_dur, c_code: their step, start, duration and name code; c_gap: idle
    time after each copy until the next op of the same step starts (>= 0); c_bytes / c_src:
    resolved bytes and byte source; c_next / c_prev: the name of the nearest kernel after /
    before each copy in its step ("" when none). Per-op columns other than ``step`` and the
    anchor counts are not kept: a GB trace has ~10^6 ops and ~10^4 copies."""

    step: np.ndarray
    categories: np.ndarray
    cum_mla: np.ndarray  # cum_mla[i] = MLA anchor ops among the first i ops
    cum_kda: np.ndarray
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

    def step_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step ids (ascending) and, per step, the first op and the first copy (with end sentinels)."""
        ids, first = np.unique(self.step, return_index=True)
        ops = np.append(first, len(self.step))
        copies = np.append(np.searchsorted(self.c_step, ids, side="left"), len(self.c_pos))
        return ids, ops, copies

    def anchor_windows(self, op0: int, bounds: np.ndarray) -> list[str]:
        """Anchor kind ("mla", "kda", "both" or "") of the ops strictly between consecutive
        bounds; the first window starts at the step's first op ``op0``."""
        lo = np.concatenate(([op0], np.asarray(bounds[:-1], dtype=np.int64) + 1)) if len(bounds) else np.array([], dtype=np.int64)
        mla = (self.cum_mla[bounds] - self.cum_mla[lo]) > 0
        kda = (self.cum_kda[bounds] - self.cum_kda[lo]) > 0
        return ["both" if m and k else ("mla" if m else ("kda" if k else "")) for m, k in zip(mla.tolist(), kda.tolist())]


def step_ops(events: pd.DataFrame, steps: Steps, counted: np.ndarray, cus: int | None) -> StepOps:
    on_dev = events["on_gpu"].to_numpy() & events["kind"].isin(GPU_KINDS).to_numpy()
    if steps.device >= 0:
        on_dev &= events["device"].to_numpy() == steps.device
    sel = np.flatnonzero(on_dev & np.isin(steps.step_of, counted))
    start_all = events["start_ns"].to_numpy()
    order = np.lexsort((start_all[sel], steps.step_of[sel]))  # stable: ties keep table order
    rows = sel[order]
    del sel, order
    step = steps.step_of[rows].astype(np.int32 if len(rows) and steps.step_of.max() < 2**31 else np.int64)
    start = start_all[rows]
    codes = events["name"].cat.codes.to_numpy()[rows]
    categories = events["name"].cat.categories.to_numpy(dtype=object)
    is_kernel = (events["kind"] == "kernel").to_numpy()[rows]
    c_pos = np.flatnonzero(d2d_mask(events)[rows])
    c_rows = rows[c_pos]
    del rows
    c_bytes, c_src = resolve_bytes_at(events, c_rows, cus)
    c_dur = events["dur_ns"].to_numpy()[c_rows]
    anchors = np.array([_ANCHOR_CODE[anchor_kind(n)] for n in categories], dtype=np.int8)
    op_anchor = anchors[codes] if len(categories) else np.zeros(len(step), dtype=np.int8)
    return StepOps(
        step=step, categories=categories,
        cum_mla=_cumulative(op_anchor == _ANCHOR_CODE["mla"]), cum_kda=_cumulative(op_anchor == _ANCHOR_CODE["kda"]),
        c_pos=c_pos, c_step=step[c_pos], c_start=start[c_pos], c_dur=c_dur,
        c_gap=_gap_after(step, start, c_pos, c_dur), c_code=codes[c_pos], c_bytes=c_bytes, c_src=c_src,
        c_next=_kernel_names(step, is_kernel, codes, categories, c_pos, after=True),
        c_prev=_kernel_names(step, is_kernel, codes, categories, c_pos, after=False),
    )


def _cumulative(mask: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(mask, dtype=np.int32 if len(mask) < 2**31 else np.int64)))


def _gap_after(step: np.ndarray, start: np.ndarray, at: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Idle time after the ops at ``at`` (durations ``dur``) until the next op of the same
    step starts (>= 0; 0 for a step's last op)."""
    nxt = np.minimum(at + 1, len(step) - 1)
    same = (at + 1 < len(step)) & (step[nxt] == step[at])
    return np.where(same, np.maximum(start[nxt] - (start[at] + dur), 0), 0)


def _kernel_names(step: np.ndarray, is_kernel: np.ndarray, codes: np.ndarray, categories: np.ndarray,
                  at: np.ndarray, *, after: bool) -> np.ndarray:
    """Name of the nearest kernel after (or before) each op position in ``at``, in the same step."""
    kernels = np.flatnonzero(is_kernel)
    out = np.full(len(at), "", dtype=object)
    if not len(kernels) or not len(at):
        return out
    j = np.searchsorted(kernels, at, side="right") if after else np.searchsorted(kernels, at, side="left") - 1
    inside = (j >= 0) & (j < len(kernels))
    k = kernels[np.clip(j, 0, len(kernels) - 1)]
    ok = inside & (step[k] == step[at])
    if len(categories):
        out[ok] = categories[codes[k[ok]]]
    return out
