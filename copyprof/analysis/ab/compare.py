"""Baseline vs candidate: which copies the candidate removed, and what an A/B measured.

A pure function of the arms' reports (no run directory is read again): each arm is one or more
runs, each run a ``RunReport`` that carries its step series, its requests' TPOTs and, for the
replica engine, its interleaved timing blocks.

Sign convention (stats/shift.py): savings are baseline − candidate, positive when the
candidate is faster. ``estimate_ms`` is the baseline's removable time for the scope the
candidate actually removed.

The unit of replication decides each interval (``replication``):

* ``boots`` — the arms are separate vLLM server boots (run.json says vLLM). A boot moves the
  step time by more than the steps inside it vary (0.5 ms between two boots of identical code
  on the H200, five to ten times the within-run noise), so step period, GPU span and client
  TPOT are compared on one value per run (its median), with the between-run spread pooled over
  the arms and any A/A given (copyprof/stats/between_runs.py). One run per arm and no A/A: the
  between-run variation is unmeasured and none of these is resolved.
* ``one-process`` — the replica engine's arms, captured in one process: steps are the unit, on
  batch means of 3τ with a t interval (copyprof/stats/within_run.py); its interleaved timing
  blocks are paired.
* ``unknown`` — traces without a run.json: as one-process, and every such verdict says that it
  assumes the captures differ only by the patch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

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
from copyprof.analysis.ab.results import (AaSummary, ArmCounts, ClientComparison, Comparison, Estimates, GpuBound,
                                          GpuSpanComparison, GroupChange, Measure, PerArm, RunsPerArm)
from copyprof.analysis.results import RunReport, TimingSummary, known
from copyprof.analysis.setup import mismatches
from copyprof.stats.shift import ShiftResult, robust_noise, shift_estimate
from copyprof.analysis.ab.verdict import estimator_check
from copyprof.stats.between_runs import RunShift, run_shift
from copyprof.stats.within_run import batch_t_shift
from copyprof.vocabulary import MeasureName, Replication, Role, VerdictKey

BOOTS, ONE_PROCESS, UNKNOWN = Replication.BOOTS, Replication.ONE_PROCESS, Replication.UNKNOWN
ASSUMES = {
    BOOTS: "runs are the unit: one value per run (its median), the between-run spread pooled over the arms{aa}",
    ONE_PROCESS: "steps of one process are the unit, on means of {block}-step batches (consecutive steps drift "
                 "together); says nothing of separate boots",
    UNKNOWN: "steps are the unit, on means of {block}-step batches; assumes the two captures differ only by the "
             "patch (no boot-to-boot variation: capture an A/A to check)",
}


@dataclass
class Arms:
    """The runs of each arm, and A/A groups of the same setup (runs of identical code)."""

    baseline: list[RunReport]
    candidate: list[RunReport]
    aa: list[list[RunReport]] = field(default_factory=list)
    identical: bool = False  # every run of both arms is a run of the A/A group: identical code


def _series(run: RunReport, key: str) -> np.ndarray:
    vals = np.asarray(run.step_series.get(key, []), dtype=float)  # None (not known) reads as NaN
    return vals[np.isfinite(vals)]


def correlation_time(x: np.ndarray) -> float:
    """Integrated autocorrelation time (in steps): 1 + 2 Σ ρ_k over the initial positive lags.

    Consecutive decode steps drift together (clocks, caches), so they are not independent;
    with a correlation time τ the series holds about n/τ independent values."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < 8 or np.std(x) == 0:
        return 1.0
    d = x - x.mean()
    var = float(d @ d)
    tau = 1.0
    for k in range(1, n // 4):
        rho = float(d[:-k] @ d[k:]) / var
        if rho <= 0.05:
            break
        tau += 2.0 * rho
    return tau


# Batches of BATCH_TAUS correlation times: means of batches only τ long are still correlated
# (86-91 % coverage for a nominal 95 % on AR(1) steps). With the t interval on batch means,
# simulated on AR(1) steps (2,000 replications each: 20 steps at φ 0 and 0.375, 32 at 0.5,
# 100 at 0.8, 200 and 400 at 0.5, 400 at 0.8): 3τ covered 92.9-96.4 %, the long series
# lowest (τ is underestimated from a cut-off autocorrelation sum); 4τ covered 93.4-96.5 %,
# every interval finite; 5τ no better on long series and wider on short ones.
# tests/analysis/test_coverage.py and test_coverage_runs.py check the bands.
BATCH_TAUS = 4


def batch_size(*series: np.ndarray) -> int:
    """Batch length for batch means so that batches are close to independent (``BATCH_TAUS`` τ)."""
    tau = max(correlation_time(s) for s in series)
    return 1 if tau < 1.5 else int(math.ceil(BATCH_TAUS * tau))


def within_process(a: np.ndarray, b: np.ndarray) -> ShiftResult | None:
    """Steps of one process: batch means of 3τ, at least two batches per arm, a t interval."""
    if len(a) < 2 or len(b) < 2:
        return None
    block = batch_size(a, b)
    if min(len(a), len(b)) // block < 2:
        block = max(1, min(len(a), len(b)) // 2)
    return batch_t_shift(a, b, block)


def as_shift(rs: RunShift) -> ShiftResult:
    """A run-level result in the form every verdict reads (units: runs; a t test with ``rs.df``)."""
    lo, hi = rs.ci95_ms
    sd = rs.sd_between_ms if rs.sd_between_ms is not None else math.nan
    b, c = np.asarray(rs.values_ms["baseline"]), np.asarray(rs.values_ms["candidate"])
    return ShiftResult(
        estimate_ms=-rs.saving_ms,
        ci95_ms=(-hi, -lo) if lo is not None and hi is not None else (-math.inf, math.inf),
        method="difference of the arms' mean run values, pooled-variance t interval (runs as unit)",
        n_baseline=len(b), n_candidate=len(c), noise_ms={"baseline": robust_noise(b), "candidate": robust_noise(c)},
        mean_ms={"baseline": float(b.mean()), "candidate": float(c.mean())},
        median_ms={"baseline": float(np.median(b)), "candidate": float(np.median(c))},
        n_units={"baseline": len(b), "candidate": len(c)}, unit_noise_ms={"baseline": sd, "candidate": sd},
        test="t", df=rs.df if rs.df > 0 else None)


def replication(arms: Arms) -> Replication:
    runs = arms.baseline + arms.candidate
    engines = {r.setup.engine for r in runs}
    if "vllm" in engines or "sglang" in engines:
        return BOOTS
    if engines == {"replica"}:
        return ONE_PROCESS
    return UNKNOWN


def _run_value(run: RunReport, key: str) -> float | None:
    if key == "tpot_ms":
        v = np.asarray(run.tpot_ms, dtype=float)
    else:
        v = _series(run, key)
    return float(np.median(v)) if len(v) else None


def run_level(arms: Arms, key: str) -> RunShift | None:
    """Each run's median of ``key`` (period_ms, span_ms, tpot_ms), compared between the arms."""
    b = [x for r in arms.baseline if (x := _run_value(r, key)) is not None]
    c = [x for r in arms.candidate if (x := _run_value(r, key)) is not None]
    if not b or not c:
        return None
    aa = [[x for r in g if (x := _run_value(r, key)) is not None] for g in arms.aa]
    return run_shift(b, c, aa)


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
        m = _measure(arms, rep, name, key, kernel, with_gap, shifts)
        if m is None:
            continue
        caveat = f" Caveat: {launch_bound_note(bound)}." if name == MeasureName.STEP_PERIOD and bound else ""
        m.verdict = _not_comparable(out) + m.verdict + caveat
        out.measures.append(m)
    pair = _this_pair(arms, rep, kernel, with_gap)
    out.gpu_bound = gpu_bound(arms)
    _aa_summary(out, arms)
    out.client = _client(out, arms)
    _choose_best(out, bound)
    period = shifts.get(MeasureName.STEP_PERIOD)
    if pair is not None:  # one boot per arm: the top-level figures say how these two runs differ
        period, m = pair
        out.measures.append(m)
    _legacy_fields(out, period, shifts.get(MeasureName.GPU_SPAN), kernel, with_gap, bound)
    return out


def expected_saving(name: MeasureName, kernel: float, with_gap: float) -> float:
    """The estimate a measure should see: a replay span loses a removed copy's dispatch gap
    with it (the next graph node starts sooner); busy time and the host-timed measures lose
    the copy's kernel time (its gap was idle GPU time already)."""
    return with_gap if name == MeasureName.GRAPH_REPLAY_SPAN and with_gap > 0 else kernel


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
        bound, msg = True, (f"the GPU is busy {share} of each step: the step is GPU-bound, so a GPU saving "
                            "shortens the step about as much")
    elif top < HOST_BOUND_BELOW:
        bound, msg = False, (f"the GPU is busy {share} of each step: the host sets the step's pace, so a GPU "
                             "saving shortens the step only once the GPU is the bottleneck (larger cohort, "
                             "larger TP shards, real weights)")
    else:
        bound, msg = False, (f"the GPU is busy {share} of each step: part of a GPU saving may reach the step, "
                             "as far as the GPU sets its pace")
    return GpuBound(busy_fraction=PerArm(baseline=known(b), candidate=known(c)), gpu_bound=bound, message=msg)


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
    shift = within_process(_series(arms.baseline[0], "period_ms"), _series(arms.candidate[0], "period_ms"))
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


def _measure(arms: Arms, rep: Replication, name: MeasureName, key: str, kernel: float, with_gap: float,
             shifts: dict[str, ShiftResult]) -> Measure | None:
    """One measure of the saving on the unit ``rep`` calls for (None when an arm lacks it)."""
    if rep == BOOTS or key == "tpot_ms":
        rs = run_level(arms, key)
        if rs is None:
            return None
        shift = as_shift(rs)
        expected = expected_saving(name, kernel, with_gap)
        m = measure_of(name, shift, kernel, with_gap, unit="runs",
                       need=rs.runs_needed(abs(expected)) if expected else None, expected=expected)
        aa = f" and {rs.aa_runs} A/A run(s)" if rs.aa_runs else ""
        m.assumes = ASSUMES[BOOTS].format(aa=aa)
        m.between_runs_sd_ms = known(rs.sd_between_ms)
        m.run_values_ms = {k: [float(x) for x in v] for k, v in rs.values_ms.items()}
        m.runs_needed = rs.runs_needed(abs(expected)) if expected else None
        if rs.sd_between_ms is None:
            m.key = VerdictKey.UNMEASURED
            m.resolved = False
            m.verdict = (f"not resolvable: the between-run variation is unmeasured with {rs.runs['baseline']} run(s) "
                         f"per arm and no A/A (the two runs differ by {rs.saving_ms:.4g} ms, which includes any "
                         "boot-to-boot difference); capture two or more runs per arm (copyprof run --repeat 2 "
                         "--interleave) or an A/A of this setup (copyprof report --aa)")
        elif m.runs_needed is not None and m.mde_ms is not None and m.mde_ms > abs(expected):
            m.verdict += f" The runs of one arm differ by {rs.sd_between_ms:.4g} ms (SD)."
        shifts[name] = shift
        return m
    a = np.concatenate([_series(r, key) for r in arms.baseline])
    b = np.concatenate([_series(r, key) for r in arms.candidate])
    steps = within_process(a, b)
    if steps is None:
        return None
    m = measure_of(name, steps, kernel, with_gap, unit="steps", expected=expected_saving(name, kernel, with_gap))
    m.assumes = ASSUMES[rep].format(block=steps.block)
    shifts[name] = steps
    return m


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


def _aa_summary(out: Comparison, arms: Arms) -> None:
    """The noise floor an A/A gives: how far two boots of identical code land apart."""
    groups = [g for g in arms.aa if len(g) >= 2]
    if not groups:
        return
    from copyprof.stats.between_runs import pooled_sd

    def spread(key: str) -> tuple[float | None, int]:
        values = [np.asarray([x for r in g if (x := _run_value(r, key)) is not None]) for g in groups]
        return pooled_sd([v for v in values if len(v)])

    sd, df = spread("period_ms")
    busy_sd, _ = spread("busy_ms")
    out.aa = AaSummary(groups=len(groups), runs=sum(len(g) for g in groups), measure=MeasureName.STEP_PERIOD,
                       between_runs_sd_ms=known(sd), df=df,
                       two_boots_differ_ms=known(sd * math.sqrt(2)) if sd is not None else None,
                       gpu_busy_between_runs_sd_ms=known(busy_sd),
                       gpu_busy_two_boots_differ_ms=known(busy_sd * math.sqrt(2)) if busy_sd is not None else None)


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
