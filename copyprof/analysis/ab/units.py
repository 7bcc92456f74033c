"""The unit of replication an A/B's intervals rest on, and each measure of the saving on it.

Why a module of its own: which observations are independent decides every interval, and
every measure (step period, GPU busy time, replay span, GPU span, client TPOT) is built the
same way on it; compare.py asks this module for each measure and assembles the comparison.

The unit of replication decides each interval (``replication``):

* ``boots`` — the arms are separate vLLM server boots (run.json says vLLM). A boot moves the
  step time by more than the steps inside it vary (0.5 ms between two boots of identical code
  on the H200, five to ten times the within-run noise), so every measure — GPU busy time,
  graph-replay span, step period, GPU span, client TPOT — is compared on one value per run
  (its median), with the between-run spread pooled over
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

from copyprof.analysis.ab.measures import measure_of
from copyprof.analysis.ab.results import Measure
from copyprof.analysis.results import RunReport, known
from copyprof.stats.between_runs import RunShift, blocked_shift, run_shift
from copyprof.stats.shift import ShiftResult, robust_noise
from copyprof.stats.within_run import batch_t_shift
from copyprof.vocabulary import MeasureName, Replication, VerdictKey

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


def series(run: RunReport, key: str) -> np.ndarray:
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
        method=(f"arm effect within {rs.sessions} capture sessions (least squares, arm + session), t interval on "
                "the residual (runs as unit)" if rs.sessions else
                "difference of the arms' mean run values, pooled-variance t interval (runs as unit)"),
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


def run_value(run: RunReport, key: str) -> float | None:
    if key == "tpot_ms":
        v = np.asarray(run.tpot_ms, dtype=float)
    else:
        v = series(run, key)
    return float(np.median(v)) if len(v) else None


def run_level(arms: Arms, key: str) -> RunShift | None:
    """Each run's median of ``key`` (period_ms, span_ms, tpot_ms), compared between the arms:
    within capture sessions where every run names its session and a session holds both arms
    (copyprof/stats/between_runs.py), else pooled over the runs."""
    b = [(x, r.setup.ab_group) for r in arms.baseline if (x := run_value(r, key)) is not None]
    c = [(x, r.setup.ab_group) for r in arms.candidate if (x := run_value(r, key)) is not None]
    if not b or not c:
        return None
    aa = [[x for r in g if (x := run_value(r, key)) is not None] for g in arms.aa]
    bv, cv = [x for x, _ in b], [x for x, _ in c]
    b_s, c_s = [g for _, g in b], [g for _, g in c]
    if all(b_s) and all(c_s):
        blocked = blocked_shift(bv, cv, ([str(g) for g in b_s], [str(g) for g in c_s]), aa)
        if blocked is not None:
            return blocked
    return run_shift(bv, cv, aa)


def sessions_note(arms: Arms, rs: RunShift) -> str:
    """What the runs' capture sessions mean for the interval, in words ("" for one session)."""
    b = {r.setup.ab_group for r in arms.baseline}
    c = {r.setup.ab_group for r in arms.candidate}
    if rs.sessions:
        return (f"; the arm effect read within {rs.sessions} capture sessions (two-way: arm + session), "
                "so a machine or session that moves both arms cancels")
    if None not in b | c and len(b | c) > 1 and not b & c:
        return ("; the arms come from different capture sessions and none holds both: a difference between the "
                "sessions (machine, clocks) cannot be told from the patch")
    return ""


def expected_saving(name: MeasureName, kernel: float, with_gap: float) -> float:
    """The estimate a measure should see: a replay span loses a removed copy's dispatch gap
    with it (the next graph node starts sooner); busy time and the host-timed measures lose
    the copy's kernel time (its gap was idle GPU time already)."""
    return with_gap if name == MeasureName.GRAPH_REPLAY_SPAN and with_gap > 0 else kernel


def measure_on_unit(arms: Arms, rep: Replication, name: MeasureName, key: str, kernel: float, with_gap: float,
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
        m.assumes = ASSUMES[BOOTS].format(aa=aa) + sessions_note(arms, rs)
        m.sessions = rs.sessions
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
    a = np.concatenate([series(r, key) for r in arms.baseline])
    b = np.concatenate([series(r, key) for r in arms.candidate])
    steps = within_process(a, b)
    if steps is None:
        return None
    m = measure_of(name, steps, kernel, with_gap, unit="steps", expected=expected_saving(name, kernel, with_gap))
    m.assumes = ASSUMES[rep].format(block=steps.block)
    shifts[name] = steps
    return m
