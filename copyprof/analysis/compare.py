"""Baseline vs candidate: what copies the candidate removed, and what an A/B measured.

Sign convention (matches analysis/stats.py): savings are baseline − candidate, positive when
the candidate is faster. ``estimate_ms`` comes from the baseline's census for the scope the
candidate actually removed (24 MLA copies gone and 69 KDA left → scope "mla"); the measured
effect is the Hodges–Lehmann shift of the per-step periods with a rank-based 95 % interval.
"""
from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from copyprof.analysis.ab_sites import removed_scope, removed_sites, scope_estimate, scope_kinds, site_changes
from copyprof.analysis.client_metrics import client_comparison
from copyprof.analysis.replica_timing import load_timing, timing_shift, timing_summary
from copyprof.analysis.results import Comparison, RunReport, known
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


def batch_size(*series: np.ndarray) -> int:
    """Batch length for batch means so that batches are close to independent (≥ τ)."""
    tau = max(correlation_time(s) for s in series)
    return 1 if tau < 1.5 else int(math.ceil(tau))


def measure(base: RunReport, cand: RunReport, key: str = "period_ms") -> ShiftResult | None:
    a, b = _series(base, key), _series(cand, key)
    if len(a) < 2 or len(b) < 2:
        return None
    block = batch_size(a, b)
    if min(len(a), len(b)) // block < 2:
        block = max(1, min(len(a), len(b)) // 2)
    return shift_estimate(a, b, block=block)


def _estimator_note(check: dict[str, Any] | None, with_gap: float) -> str:
    """A sentence when the kernel + dispatch-gap estimate fits the measurement better."""
    if not check or check["supported"] != "kernel_plus_gap":
        return ""
    rel = check["estimates"]["kernel_plus_gap"]["rel_error"]
    where = "lies in the CI" if check["estimates"]["kernel_plus_gap"]["in_ci"] else "is the closer one"
    off = f", {rel:+.1%} off the measured saving" if rel is not None else ""
    return (f" The kernel + dispatch-gap estimate ({with_gap:.3f} ms{off}) {where}: in graph replay a "
            "removed copy also takes its dispatch gap with it.")


def _timing_comparison(paths: tuple[str, ...] | list[str], kernel: float, with_gap: float) -> dict[str, Any] | None:
    """The replica's interleaved timing of this very pair, when both run dirs carry it."""
    tb, tc = load_timing(paths[0]), load_timing(paths[1])
    if tb is None or tc is None or tb.get("_arm") != "baseline" or tc.get("_arm") in (None, "baseline") \
            or not np.array_equal(tb["_arms"]["baseline"], tc["_arms"]["baseline"]):
        return None  # not arms of one timed set, or the first run is not its baseline
    shift = timing_shift(tb, tc["_arm"])
    out = msgspec.to_builtins(timing_summary(tb, tc["_arm"]))
    mde = shift.mde_ms()
    out["mde_ms"] = mde if math.isfinite(mde) else None
    if kernel > 0:
        out["estimator"] = estimator_check(kernel, with_gap, shift)
        out["verdict"] = (verdict(kernel, shift, mde, shift.steps_needed(kernel), unit="blocks")
                          + _estimator_note(out["estimator"], with_gap))
    return out


def compare_runs(base: RunReport, cand: RunReport, paths: tuple[str, ...] | list[str]) -> Comparison:
    scope, scope_text = removed_scope(base, cand)
    kernel, with_gap = scope_estimate(base, scope)
    shift = measure(base, cand, "period_ms")
    span = measure(base, cand, "span_ms")
    out = Comparison(
        baseline=0, candidate=1, scope=scope, scope_text=scope_text,
        estimate_ms={"kernel": kernel, "kernel_plus_gap": with_gap},
        site_changes=site_changes(base, cand), removed_sites=removed_sites(base, scope_kinds(scope, base)),
        timing=_timing_comparison(paths, kernel, with_gap), client=client_comparison(paths, kernel),
    )
    if shift is None:
        out.verdict = "not measurable: each arm needs at least 2 decode steps with a period"
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
    out.verdict = verdict(kernel, shift, mde, need) + _estimator_note(out.estimator, with_gap)
    if span is not None:
        out.gpu_span = {"measured_ms": span.saving_ms, "ci95_ms": [known(x) for x in span.saving_ci95_ms],
                        "noise_ms": {k: known(v) for k, v in span.noise_ms.items()}}
        if kernel > 0:
            out.gpu_span["estimator"] = estimator_check(kernel, with_gap, span)
    return out
