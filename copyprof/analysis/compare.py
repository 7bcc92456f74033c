"""Baseline vs candidate: what copies the candidate removed, and what an A/B measured.

Sign convention (matches analysis/stats.py): savings are baseline − candidate, positive when
the candidate is faster. ``estimate_ms`` comes from the baseline's census for the scope the
candidate actually removed (24 MLA copies gone and 69 KDA left → scope "mla"); the measured
effect is the Hodges–Lehmann shift of the per-step periods with a rank-based 95 % interval.
"""
from __future__ import annotations

import math

import numpy as np

from copyprof.analysis.ab_sites import removed_scope, removed_sites, scope_estimate, scope_kinds, site_changes
from copyprof.analysis.client_metrics import client_comparison
from copyprof.analysis.measures import (
    best,
    estimator_note,
    launch_bound_note,
    measure_of,
    timing_comparison,
    timing_pair_shift,
)
from copyprof.analysis.results import Comparison, RunReport, known
from copyprof.analysis.setup import mismatches
from copyprof.analysis.stats import ShiftResult, shift_estimate
from copyprof.analysis.verdict import estimator_check, verdict


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


# Batches of BATCH_TAUS correlation times. Means of batches only τ long are still correlated:
# on AR(1) steps the nominal 95 % interval covered 86.1-91.2 % (φ 0.3 over 100 steps, 0.5
# over 200, 0.8 and 0.9 over 400; 1,000 replications each, tests/analysis/test_coverage.py's
# generator) and 90.9 % at φ 0.375 over 32 steps (τ ≈ 2.2, the shipped K3 captures' GPU
# spans). 3τ: 93.5-94.6 % on the long series, 95.4 % on the short one (a finite interval in
# 72 % of them); 2τ: 92.2-93.7 %; 4τ: 93.8-95.5 % but 96.8 % on the short series, finite in
# only 42 %. Independent steps at 32: 96.0 % with 3τ (a spurious τ ≥ 1.5 batches a few).
BATCH_TAUS = 3


def batch_size(*series: np.ndarray) -> int:
    """Batch length for batch means so that batches are close to independent (``BATCH_TAUS`` τ)."""
    tau = max(correlation_time(s) for s in series)
    return 1 if tau < 1.5 else int(math.ceil(BATCH_TAUS * tau))


def measure(base: RunReport, cand: RunReport, key: str = "period_ms") -> ShiftResult | None:
    a, b = _series(base, key), _series(cand, key)
    if len(a) < 2 or len(b) < 2:
        return None
    block = batch_size(a, b)
    if min(len(a), len(b)) // block < 2:
        block = max(1, min(len(a), len(b)) // 2)
    return shift_estimate(a, b, block=block)


def compare_runs(base: RunReport, cand: RunReport, paths: tuple[str, ...] | list[str]) -> Comparison:
    scope, scope_text = removed_scope(base, cand)
    kernel, with_gap = scope_estimate(base, scope)
    shift = measure(base, cand, "period_ms")
    span = measure(base, cand, "span_ms")
    timed = timing_pair_shift(paths)
    client = client_comparison(paths, kernel)
    out = Comparison(
        baseline=0, candidate=1, scope=scope, scope_text=scope_text,
        estimate_ms={"kernel": kernel, "kernel_plus_gap": with_gap},
        site_changes=site_changes(base, cand), removed_sites=removed_sites(base, scope_kinds(scope, base)),
        timing=timing_comparison(*timed, kernel, with_gap) if timed else None,
        client=client[1] if client else None,
        mismatch=mismatches(base.setup, cand.setup),
    )
    out.comparable = not out.mismatch
    out.lower_bound_runs = [i for i, r in enumerate((base, cand)) if r.lower_bound]
    bound = [name for name, r in (("the baseline", base), ("the candidate", cand))
             if r.launch_overhead is not None and r.launch_overhead.launch_bound]
    for name, s in (("replica timing", timed[0] if timed else None), ("GPU span", span),
                    ("client TPOT", client[0] if client else None), ("step period", shift)):
        if s is not None:
            m = measure_of(name, s, kernel, with_gap)
            caveat = f" Caveat: {launch_bound_note(bound)}." if name == "step period" and bound else ""
            m.verdict = _not_comparable(out) + m.verdict + caveat  # a mismatched pair says so first
            out.measures.append(m)
    top = best(out.measures, frozenset({"step period"}) if bound else frozenset())
    out.best_measure = top.name if top else None
    plain = best(out.measures)  # what the finest resolution alone would pick
    if bound and top is not None and plain is not None and plain.name == "step period" != top.name:
        out.best_measure_note = launch_bound_note(bound)
    if shift is None:
        out.verdict = _not_comparable(out) + "not measurable: each arm needs at least 2 decode steps with a period"
        return out
    mde = shift.mde_ms()
    need = shift.steps_needed(kernel) if kernel > 0 else None
    lo, hi = shift.saving_ci95_ms
    out.measured_ms = float(shift.saving_ms)
    out.ci95_ms = [known(lo), known(hi)]
    out.noise_ms = {k: known(v) for k, v in shift.noise_ms.items()}
    out.mde_ms = known(mde)
    out.steps_needed = need
    out.n_steps = {"baseline": shift.n_baseline, "candidate": shift.n_candidate}
    out.method = shift.method
    out.estimator = estimator_check(kernel, with_gap, shift) if kernel > 0 else None
    out.verdict = (_not_comparable(out) + verdict(kernel, shift, mde, need) + estimator_note(out.estimator, with_gap)
                   + (f" Caveat: {launch_bound_note(bound)}." if bound else ""))
    if span is not None:
        out.gpu_span = {"measured_ms": span.saving_ms, "ci95_ms": [known(x) for x in span.saving_ci95_ms],
                        "noise_ms": {k: known(v) for k, v in span.noise_ms.items()}}
        if kernel > 0:
            out.gpu_span["estimator"] = estimator_check(kernel, with_gap, span)
    return out


def _not_comparable(cmp: Comparison) -> str:
    return f"not comparable ({'; '.join(cmp.mismatch)}): " if cmp.mismatch else ""
