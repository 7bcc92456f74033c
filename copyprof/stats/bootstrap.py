"""Bootstrap intervals (``ci="bootstrap"`` in :func:`copyprof.stats.shift.shift_estimate`).

The default intervals are distribution-free order-statistic ones (stats.py); the bootstrap
is the alternative a user can ask for. This module is imported only when it is asked for,
so scipy.stats (~1 s, ~60 MB) is imported with it.
"""
from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable

import numpy as np
from scipy import stats as scipy_stats


def hl2_stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised two-sample HL (for scipy.stats.bootstrap batches)."""
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    diff = y[..., :, None] - x[..., None, :]
    return np.median(diff.reshape(*diff.shape[:-2], -1), axis=-1)


def walsh_median_stat(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised one-sample HL (median of Walsh averages) for scipy.stats.bootstrap batches."""
    d = np.moveaxis(d, axis, -1)
    i, j = np.triu_indices(d.shape[-1])
    return np.median((d[..., i] + d[..., j]) / 2, axis=-1)


def bootstrap_ci(data: tuple[np.ndarray, ...], stat: Callable[..., np.ndarray], confidence: float,
                  n_resamples: int, seed: int) -> tuple[float, float, str]:
    """scipy BCa interval; percentile where BCa is undefined (heavily tied data)."""
    if min(a.size for a in data) < 2:
        return (-math.inf, math.inf, "bootstrap (too few values)")
    per = int(np.prod([a.size for a in data])) if len(data) == 2 else data[0].size ** 2
    rng_kw = "rng" if "rng" in inspect.signature(scipy_stats.bootstrap).parameters else "random_state"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore")  # scipy warns about degenerate data; we fall back instead
            res = scipy_stats.bootstrap(data, stat, n_resamples=n_resamples, confidence_level=confidence, method=method,
                                  vectorized=True, batch=max(1, 4_000_000 // max(per, 1)),
                                  **{rng_kw: np.random.default_rng(seed)})
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return (lo, hi, f"{method} bootstrap")
    v = float(stat(*data))  # every resample gave the same value (constant data)
    return (v, v, "bootstrap (degenerate: constant statistic)")
