"""Steps of a GPU-only timeline (rocprofv3 CSV without markers): cut at the idle gaps that stand out.

A decode step's kernels run back to back (≤ 1-2 µs apart in graph replay), and between steps
the GPU idles while the host schedules, samples and prepares the next inputs. So the timeline
is cut at a gap that stands out (at least ``_STANDOUT`` times the next smaller gap) and that is
``RELATIVE_GAP`` times the gaps it leaves inside the segments (their 95th percentile) — a rule
relative to the trace, not a fixed length: a fast engine's step gap is tens of µs (43 µs in a
K3 timeline), a slow one's milliseconds. The segments count as steps only when one size repeats
(``MIN_REPEATS`` times, alone the most common), holds at least ``MIN_KERNELS`` kernels, and the
steps of that size hold at least ``MIN_COVERED`` of the GPU events.

A step may hold more gaps as long: on the corpus's real vLLM CUDA-graph timelines with the host
side removed, the GPU also idles inside each step while ``cudaGraphLaunch`` returns (~1 ms, as
long as the gap between steps), and no cut then gives segments of one repeating size: the rule
finds no steps there and says so, rather than guess which gap ends a step. The ratios are
chosen, not measured; the note of every cut says what was found.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from copyprof.grouping import median, percentile

MIN_GAP_NS = 2_000  # shorter than a kernel launch: not idle time
RELATIVE_GAP = 10.0
MIN_REPEATS = 3
MIN_KERNELS = 10
# The repeating steps must be most of the timeline: a decode window is its steps, bar a
# warm-up and a tail. On the corpus's real vLLM timelines with the host side removed, a
# size that repeats in 3 of 25 or 7 of 24 segments was a part of a step, not a step.
MIN_COVERED = 0.5
_STANDOUT = 3.0  # a threshold candidate is a gap at least this many times the next smaller one


@dataclass
class GapSteps:
    """Per event (in the order given): its step (-1 none), the steps that repeat the modal
    form (decode), and the notes and warnings that say how they were found."""

    step_of: np.ndarray
    n_steps: int
    is_decode: list[bool]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def cut_at_idle_gaps(starts: np.ndarray, ends: np.ndarray, is_kernel: np.ndarray) -> tuple[GapSteps | None, str]:
    """Steps of GPU events sorted by start, or None and why none were taken. Each gap that
    stands out is tried as the cut, most outstanding first; the first that meets the rules wins."""
    if len(starts) < 4:
        return None, f"{len(starts)} GPU events"
    gaps = starts[1:] - np.maximum.accumulate(ends)[:-1]
    candidates = _gap_thresholds(gaps)
    if not candidates:
        return None, "no idle gap stands out"
    first_why = ""
    for cut in candidates:
        seg_id = np.concatenate(([0], np.cumsum(gaps >= cut)))
        inner = gaps[(gaps < cut) & (gaps > 0)]
        inside = float(percentile(inner, 95)) if len(inner) else 0.0
        why = _too_short(cut, inside)
        if why is None:
            found, why = _pieces_as_steps(seg_id, is_kernel)
            if found is not None:
                decode, modal = found
                taken, n = int(decode.sum()), len(decode)
                note = (f"no step markers or launch correlations: {_note(cut, inside)}; {taken} of {n} segments "
                        f"have the repeating size of {modal} events and are taken as decode steps")
                warning = (f"steps are inferred, not marked: the GPU timeline was cut at idle gaps >= {cut / 1e3:.1f} µs "
                           f"and the {taken} of {n} segments with the repeating size ({modal} events) are taken as decode "
                           "steps; check that count against the capture")
                return GapSteps(seg_id, n, decode.tolist(), [note], [warning]), ""
        first_why = first_why or (why or "")
    return None, first_why


def _too_short(cut: float, inside: float) -> str | None:
    if cut < MIN_GAP_NS:
        return f"the gap that stands out is {cut / 1e3:.1f} µs, shorter than a kernel launch ({MIN_GAP_NS / 1e3:.0f} µs)"
    if cut < RELATIVE_GAP * inside:
        return (f"the gap that stands out, {cut / 1e3:.1f} µs, is not {RELATIVE_GAP:g}x the gaps it leaves inside the "
                f"segments ({inside / 1e3:.1f} µs at the 95th percentile)")
    return None


def _pieces_as_steps(seg_id: np.ndarray, is_kernel: np.ndarray) -> tuple[tuple[np.ndarray, int] | None, str]:
    """Each segment a step: ((which are of the modal size, modal size), "") or (None, why)."""
    sizes = np.bincount(seg_id)
    kernels = np.bincount(seg_id, weights=is_kernel)
    freq = np.bincount(sizes)
    modal = int(freq.argmax())
    repeats = int(freq[modal])
    decode = sizes == modal
    if repeats < MIN_REPEATS:
        return None, (f"no segment size repeats {MIN_REPEATS} times ({len(sizes)} segments of "
                      f"{len(set(sizes.tolist()))} sizes)")
    if (freq == repeats).sum() > 1:
        tied = ", ".join(str(int(x)) for x in np.flatnonzero(freq == repeats))
        return None, f"segments of {tied} events are equally common"
    covered = float(sizes[decode].sum()) / max(float(sizes.sum()), 1.0)
    if covered < MIN_COVERED:
        return None, (f"the {repeats} segments of the repeating size ({modal} events) hold {covered:.0%} of the GPU "
                      f"events, under {MIN_COVERED:.0%}")
    per_step = float(median(kernels[decode]))
    if per_step < MIN_KERNELS:
        return None, f"the repeating segments hold a median of {per_step:g} kernel(s), fewer than {MIN_KERNELS}"
    return (decode, modal), ""


def _note(cut: float, inside: float) -> str:
    ratio = f"{cut / inside:.0f}x" if inside > 0 else "far above"
    return (f"GPU work cut at idle gaps >= {cut / 1e3:.1f} µs ({ratio} the 95th-percentile gap inside a segment, "
            f"{inside / 1e3:.2f} µs; the rule asks {RELATIVE_GAP:g}x)")


def _gap_thresholds(gaps: np.ndarray) -> list[float]:
    """Gap sizes that stand out among the larger gaps (each at least _STANDOUT times the next
    smaller one), the largest jump first."""
    g = np.sort(gaps[gaps > 0])[::-1].astype(float)
    if len(g) < 3:
        return []
    top = g[: max(3, len(g) // 3)]
    ratios = top[:-1] / np.maximum(top[1:], 1.0)
    ks = [k for k in np.argsort(-ratios, kind="stable").tolist() if ratios[k] >= _STANDOUT]
    return [float(top[k]) for k in ks]
