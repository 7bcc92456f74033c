"""Baseline vs candidate: which copies the candidate removed, and what an A/B measured.

A pure function of the arms' reports (no run directory is read again): each arm is one or more
runs, each run a ``RunReport`` that carries its step series, its requests' TPOTs and, for the
replica engine, its interleaved timing blocks.

Sign convention (stats/shift.py): savings are baseline − candidate, positive when the
candidate is faster. ``estimate_ms`` is the baseline's removable time for the scope the
candidate actually removed.

The unit of replication decides each interval (``replication``, analysis/ab/units.py: separate
boots compare one value per run, one process compares batch means of its steps).
"""
from __future__ import annotations

import math

import numpy as np

from copyprof.analysis.ab.sites import (
    group_changes,
    group_scope_text,
    removed_scope,
    removed_sites,
    scope_estimate,
    scope_kinds,
    site_changes,
)
from copyprof.analysis.ab.measures import best, launch_bound_note, measure_of, timing_comparison
from copyprof.analysis.ab.context import aa_summary, gpu_bound
from copyprof.analysis.ab.results import (ArmCounts, ClientComparison, Comparison, Estimates, GpuSpanComparison,
                                          GroupChange, Measure, PerArm, RunsPerArm)
from copyprof.analysis.results import RunReport, TimingSummary, known
from copyprof.analysis.setup import mismatches
from copyprof.stats.shift import ShiftResult, shift_estimate
from copyprof.analysis.ab.units import BOOTS, Arms, measure_on_unit, replication, series, within_process
from copyprof.analysis.ab.verdict import estimator_check
from copyprof.vocabulary import MeasureName, Replication, Role, VerdictKey


def _timing(base: RunReport, cand: RunReport) -> ShiftResult | None:
    """The replica's interleaved timing of this very pair, when both runs hold one timed set."""
    tb, tc = base.timing_blocks, cand.timing_blocks
    if not tb or not tc or base.timing_arm != "baseline" or cand.timing_arm in (None, "baseline") \
            or tb.get("baseline") != tc.get("baseline") or cand.timing_arm not in tb:
        return None
    return shift_estimate(np.asarray(tb["baseline"]), np.asarray(tb[cand.timing_arm]), paired=True)


NAMES = ((MeasureName.GPU_BUSY, "busy_ms"), (MeasureName.GRAPH_REPLAY_SPAN, "replay_ms"),
         (MeasureName.STEP_PERIOD, "period_ms"), (MeasureName.GPU_SPAN, "span_ms"), (MeasureName.CLIENT_TPOT, "tpot_ms"))


def compare_arms(arms: Arms) -> Comparison:
    """The A/B of two arms' reports: what changed (scope, sites, copy groups), what each measure
    saw on the unit of replication the arms allow, which measure the verdict rests on."""
    base, cand = arms.baseline[0], arms.candidate[0]
    changes = group_changes(base, cand)
    scope, scope_text, kernel, with_gap = _scope(base, cand, changes)
    rep = replication(arms)
    out = Comparison(
        baseline=0, candidate=1, scope=scope, scope_text=scope_text,
        estimate_ms=Estimates(kernel=kernel, kernel_plus_gap=with_gap),
        site_changes=site_changes(base, cand), removed_sites=removed_sites(base, scope_kinds(scope, base)),
        timing=None, client=None, mismatch=mismatches(base.setup, cand.setup),
        runs_per_arm=RunsPerArm(baseline=len(arms.baseline), candidate=len(arms.candidate),
                                aa=sum(len(g) for g in arms.aa)),
        replication=rep, group_changes=changes, is_aa=arms.identical and bool(arms.aa))
    out.comparable = not out.mismatch
    out.lower_bound_runs = [i for i, r in enumerate((base, cand)) if r.lower_bound]
    bound = [name for name, r in (("the baseline", base), ("the candidate", cand))
             if r.launch_overhead is not None and r.launch_overhead.launch_bound]
    if len(arms.baseline) == len(arms.candidate) == 1:
        _add_timing(out, base, cand, kernel, with_gap)
    shifts: dict[str, ShiftResult] = {}
    for name, key in NAMES:
        m = measure_on_unit(arms, rep, name, key, kernel, with_gap, shifts)
        if m is None:
            continue
        caveat = f" Caveat: {launch_bound_note(bound)}." if name == MeasureName.STEP_PERIOD and bound else ""
        m.verdict = _not_comparable(out) + m.verdict + caveat
        out.measures.append(m)
    pair = _this_pair(arms, rep, kernel, with_gap)
    out.gpu_bound = gpu_bound(arms)
    out.aa = aa_summary(arms)
    out.client = _client(out, arms)
    _choose_best(out, bound)
    period = shifts.get(MeasureName.STEP_PERIOD)
    if pair is not None:  # one boot per arm: the top-level figures say how these two runs differ
        period, m = pair
        out.measures.append(m)
    _legacy_fields(out, period, shifts.get(MeasureName.GPU_SPAN), kernel, with_gap, bound)
    return out


def _scope(base: RunReport, cand: RunReport, changes: list[GroupChange]) -> tuple[str | None, str, float, float]:
    """What the candidate removed, in words, and the estimate of it: the post-projection scope,
    or (where other copy groups changed) every changed group, each with its own estimate."""
    scope, scope_text = removed_scope(base, cand)
    kernel, with_gap = scope_estimate(base, scope)
    others = [g for g in changes if g.role != Role.POST]
    if others:  # copies other than the post-projection ones changed: a patch scope of its own
        text = group_scope_text(others)
        scope_text = text if scope is None else f"{scope_text.rstrip('.')}; {text}"
        scope = scope or "groups"
        kernel = sum(g.estimate_ms for g in changes)
        with_gap = sum(g.estimate_with_gap_ms for g in changes)
    return scope, scope_text, kernel, with_gap


def _add_timing(out: Comparison, base: RunReport, cand: RunReport, kernel: float, with_gap: float) -> None:
    """The replica's interleaved timing of this very pair, as ``comparison.timing`` and a measure."""
    timed = _timing(base, cand)
    if timed is None:
        return
    lo, hi = timed.saving_ci95_ms
    summary = TimingSummary(
        measured_ms=float(timed.saving_ms), ci95_ms=[known(lo), known(hi)],
        noise_ms={k: known(v) for k, v in timed.noise_ms.items()}, blocks=timed.n_baseline,
        replays_per_block=base.timing.replays_per_block if base.timing else None,
        timer=base.timing.timer if base.timing else None, method=timed.method,
        source=base.timing.source if base.timing else "", median_ms=dict(timed.median_ms),
        arms=["baseline", str(cand.timing_arm)])
    out.timing = timing_comparison(timed, summary, kernel, with_gap)
    measure = measure_of(MeasureName.REPLICA_TIMING, timed, kernel, with_gap)
    measure.assumes = "interleaved timing blocks of one process are the unit, paired round by round"
    out.measures.append(measure)


def _choose_best(out: Comparison, bound: list[str]) -> None:
    """The measure the verdict rests on: the finest resolution among those that measured the
    arms (step periods of launch-bound runs measure the profiler, and are passed over)."""
    top = best([m for m in out.measures if m.key != VerdictKey.UNMEASURED] or out.measures,
               frozenset({MeasureName.STEP_PERIOD}) if bound else frozenset())
    out.best_measure = top.name if top else None
    plain = best(out.measures)
    if bound and top is not None and plain is not None and plain.name == MeasureName.STEP_PERIOD != top.name:
        out.best_measure_note = launch_bound_note(bound)


PAIR = MeasureName.STEP_PERIOD_THIS_PAIR


def _this_pair(arms: Arms, rep: Replication, kernel: float, with_gap: float) -> tuple[ShiftResult, Measure] | None:
    """Two single boots: how their steps differ (a finite interval on batch means), which is a
    difference between these two boots — the patch's effect and any boot-to-boot difference
    together — never a resolved effect (``key`` "descriptive")."""
    if rep != BOOTS or len(arms.baseline) != 1 or len(arms.candidate) != 1:
        return None
    shift = within_process(series(arms.baseline[0], "period_ms"), series(arms.candidate[0], "period_ms"))
    if shift is None:
        return None
    m = measure_of(PAIR, shift, kernel, with_gap, unit="steps")
    lo, hi = shift.saving_ci95_ms
    m.key, m.resolved = VerdictKey.DESCRIPTIVE, False
    m.assumes = ("steps of these two runs are the unit, on means of "
                 f"{shift.block}-step batches: how these two boots differ, not how boots of each arm differ")
    m.verdict = (f"these two runs differ by {shift.saving_ms:.4g} ms per step (95 % CI {lo:.4g} to {hi:.4g} ms, steps "
                 "as unit): the patch and any boot-to-boot difference together; one boot per arm cannot tell them apart")
    return shift, m


def _client(out: Comparison, arms: Arms) -> ClientComparison | None:
    """``comparison.client``: TPOT with runs as the unit (a cohort's requests share every step)."""
    m = next((x for x in out.measures if x.name == MeasureName.CLIENT_TPOT), None)
    if m is None:
        return None
    return ClientComparison(
        metric="tpot_ms", unit="runs",
        requests=ArmCounts(baseline=sum(len(r.tpot_ms) for r in arms.baseline),
                           candidate=sum(len(r.tpot_ms) for r in arms.candidate)),
        runs=ArmCounts(baseline=m.n_baseline, candidate=m.n_candidate), measured_ms=m.measured_ms,
        ci95_ms=m.ci95_ms, mde_ms=m.mde_ms, runs_needed=m.runs_needed, verdict=m.verdict)


def _legacy_fields(out: Comparison, shift: ShiftResult | None, span: ShiftResult | None, kernel: float,
                   with_gap: float, bound: list[str]) -> None:
    """The step-period figures of the JSON contract's top level (measured_ms, ci95_ms, ...)."""
    if shift is None:
        out.verdict = _not_comparable(out) + "not measurable: each arm needs at least 2 decode steps with a period"
        return
    mde = shift.mde_ms()
    need = shift.steps_needed(kernel) if kernel > 0 and math.isfinite(mde) else None
    lo, hi = shift.saving_ci95_ms
    period = next(m for m in out.measures if m.name == MeasureName.STEP_PERIOD)
    if any(m.name == PAIR for m in out.measures):
        out.verdict = period.verdict
        _pair_figures(out, shift)
        return
    out.measured_ms = float(shift.saving_ms)
    out.ci95_ms = [known(lo), known(hi)]
    out.noise_ms = _per_arm(shift.noise_ms)
    out.mde_ms = known(mde)
    # the step-period measure's own figures: with runs as the unit, the runs the pooled
    # between-run SD says would resolve the estimate (one source for the top level and measures[])
    out.steps_needed = period.runs_needed if period.unit == "runs" else need
    out.n_steps = ArmCounts(baseline=shift.n_baseline, candidate=shift.n_candidate)
    out.method = shift.method
    out.estimator = estimator_check(kernel, with_gap, shift) if kernel > 0 else None
    out.verdict = period.verdict
    if span is not None:
        out.gpu_span = GpuSpanComparison(measured_ms=span.saving_ms, ci95_ms=[known(x) for x in span.saving_ci95_ms],
                                         noise_ms=_per_arm(span.noise_ms))
        if kernel > 0:
            out.gpu_span.estimator = estimator_check(kernel, with_gap, span)


def _pair_figures(out: Comparison, shift: ShiftResult) -> None:
    lo, hi = shift.saving_ci95_ms
    out.measured_ms = float(shift.saving_ms)
    out.ci95_ms = [known(lo), known(hi)]
    out.noise_ms = _per_arm(shift.noise_ms)
    out.mde_ms = known(shift.mde_ms())
    out.n_steps = ArmCounts(baseline=shift.n_baseline, candidate=shift.n_candidate)
    out.method = shift.method + " (these two runs; a boot-to-boot difference is not separated)"


def compare_runs(base: RunReport, cand: RunReport, paths: tuple[str, ...] | list[str] = ()) -> Comparison:
    """One run per arm (``paths`` is kept for callers that name the runs; nothing is read)."""
    return compare_arms(Arms([base], [cand]))


def _per_arm(values: dict[str, float]) -> PerArm:
    return PerArm(baseline=known(values.get("baseline")), candidate=known(values.get("candidate")))


def _not_comparable(cmp: Comparison) -> str:
    return f"not comparable ({'; '.join(cmp.mismatch)}): " if cmp.mismatch else ""
