"""The rank machinery under the Hodges-Lehmann shift: order statistics of pairwise differences
and Walsh averages, and the exact null distributions that set an interval's depth.

Why a module of its own: the estimators and their intervals (stats/shift.py) need only "the
k-th smallest difference" and "how deep the interval lies"; how these are found is a separate
idea with its own cost trade-offs. Order statistics are taken from the materialised set when it
is small and by bisection on value (counting with sorted arrays) when it is not, so memory
stays bounded for long series. The null distributions of the Mann-Whitney U and the Wilcoxon
signed-rank statistic are scipy's exact ones for small samples (read off ``mannwhitneyu`` /
``wilcoxon`` p-values of tie-free samples built to have a given statistic, as scipy keeps the
distributions private), the normal approximation with continuity correction for large ones.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from types import ModuleType

import numpy as np

from copyprof.stats.quantiles import norm_ppf

_MATERIALISE_MAX = 2_000_000  # pairwise differences held in memory; above: selection by bisection
_EXACT_MWU_MAX = 2_500  # m*n up to which the exact U distribution is used
_EXACT_SR_MAX = 400  # n up to which the exact signed-rank distribution is used


def _stats() -> ModuleType:
    """scipy.stats, imported on first use: it costs ~1 s and ~60 MB, and a report without an
    A/B comparison or replica timing never needs it."""
    from scipy import stats

    return stats


def _kth_smallest(values: Callable[[], np.ndarray], count_le: Callable[[float], int], total: int,
                  lo: float, hi: float, ks: list[int]) -> list[float]:
    """1-based order statistics of an implicit set: materialised when small, else bisection on value."""
    if total <= _MATERIALISE_MAX:
        v = values()
        part = np.partition(v, [k - 1 for k in ks])
        return [float(part[k - 1]) for k in ks]
    out = []
    for k in ks:
        a, b = lo - (hi - lo + 1.0), hi  # count_le(a) < k <= count_le(b)
        for _ in range(200):
            mid = a + (b - a) / 2
            if not a < mid < b:
                break
            a, b = (a, mid) if count_le(mid) >= k else (mid, b)
        out.append(float(b))
    return out


def diff_order_stats(x: np.ndarray, y: np.ndarray, ks: list[int]) -> list[float]:
    """Order statistics of the m*n differences y_j - x_i."""
    xs, ys = np.sort(x), np.sort(y)

    def count_le(v: float) -> int:  # y_j - x_i <= v  <=>  x_i >= y_j - v
        return int((xs.size - np.searchsorted(xs, ys - v, side="left")).sum())
    return _kth_smallest(lambda: np.subtract.outer(ys, xs).ravel(), count_le,
                         xs.size * ys.size, ys[0] - xs[-1], ys[-1] - xs[0], ks)


def walsh_order_stats(d: np.ndarray, ks: list[int]) -> list[float]:
    """Order statistics of the n(n+1)/2 Walsh averages (d_i + d_j)/2, i <= j."""
    ds = np.sort(d)
    n = ds.size
    idx = np.arange(n)

    def values() -> np.ndarray:
        i, j = np.triu_indices(n)
        return (ds[i] + ds[j]) / 2

    def count_le(v: float) -> int:  # pairs i <= j with d_i + d_j <= 2v
        return int(np.clip(np.searchsorted(ds, 2 * v - ds, side="right") - idx, 0, None).sum())
    return _kth_smallest(values, count_le, n * (n + 1) // 2, ds[0], ds[-1], ks)


def _median_ks(total: int) -> list[int]:
    return [(total + 1) // 2] if total % 2 else [total // 2, total // 2 + 1]


def hl_two_sample(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(diff_order_stats(x, y, _median_ks(x.size * y.size))))


def walsh_median(d: np.ndarray) -> float:
    n = d.size
    return float(np.mean(walsh_order_stats(d, _median_ks(n * (n + 1) // 2))))


def _mwu_cdf(u: int, m: int, n: int) -> float:
    """P(U <= u) under H0, U = #{x_i > y_j}, |x| = m: scipy's exact test on a sample with U = u."""
    y = 2.0 * np.arange(n)
    x = 2.0 * np.clip(u - n * np.arange(m), 0, n) - 1.0  # x_i sits above exactly c_i of the y's
    return float(_stats().mannwhitneyu(x, y, alternative="less", method="exact").pvalue)


def _signed_rank_cdf(t: int, n: int) -> float:
    """P(T+ <= t) under H0: scipy's exact test on +-1..n with positive ranks summing to t."""
    d = -np.arange(1, n + 1, dtype=float)
    rem = t
    for r in range(n, 0, -1):  # greedy subset of 1..n summing to t (always exists for t <= n(n+1)/2)
        if r <= rem:
            d[r - 1], rem = r, rem - r
    return float(_stats().wilcoxon(d, alternative="less", method="exact").pvalue)


def _null(n_a: int, n_b: int, paired: bool) -> tuple[Callable[[int], float], float, float, int, bool]:
    """Null distribution of the rank statistic (U, or T+ when paired): cdf, mean, SD, max, exact?"""
    if paired:
        top = n_a * (n_a + 1) // 2
        return ((lambda t: _signed_rank_cdf(t, n_a)), top / 2, math.sqrt(top * (2 * n_a + 1) / 12), top,
                n_a <= _EXACT_SR_MAX)
    mn = n_a * n_b
    return (lambda u: _mwu_cdf(u, n_a, n_b)), mn / 2, math.sqrt(mn * (n_a + n_b + 1) / 12), mn, mn <= _EXACT_MWU_MAX


@lru_cache(maxsize=1024)
def depth(n_a: int, n_b: int, alpha: float, paired: bool) -> int:
    """Number d of statistic values u >= 0 with P(S <= u) <= alpha/2 (S symmetric on 0..top).

    The interval is [k_d, k_{top+1-d}] of the ordered pairwise differences (Walsh averages when
    paired), because P(true shift < k_d) = P(S <= d-1); d = 0: no finite interval at this level.
    """
    cdf, mean, sd, top, exact = _null(n_a, n_b, paired)
    if not exact:
        z = norm_ppf(1 - alpha / 2)
        return int(min(max(math.floor(mean - 0.5 - z * sd) + 1, 0), top // 2 + 1))
    lo, hi = 0, top // 2 + 1  # answer in [lo, hi]; cdf(u) <= alpha/2 for all u < answer
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf(mid) <= alpha / 2 + 1e-12:
            lo = mid + 1
        else:
            hi = mid
    return lo


@lru_cache(maxsize=1024)
def achieved_alpha(n_a: int, n_b: int, alpha: float, paired: bool) -> float:
    """The exact test's real two-sided size (<= alpha: the statistic is discrete); alpha if approximated."""
    d = depth(n_a, n_b, alpha, paired)
    cdf, _, _, _, exact = _null(n_a, n_b, paired)
    return 2 * cdf(d - 1) if exact and d >= 1 else alpha
