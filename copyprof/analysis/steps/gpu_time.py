"""The GPU's own time per step: busy time and graph-replay span.

Why: the step period, the GPU span (first to last GPU op of the step) and the client TPOT all
carry host time — how long the CPU took to schedule, prepare and launch the step, and how long
the GPU sat idle waiting for it. Between two boots of identical code that host time moves by
tenths of a millisecond, while the GPU's work per step is the same kernels on the same shapes.
A patch that removes GPU work (a copy) is judged on the GPU's time:

* **GPU busy** — the union of the step's GPU op intervals (kernels, memcpys, memsets) on the
  step's device, every stream together: a moment when two streams run at once counts once, a
  moment when no op runs counts not at all. Removing a copy of d µs shortens it by d µs (its
  dispatch gap was idle time already).
* **graph-replay span** — from the first to the last GPU op that the step's graph launch(es)
  ran (ops whose correlation id is a ``cudaGraphLaunch`` / ``hipGraphLaunch``), idle gaps
  between graph nodes included: in a replay the GPU runs node after node without the host, so
  a removed copy also takes its dispatch gap with it.

Which GPU work belongs to a step is the step rule's answer (analysis/steps/segment.py: the
annotation projected through correlation ids, graph-launch groups, or idle gaps), the same ops
the census counts.
"""
from __future__ import annotations

import numpy as np

from copyprof.analysis.steps.rows import ROWS_PER_PASS


def gpu_time_per_step(start_all: np.ndarray, dur_all: np.ndarray, rows: np.ndarray, first: np.ndarray,
                      replayed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each step's GPU busy time (ns, int64) and graph-replay span (ns, float; NaN where the
    step's graph launches ran nothing the trace shows, or it launched none).

    ``rows``: table positions of the counted steps' ops in (step, start) order; ``first``: each
    step's first position in ``rows`` (ascending, every step with at least one op);
    ``replayed``: per position in ``rows``, whether a graph launch ran that op. Worked on chunks
    of whole steps of about ``ROWS_PER_PASS`` ops, so a 1 GB trace's millions of ops need no
    table-sized temporaries."""
    n_steps = len(first)
    busy = np.zeros(n_steps, dtype=np.int64)
    replay = np.full(n_steps, np.nan)
    bounds = np.append(np.asarray(first, dtype=np.int64), len(rows))
    k0 = 0
    while k0 < n_steps:
        k1 = int(np.searchsorted(bounds, bounds[k0] + ROWS_PER_PASS, side="right")) - 1
        k1 = min(max(k1, k0 + 1), n_steps)
        lo, hi = int(bounds[k0]), int(bounds[k1])
        part = rows[lo:hi]
        start = start_all[part].astype(np.int64)
        end = start + np.maximum(dur_all[part].astype(np.int64), 0)
        local = bounds[k0:k1 + 1] - lo
        busy[k0:k1] = _union_lengths(start, end, local)
        if replayed is not None:
            replay[k0:k1] = _replay_spans(start, end, local[:-1], replayed[lo:hi])
        k0 = k1
    return busy, replay


def _union_lengths(start: np.ndarray, end: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per segment [bounds[k], bounds[k+1]) of start-sorted intervals, the length of their union.

    Each interval adds what reaches past every earlier interval of its segment:
    max(0, end - max(start, reach of the ones before)). The running reach restarts at each
    segment by offsetting segment k by k times the chunk's time range (one cumulative max)."""
    n = len(start)
    if not n:
        return np.zeros(len(bounds) - 1, dtype=np.int64)
    base = int(start.min())
    width = int(end.max()) - base + 1
    seg = np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))
    if (len(bounds) - 1) * width < (1 << 62):
        offset = seg * width
        reach = np.maximum.accumulate(end - base + offset) - offset + base
    else:  # a chunk spanning more time than int64 offsets allow: one segment at a time
        reach = np.concatenate([np.maximum.accumulate(end[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    before = np.empty(n, dtype=np.int64)
    before[1:] = reach[:-1]
    firsts = bounds[:-1][bounds[:-1] < n]
    before[firsts] = start[firsts]
    added = np.clip(end - np.maximum(start, before), 0, None)
    return np.add.reduceat(added, bounds[:-1]) if len(bounds) > 1 else np.zeros(0, dtype=np.int64)


def _replay_spans(start: np.ndarray, end: np.ndarray, first: np.ndarray, replayed: np.ndarray) -> np.ndarray:
    """First-to-last span of each segment's graph-replayed ops (NaN where it has none)."""
    big = np.iinfo(np.int64).max
    lo = np.minimum.reduceat(np.where(replayed, start, big), first)
    hi = np.maximum.reduceat(np.where(replayed, end, -big), first)
    has = np.add.reduceat(replayed.astype(np.int64), first) > 0
    return np.where(has, (hi - lo).astype(float), np.nan)
