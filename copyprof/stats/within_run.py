"""Two arms' step series inside one process: a t interval on batch means.

Where both arms' steps come from one process (the replica engine's arms, generated traces) the
steps are the unit, but consecutive steps drift together. Means of consecutive batches of
``3 τ`` steps (τ the integrated autocorrelation time) are close to independent; a Welch t
interval on those means stays finite with two batches per arm, which is all a 20-step run
holds, where a rank interval on two or three batch means cannot reach 95 % at all. Coverage
under AR(1) steps is simulated in tests/analysis/test_coverage_runs.py. This interval says
nothing about separate boots: analysis/ab uses it only where the arms share a process, and
says so.
"""
from __future__ import annotations

import math

import numpy as np

from copyprof.stats.shift import ShiftResult, robust_noise
from copyprof.stats.between_runs import t_quantile


def batch_means(x: np.ndarray, block: int) -> np.ndarray:
    """Means of ``len(x)//block`` consecutive batches (sizes differ by at most one; none dropped)."""
    if block <= 1:
        return np.asarray(x, dtype=float)
    k = max(len(x) // block, 1)
    return np.array([p.mean() for p in np.array_split(np.asarray(x, dtype=float), k)])


def welch_df(va: float, na: int, vb: float, nb: int) -> float:
    num = (va / na + vb / nb) ** 2
    den = (va / na) ** 2 / max(na - 1, 1) + (vb / nb) ** 2 / max(nb - 1, 1)
    return num / den if den > 0 else float(na + nb - 2)


def batch_t_shift(baseline: np.ndarray, candidate: np.ndarray, block: int, confidence: float = 0.95) -> ShiftResult:
    """Candidate − baseline difference of means, Welch t interval on batch means."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    ub, uc = batch_means(b, block), batch_means(c, block)
    est = float(uc.mean() - ub.mean())
    lo = hi = math.inf
    if len(ub) >= 2 and len(uc) >= 2:
        va, vc = float(ub.var(ddof=1)), float(uc.var(ddof=1))
        se = math.sqrt(va / len(ub) + vc / len(uc))
        df = welch_df(va, len(ub), vc, len(uc))
        half = t_quantile(1 - (1 - confidence) / 2, df) * se if se > 0 else 0.0
        lo, hi = est - half, est + half
    else:
        lo = -math.inf
    note = f" on means of {block}-step batches" if block > 1 else ""
    return ShiftResult(
        estimate_ms=est, ci95_ms=(lo, hi), method=f"difference of means, Welch t interval{note}",
        n_baseline=int(b.size), n_candidate=int(c.size), confidence=confidence, block=block,
        noise_ms={"baseline": robust_noise(b), "candidate": robust_noise(c)},
        mean_ms={"baseline": float(b.mean()), "candidate": float(c.mean())},
        median_ms={"baseline": float(np.median(b)), "candidate": float(np.median(c))},
        n_units={"baseline": int(ub.size), "candidate": int(uc.size)},
        unit_noise_ms={"baseline": float(ub.std(ddof=1)) if len(ub) > 1 else math.nan,
                       "candidate": float(uc.std(ddof=1)) if len(uc) > 1 else math.nan},
        test="t")
