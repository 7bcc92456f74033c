"""The figures of an A/B that are not a measure of the saving: the setup's noise floor and the GPU's pace.

Why a module of its own: the A/A summary (how far two boots of identical code land apart) and
the GPU-bound summary (how busy each arm keeps the GPU, so whether a GPU saving can reach the
wall clock) say what the setup lets any measure see, rather than what the patch saved; the
verdicts and the renderers read them beside the measures.
"""
from __future__ import annotations

import math

import numpy as np

from copyprof.analysis.ab.results import AaSummary, GpuBound, PerArm
from copyprof.analysis.ab.units import Arms, run_value
from copyprof.analysis.results import RunReport, known
from copyprof.vocabulary import MeasureName


# Busy this share of the step or more, the GPU sets the step's pace: what it saves, the step saves.
# Below HOST_BOUND_BELOW the host sets it (the GPU waits for launches most of the step).
GPU_BOUND_FROM = 0.9
HOST_BOUND_BELOW = 0.5


def gpu_bound(arms: Arms) -> GpuBound | None:
    """How busy each arm keeps the GPU, and what that means for the wall clock."""
    def arm(runs: list[RunReport]) -> float | None:
        vals = [r.per_step.gpu_busy_fraction for r in runs if r.per_step.gpu_busy_fraction is not None]
        return float(np.median(vals)) if vals else None

    b, c = arm(arms.baseline), arm(arms.candidate)
    if b is None and c is None:
        return None
    top = max(x for x in (b, c) if x is not None)
    share = (f"{100 * top:.0f} %" if b is None or c is None or round(100 * b) == round(100 * c)
             else f"{100 * b:.0f} % / {100 * c:.0f} %")
    if top >= GPU_BOUND_FROM:
        bound, means = True, "the step is GPU-bound, so a GPU saving shortens the step about as much"
    elif top < HOST_BOUND_BELOW:
        bound, means = False, ("the host sets the step's pace, so a GPU saving shortens the step only once the GPU "
                               "is the bottleneck (larger cohort, larger TP shards, real weights)")
    else:
        bound, means = False, "part of a GPU saving may reach the step, as far as the GPU sets its pace"
    msg = f"the GPU is busy {share} of each step: {means}"
    return GpuBound(busy_fraction=PerArm(baseline=known(b), candidate=known(c)), gpu_bound=bound, message=msg)


def aa_summary(arms: Arms) -> AaSummary | None:
    """The noise floor an A/A gives: how far two boots of identical code land apart."""
    groups = [g for g in arms.aa if len(g) >= 2]
    if not groups:
        return None
    from copyprof.stats.between_runs import pooled_sd

    def spread(key: str) -> tuple[float | None, int]:
        values = [np.asarray([x for r in g if (x := run_value(r, key)) is not None]) for g in groups]
        return pooled_sd([v for v in values if len(v)])

    sd, df = spread("period_ms")
    busy_sd, _ = spread("busy_ms")
    return AaSummary(groups=len(groups), runs=sum(len(g) for g in groups), measure=MeasureName.STEP_PERIOD,
                     between_runs_sd_ms=known(sd), df=df,
                     two_boots_differ_ms=known(sd * math.sqrt(2)) if sd is not None else None,
                     gpu_busy_between_runs_sd_ms=known(busy_sd),
                     gpu_busy_two_boots_differ_ms=known(busy_sd * math.sqrt(2)) if busy_sd is not None else None)
