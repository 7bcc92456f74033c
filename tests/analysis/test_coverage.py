"""Coverage of every interval the report prints, by simulation, against exact expectations.

Which intervals the report prints (analysis/ab/units.py, replica_timing.py, client_metrics.py):
* the replica's interleaved timing blocks: the paired Hodges-Lehmann with the Wilcoxon
  signed-rank interval;
* the Hodges-Lehmann shift with the Moses interval, the library's unpaired interval;
* step periods and GPU spans of arms from one process: a t interval on batch means
  (``units.within_process``), checked here on autocorrelated steps;
* anything a boot can move, between separate boots: runs as the unit, simulated in
  test_coverage_runs.py.
(The BCa bootstrap, ``ci="bootstrap"``, is an API option the report never uses: test_stats.py.)

What is expected, and where it comes from: for continuous data differing by a pure shift, the
order-statistic intervals miss on each side with probability exactly P(S <= d - 1), S the
rank statistic (Mann-Whitney U, or the signed-rank T+) under the null and d the depth of the
nominal 95 % interval (the largest d with that probability <= 2.5 %). The null distributions
are computed here from their generating functions (Gaussian binomial coefficients; the
product of (1 + q^k) / 2), not with copyprof or scipy. Above copyprof's exact-size limits it
uses a normal approximation of the depth; the exact expectation still holds to within a
fraction of the tolerance (one order statistic).

Each exact case runs REPS = 4,000 replications (data drawn for all of them in one array
operation, fixed seeds; the library called once per replication, ~0.2 ms) and checks the
coverage and *each tail* to within 4 standard errors of the expectation: +-1.4 points of
coverage and +-1.0 point per tail, so a 92.5 %, 97.5 % or 99 % interval in place of the 95 %
one, or an interval shifted to one side, fails. The report's batched path on autocorrelated
steps is approximate by nature and gets a band instead (2,000 replications; a known defect,
recorded as a strict xfail).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from copyprof.stats import ranks as R
from copyprof.analysis.ab.units import within_process
from copyprof.stats.shift import shift_estimate

REPS = 4000
MU, SIGMA = 25.0, 0.3  # a decode step of ~25 ms with 0.3 ms of noise
Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return MU + rng.normal(0, SIGMA, shape)


def lognormal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Right-skewed like real step periods (skewness ~1.75)."""
    return MU + SIGMA * rng.lognormal(0, 0.5, shape)


def outliers(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Normal bulk plus 3 % of steps ~10x as long (GC pauses, scheduler hiccups)."""
    x = normal(rng, shape)
    return np.where(rng.random(shape) < 0.03, x + 9 * MU, x)


def ar1(rng: np.random.Generator, shape: tuple[int, int], phi: float) -> np.ndarray:
    """Stationary AR(1) noise with marginal SD = SIGMA along each row: drift between steps."""
    from scipy import signal  # here, not at the top: importing scipy.signal costs every xdist worker 2 s at collection

    return signal.lfilter([1.0], [1.0, -phi], rng.normal(0, SIGMA * math.sqrt(1 - phi**2), shape), axis=1)


# -- exact null distributions ----------------------------------------------------------------

def mann_whitney_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u), u = 0..mn: coefficients of the Gaussian binomial [m+n choose m]_q, exact integers."""
    c = [1] + [0] * (m * n)
    for i in range(1, m + 1):  # times (1 - q^(n+i)) / (1 - q^i): a polynomial after every step
        k = n + i
        for u in range(m * n, k - 1, -1):
            c[u] -= c[u - k]
        for u in range(i, m * n + 1):
            c[u] += c[u - i]
    total = math.comb(m + n, m)
    assert sum(c) == total and min(c) >= 0
    return np.cumsum([x / total for x in c])


def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t), t = 0..n(n+1)/2: coefficients of prod_k (1 + q^k) / 2."""
    p = np.zeros(n * (n + 1) // 2 + 1)
    p[0] = 1.0
    for k in range(1, n + 1):
        shifted = np.zeros_like(p)
        shifted[k:] = p[:-k]
        p = (p + shifted) / 2
    return np.cumsum(p)


def tail_of_95(cdf: np.ndarray) -> float:
    """Miss probability per side of the nominal 95 % order-statistic interval: P(S <= d - 1)."""
    ok = cdf[cdf <= 0.025 + 1e-12]
    return float(ok[-1]) if len(ok) else 0.0


def test_null_distributions_give_the_published_critical_values() -> None:
    """Standard tables, two-sided 0.05: Mann-Whitney 8 vs 8 rejects for U <= 13; signed rank
    rejects for T <= 3 at n = 8 and T <= 0 at n = 6, and never at n = 5."""
    for cdf, critical in ((mann_whitney_cdf(8, 8), 13), (signed_rank_cdf(8), 3), (signed_rank_cdf(6), 0)):
        assert cdf[critical] <= 0.025 < cdf[critical + 1]
    assert signed_rank_cdf(5)[0] > 0.025 and tail_of_95(signed_rank_cdf(5)) == 0.0
    assert mann_whitney_cdf(3, 4)[-1] == pytest.approx(1.0) and signed_rank_cdf(40)[-1] == pytest.approx(1.0)


def check(lo: np.ndarray, hi: np.ndarray, truth: float, tail: float) -> None:
    reps = len(lo)
    below, above = float(np.mean(truth < lo)), float(np.mean(truth > hi))
    cover = 1.0 - below - above
    se_tail = math.sqrt(tail * (1 - tail) / reps)
    se_cover = math.sqrt(2 * tail * (1 - 2 * tail) / reps)
    assert abs(cover - (1 - 2 * tail)) <= 4 * se_cover, f"coverage {cover:.4f}, expected {1 - 2 * tail:.4f}"
    assert abs(below - tail) <= 4 * se_tail, f"misses below {below:.4f}, expected {tail:.4f}"
    assert abs(above - tail) <= 4 * se_tail, f"misses above {above:.4f}, expected {tail:.4f}"


def intervals(pairs: list[tuple[np.ndarray, np.ndarray]], **kw: object) -> tuple[np.ndarray, np.ndarray]:
    ci = np.array([shift_estimate(b, c, **kw).ci95_ms for b, c in pairs])
    return ci[:, 0], ci[:, 1]


# -- unpaired Moses interval: step periods / spans (unbatched) and client TPOT -------------------

@pytest.mark.parametrize("draw,n_b,n_c,seed", [
    (normal, 25, 35, 10), (lognormal, 25, 35, 11), (outliers, 25, 35, 12),  # exact U distribution
    (normal, 8, 8, 13),  # 8 requests per arm, the PR #50847 serving A/B
    (lognormal, 60, 60, 14),  # 3,600 > 2,500 pairs: the depth from the normal approximation
], ids=["normal-25v35", "lognormal-25v35", "outliers-25v35", "normal-8v8", "lognormal-60v60-approx"])
def test_moses_interval_coverage(draw: Draw, n_b: int, n_c: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    delta = 0.13  # candidate faster by the published MLA saving
    base, cand = draw(rng, (REPS, n_b)), draw(rng, (REPS, n_c)) - delta
    lo, hi = intervals(list(zip(base, cand)))
    check(lo, hi, -delta, tail_of_95(mann_whitney_cdf(n_b, n_c)))


# -- paired signed-rank interval: the replica's interleaved timing blocks ------------------------

@pytest.mark.parametrize("pairs,exact_limit,seed", [(40, None, 20), (8, None, 21), (60, 50, 22)],
                         ids=["40-pairs", "8-pairs", "60-pairs-approx"])
def test_paired_interval_coverage_despite_drift(monkeypatch: pytest.MonkeyPatch, pairs: int,
                                                exact_limit: int | None, seed: int) -> None:
    """Blocks of both arms share a random-walk drift (what interleaving is for); the paired
    differences are iid, so the signed-rank interval is exact for them. Above 400 pairs copyprof
    takes the depth from a normal approximation; that path is checked at 60 pairs with the limit
    lowered to 50 (above 400 pairs each replication costs ~2.5 ms of Walsh averages, and the
    approximation only improves with n)."""
    if exact_limit is not None:
        monkeypatch.setattr(R, "_EXACT_SR_MAX", exact_limit)
        R.depth.cache_clear()  # depths are cached per (n, alpha, paired)
        R.achieved_alpha.cache_clear()
    rng = np.random.default_rng(seed)
    delta = 0.05
    drift = np.cumsum(rng.normal(0, 0.05, (REPS, pairs)), axis=1)
    base = MU + drift + rng.normal(0, 0.02, (REPS, pairs))
    cand = MU - delta + drift + rng.normal(0, 0.02, (REPS, pairs))
    try:
        lo, hi = intervals(list(zip(base, cand)), paired=True)
    finally:
        R.depth.cache_clear()
        R.achieved_alpha.cache_clear()
    check(lo, hi, -delta, tail_of_95(signed_rank_cdf(pairs)))


# -- batched Moses interval: step periods on means of consecutive batches -------------------------

def test_batched_interval_coverage_is_exact_on_independent_batches() -> None:
    """400 iid steps per arm in batches of 25: the 16 batch means per arm are iid, so the interval
    must have the exact 16-vs-16 Moses coverage (a depth taken from the 400 steps, or
    overlapping batches, would not)."""
    rng = np.random.default_rng(30)
    delta = 0.05
    base, cand = lognormal(rng, (REPS, 400)), lognormal(rng, (REPS, 400)) - delta
    lo, hi = intervals(list(zip(base, cand)), block=25)
    check(lo, hi, -delta, tail_of_95(mann_whitney_cdf(16, 16)))


def test_iid_interval_fails_on_autocorrelated_steps() -> None:
    """Why batches exist: AR(1) steps (phi = 0.8) drive the single-step interval's coverage far
    below 95 % (the simulation can tell dependent data from independent)."""
    rng = np.random.default_rng(31)
    delta, reps = 0.05, 500  # ~45 % coverage: 500 replications tell it from 95 % by far
    base, cand = MU + ar1(rng, (reps, 400), 0.8), MU - delta + ar1(rng, (reps, 400), 0.8)
    lo, hi = intervals(list(zip(base, cand)))
    assert np.mean((lo <= -delta) & (-delta <= hi)) < 0.8


@pytest.mark.parametrize(("phi", "steps"), [(0.5, 200), (0.8, 400)])
def test_report_batched_interval_coverage_on_autocorrelated_steps(phi: float, steps: int) -> None:
    """The report's own path (units.within_process picks the batch length from the series): batch means
    are only nearly independent, so an approximate method's band: coverage 93-97 %, each tail
    1-4 %. Batches of one correlation time covered 86-89 % here (the defect this test found);
    units.BATCH_TAUS says what longer batches give."""
    rng = np.random.default_rng(33)
    delta, reps = 0.05, 2000
    base, cand = MU + ar1(rng, (reps, steps), phi), MU - delta + ar1(rng, (reps, steps), phi)
    ci = np.array([within_process(b, c).ci95_ms for b, c in zip(base, cand)])
    below, above = np.mean(-delta < ci[:, 0]), np.mean(-delta > ci[:, 1])
    assert 0.93 <= 1 - below - above <= 0.97, (below, above)
    assert 0.01 <= below <= 0.04 and 0.01 <= above <= 0.04, (below, above)
