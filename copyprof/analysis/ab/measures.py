"""The measurements an A/B has — replica timing, GPU busy, graph-replay span, GPU span, client
TPOT, step period — side by side.

Why: a reviewer needs one answer, from the measurement that resolves the effect best, with
the others as support. Each measurement is a ``ShiftResult`` (stats/shift.py) on its own
observations (timing blocks, steps, requests); the best is the one with the smallest minimum
detectable effect (the finest resolution this sample has), in the order below on ties. Its
verdict heads the comparison.
"""
from __future__ import annotations

import math

import msgspec

from copyprof.analysis.ab.verdict import classify, estimator_check, verdict
from copyprof.analysis.ab.results import EstimatorCheck, Measure, TimingComparison
from copyprof.analysis.results import TimingSummary, known
from copyprof.stats.shift import ShiftResult
from copyprof.vocabulary import GPU_TIME_MEASURES, MeasureName

ORDER = (MeasureName.REPLICA_TIMING, MeasureName.GPU_BUSY, MeasureName.GRAPH_REPLAY_SPAN, MeasureName.GPU_SPAN,
         MeasureName.CLIENT_TPOT, MeasureName.STEP_PERIOD)
UNITS = {MeasureName.REPLICA_TIMING: "blocks", MeasureName.GPU_BUSY: "steps", MeasureName.GRAPH_REPLAY_SPAN: "steps",
         MeasureName.GPU_SPAN: "steps", MeasureName.CLIENT_TPOT: "runs", MeasureName.STEP_PERIOD: "steps"}



def estimator_note(check: EstimatorCheck | None, with_gap: float) -> str:
    """A sentence when the kernel + dispatch-gap estimate fits the measurement better."""
    if check is None or check.supported != "kernel_plus_gap":
        return ""
    rel = check.estimates["kernel_plus_gap"].rel_error
    where = "lies in the CI" if check.estimates["kernel_plus_gap"].in_ci else "is the closer one"
    off = f", {rel:+.1%} off the measured saving" if rel is not None else ""
    return (f" The kernel + dispatch-gap estimate ({with_gap:.3f} ms{off}) {where}: in graph replay a "
            "removed copy also takes its dispatch gap with it.")


def timing_comparison(shift: ShiftResult, summary: TimingSummary, kernel: float, with_gap: float) -> TimingComparison:
    """The replica timing of this pair as ``comparison.timing``: its summary, MDE and verdict."""
    mde = shift.mde_ms()
    out = TimingComparison(**msgspec.structs.asdict(summary), mde_ms=known(mde))
    if kernel > 0:
        out.estimator = estimator_check(kernel, with_gap, shift)
        out.verdict = (verdict(kernel, shift, mde, shift.steps_needed(kernel), unit="blocks")
                       + estimator_note(out.estimator, with_gap))
    return out


def measure_of(name: MeasureName, shift: ShiftResult, kernel: float, with_gap: float, *, unit: str | None = None,
               need: int | None = None, expected: float | None = None) -> Measure:
    """One measure; ``need``: observations per arm that resolve the estimate where the caller
    knows them better than the shift's own noise does (runs, from the pooled between-run SD);
    ``expected``: the estimate this measure should see (default: the kernel-time one)."""
    expected = kernel if expected is None else expected
    mde = shift.mde_ms()
    lo, hi = shift.saving_ci95_ms
    if need is None:
        need = (shift.steps_needed(expected) or None) if expected > 0 and math.isfinite(mde) else None
    check = estimator_check(kernel, with_gap, shift) if kernel > 0 else None
    unit = unit or UNITS[name]
    text = verdict(expected, shift, mde, need, unit=unit)
    text += fidelity_note(check) if name in GPU_TIME_MEASURES else estimator_note(check, with_gap)
    return Measure(name=name, unit=unit, measured_ms=float(shift.saving_ms), ci95_ms=[known(lo), known(hi)],
                   mde_ms=known(mde), n_baseline=shift.n_baseline, n_candidate=shift.n_candidate,
                   key=classify(expected, shift), resolved=bool(shift.resolved), verdict=text,
                   supports=check.supported if check else None,
                   supported_error=check.estimates[check.supported].rel_error if check else None)


def fidelity_note(check: EstimatorCheck | None) -> str:
    """Both estimates against a GPU-time measurement, each off the measured saving by how much:
    busy time should match the kernel estimate (a removed copy's dispatch gap was idle GPU time),
    a graph-replay span the kernel + dispatch-gap one (the next node starts sooner)."""
    if check is None or not check.resolved:
        return ""
    def part(key: str, label: str) -> str:
        e = check.estimates[key]
        off = f" ({e.rel_error:+.1%} off)" if e.rel_error is not None else ""
        return f"{label} {e.estimate_ms:.3g} ms{off}"
    which = "kernel" if check.supported == "kernel" else "kernel + dispatch-gap"
    return (f" Estimates against it: {part('kernel', 'kernel time')}, {part('kernel_plus_gap', 'kernel + dispatch gap')};"
            f" the {which} estimate matches best.")


def best(measures: list[Measure], passed_over: frozenset[str] = frozenset()) -> Measure | None:
    """The measurement with the smallest finite MDE (ties: ORDER), else the first there is.
    ``passed_over``: measures that measure something else here (step periods set by graph-launch
    calls, analysis/health/launch_overhead.py), taken only when nothing else was measured."""
    if not measures:
        return None
    rank = {n: i for i, n in enumerate(ORDER)}
    usable = [m for m in measures if m.name not in passed_over] or measures
    finite = [m for m in usable if m.mde_ms is not None and math.isfinite(m.mde_ms)]
    pool = finite or usable
    return min(pool, key=lambda m: (m.mde_ms if m.mde_ms is not None else math.inf, rank.get(m.name, 9)))


def launch_bound_note(labels: list[str]) -> str:
    """Why the step period is not the verdict's measure: the named arms' launches hold up the GPU."""
    return (f"step periods measure the profiler here: graph-launch calls hold up the GPU in {' and '.join(labels)} "
            "(see the run's warnings), so the verdict relies on another measure")
