"""Do graph-launch calls hold up the GPU? Then step periods measure the launch path, not the model.

Why: when PyTorch's kineto is built on rocprofiler-sdk instead of roctracer, every
``hipGraphLaunch`` costs ~270 µs more and GPU occupancy drops from ~97 % to ~75 % (ROCm/ATOM#432,
ROCm/aiter#2511: healthy launches average ~50 µs, their regression guard fails above 150 µs or
below 80 % occupancy). Step periods then carry the profiler's hooks, and an A/B of them can
measure the profiler.

A long launch call alone proves nothing: when the host runs ahead, a launch can block until the
queue has room while the GPU is busy. What matters is GPU time lost *inside* the calls: per
counted step, the idle time
of the GPU during the step's graph-launch calls, within the window from the first call (or the
step's first GPU op) to the step's last GPU op. The GPU's busy time is the union of the GPU ops
of that step and the two before it (StepBusy; work outside the counted steps is not looked at).
When that idle time is at
least ``LAUNCH_BOUND_SHARE`` of the step period (median over steps), the launches are said to
hold up the GPU and the A/B does not pick the step period as its best measure.

Seen on CUDA too: the H200 replica captures (CUPTI, torch 2.11 + CUDA 13) spend 1.7–4.2 ms per
step inside ``cudaGraphLaunch`` with the GPU idle until the call returns; the Qwen3-Next pair's
profiled step period is 7.59 ms against 5.47 ms timed without the profiler (timing.json).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.health.graph_launches import GraphLaunches
from copyprof.analysis.results import LaunchOverhead, known
from copyprof.analysis.steps.rows import ROWS_PER_PASS
from copyprof.columns import Columns
from copyprof.grouping import float_values, group_ids, median, median_of, percentile

# Healthy graph replay leaves the GPU idle ~3 % of a step (ROCm/ATOM#432: 97 % occupancy; the two
# MI300X roctracer samples here lose 2.9 % inside their hipGraphLaunch). A tenth of the step lost
# inside launch calls is over three times that: the calls, not the model, set the period.
LAUNCH_BOUND_SHARE = 0.1


def busy_timeline(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the intervals [start, end) as disjoint sorted intervals (S, E) and C, the
    busy time before each interval: what ``busy_between`` reads."""
    if not len(start):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    if len(start) > 1 and (start[1:] < start[:-1]).any():
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    begins = np.concatenate(([0], np.flatnonzero(start[1:] > reach[:-1]) + 1))
    s = start[begins]
    e = reach[np.append(begins[1:], len(start)) - 1]
    c = np.concatenate(([0], np.cumsum(e - s)[:-1]))
    return s, e, c


def busy_between(timeline: tuple[np.ndarray, np.ndarray, np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Busy time of the GPU within each [a, b) (0 where b <= a)."""
    s, e, c = timeline
    if not len(s):
        return np.zeros(len(a), dtype=np.int64)

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, t, side="right") - 1
        jj = np.maximum(j, 0)
        return np.where(j >= 0, c[jj] + np.clip(np.minimum(t, e[jj]) - s[jj], 0, None), 0)

    return np.where(b > a, upto(b) - upto(a), 0)


LOOK_BACK_STEPS = 2  # a window's busy time counts its step's ops and those of the steps before it


class StepBusy:
    """The GPU's busy time within windows of the counted steps, a few steps at a time.

    Why not one timeline of every op: on a 1 GB trace that is ~1 M intervals and ~60 MB of
    temporaries (measured); a window only meets the ops of its own step and, when the host runs
    ahead, of the steps just before it (``LOOK_BACK_STEPS``), so each chunk of steps builds its
    own small timeline. ``rows``: the counted steps' ops in (step, start) order; ``first``: each
    step's first position in ``rows``; ``step_ids``: the steps, ascending."""

    def __init__(self, start: np.ndarray, dur: np.ndarray, rows: np.ndarray, step_ids: np.ndarray,
                 first: np.ndarray) -> None:
        self.start, self.dur, self.rows = start, dur, rows
        self.step_ids = np.asarray(step_ids, dtype=np.int64)
        self.bounds = np.append(np.asarray(first, dtype=np.int64), len(rows))

    def between(self, step: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Busy time within [a, b) of windows that belong to ``step`` (ids of counted steps)."""
        k = np.searchsorted(self.step_ids, step)
        out = np.zeros(len(a), dtype=np.int64)
        k0 = 0
        while k0 < len(self.step_ids):
            k1 = int(np.searchsorted(self.bounds, self.bounds[k0] + ROWS_PER_PASS, side="right")) - 1
            k1 = min(max(k1, k0 + 1), len(self.step_ids))
            mine = (k >= k0) & (k < k1)
            if mine.any():
                lo, hi = int(self.bounds[max(k0 - LOOK_BACK_STEPS, 0)]), int(self.bounds[k1])
                part = self.rows[lo:hi]
                start = self.start[part].astype(np.int64)
                timeline = busy_timeline(start, start + self.dur[part])
                out[mine] = busy_between(timeline, a[mine], b[mine])
            k0 = k1
        return out


def launch_overhead(launches: GraphLaunches, table: Columns, busy: StepBusy, *,
                    kineto_on_rocprofiler_sdk: bool = False) -> LaunchOverhead | None:
    """The overhead record over the counted steps in ``table`` (step, start_ns, end_ns,
    period_ns), with ``busy`` the GPU's busy time in their windows. ``kineto_on_rocprofiler_sdk``:
    the trace is a kineto trace on rocprofiler-sdk, whose known launch cost the message names."""
    if not len(launches):
        return None
    counted = np.isin(launches.step, table["step"])
    calls = launches.dur_ns[counted] if counted.any() else launches.dur_ns
    out = LaunchOverhead(
        graph_launches=len(launches), launches_per_step=None, call_median_ms=known(median(calls) / 1e6),
        call_p90_ms=known(percentile(calls, 90) / 1e6), call_max_ms=known(calls.max() / 1e6),
        per_step_ms=None, gpu_idle_in_launch_ms=None, share_of_step=None, gpu_busy_share=None)
    if not counted.any():
        return out
    per = _per_step(launches, counted, table, busy)
    out.launches_per_step = median_of(per.launches)
    out.per_step_ms = known(_scaled(median_of(per.call_ns), 1e6))
    out.gpu_idle_in_launch_ms = known(_scaled(median_of(per.idle_ns), 1e6))
    out.share_of_step = known(median_of(per.share))
    out.gpu_busy_share = known(median_of(per.busy))
    if out.share_of_step is not None and out.share_of_step >= LAUNCH_BOUND_SHARE:
        out.launch_bound = True
        out.message = _message(out, launches.names[0] if launches.names else "graph-launch", per, kineto_on_rocprofiler_sdk)
    return out


@dataclass
class _PerStep:
    """The counted steps with graph launches, by ascending step id: each one's launch calls, their
    time, the GPU's idle time inside them, its share of the step (NaN where the step has no
    length) and the GPU's busy share; ``period_ns`` the step's length (its period, else the
    window from its first launch to its end)."""

    step: np.ndarray
    launches: np.ndarray
    call_ns: np.ndarray
    idle_ns: np.ndarray
    share: np.ndarray
    busy: np.ndarray
    period_ns: np.ndarray


def _scaled(x: float | None, scale: float) -> float | None:
    return None if x is None else x / scale


def _per_step(launches: GraphLaunches, counted: np.ndarray, table: Columns, busy: StepBusy) -> _PerStep:
    idx = np.flatnonzero(counted)
    step_ids = np.asarray(table["step"])
    order = np.argsort(step_ids, kind="stable")
    step = launches.step[idx]
    at = order[np.searchsorted(step_ids, step, sorter=order)]  # each call's row of its step in ``table``
    lo_step = np.asarray(table["start_ns"])[at].astype(np.int64)
    hi_step = np.asarray(table["end_ns"])[at].astype(np.int64)
    start, end, dur = launches.start_ns[idx], launches.end_ns[idx], launches.dur_ns[idx]
    gid, first = group_ids(step, sort=True)  # the steps ascending
    n_steps = len(first)
    first_call = np.full(n_steps, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_call, gid, start)
    lo = np.minimum(first_call[gid], lo_step)
    a = np.maximum(start, lo)
    b = np.minimum(end, hi_step)
    per_step = step[first]
    n_launches = np.bincount(gid, minlength=n_steps).astype(np.int64)
    call_ns = _group_sum(gid, dur, n_steps)
    per_lo = np.full(n_steps, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(per_lo, gid, lo)
    per_hi = np.full(n_steps, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(per_hi, gid, hi_step)
    row = at[first]  # each step's row in ``table``
    period = float_values(table["period_ns"])[row]
    window = (per_hi - per_lo).astype(float)
    span = np.where(~np.isnan(period) & (period > 0), period, window)
    step_start = np.asarray(table["start_ns"])[row].astype(np.int64)
    # Both questions (busy time inside each call, busy time in each step) in one pass over the
    # steps' ops: each chunk's timeline is built once.
    n_calls = len(idx)
    busy_ns = busy.between(np.concatenate((step, per_step)), np.concatenate((a, step_start)),
                           np.concatenate((b, step_start + np.nan_to_num(span, nan=0.0).astype(np.int64))))
    idle = np.where(b > a, (b - a) - busy_ns[:n_calls], 0)
    idle_ns = _group_sum(gid, idle, n_steps)
    in_step = busy_ns[n_calls:]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(span > 0, idle_ns / span, np.nan)
        busy_share = np.where(span > 0, in_step / span, np.nan)
    return _PerStep(step=per_step, launches=n_launches, call_ns=call_ns, idle_ns=idle_ns, share=share, busy=busy_share,
                    period_ns=span)


def _group_sum(gid: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer sums per group (exact: no float weights)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, gid, values.astype(np.int64))
    return out


def _message(o: LaunchOverhead, name: str, per: _PerStep, kineto_sdk: bool = False) -> str:
    step_ms = float(median_of(per.period_ns) or 0.0) / 1e6
    busy = f"; GPU busy {o.gpu_busy_share:.0%} of the step" if o.gpu_busy_share is not None else ""
    known_cause = ("kineto on rocprofiler-sdk adds ~270 µs per hipGraphLaunch: ROCm/ATOM#432, ROCm/aiter#2511"
                   if kineto_sdk else "a timing without the profiler shows the step without them")
    return (f"graph-launch calls hold up the GPU: it idles {o.gpu_idle_in_launch_ms:.3f} ms of a {step_ms:.3f} ms step "
            f"({o.share_of_step:.0%}, median over steps) inside {name} calls (median call {o.call_median_ms:.3f} ms, "
            f"p90 {o.call_p90_ms:.3f} ms{busy}): step periods measure the launch path and the profiler's hooks on it "
            f"({known_cause}), not the model; an A/B relies on GPU span or timing instead")
