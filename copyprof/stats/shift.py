"""A/B statistics: robust shift with an honest 95 % interval, noise, MDE and sample size.

Why: a one-shot serving A/B (8 requests, median TPOT 25.53 vs 25.75 ms) was read as "neutral
within noise" although nobody could say whether it could have seen the 0.13 ms/step the trace
predicted. Each number here answers one of two questions: what was measured (shift and CI) and
what the sample could have measured (MDE, steps needed).

Signs (used everywhere in copyprof): ``ShiftResult.estimate_ms``/``ci95_ms`` are **candidate -
baseline** (negative: candidate faster, as when a copy is removed); ``saving_ms``/
``saving_ci95_ms`` are **baseline - candidate** (positive: candidate faster), the sign of the
estimates that ``verdict`` compares against.

Estimator and interval (default ``ci="rank"``): unpaired, the two-sample Hodges-Lehmann shift
(median of all m*n differences candidate_j - baseline_i) with the Moses interval (order
statistics of those differences, depth from the Mann-Whitney U null distribution); ``paired``,
the Hodges-Lehmann of the paired differences (median of Walsh averages) with Tukey's interval
from the Wilcoxon signed-rank distribution. Both have coverage >= nominal (up to discreteness)
for ANY continuous distribution - skewed, 10x outliers - *provided observations are independent*
and the arms differ by a shift. Null distributions: scipy's exact ones for small samples (read
off ``mannwhitneyu``/``wilcoxon`` p-values of tie-free samples built to have a given statistic,
as scipy keeps the distributions private), the normal approximation with continuity correction
for large ones (the order statistics and null distributions: stats/ranks.py).
``ci="bootstrap"``: ``scipy.stats.bootstrap`` (BCa) on the same statistic.

Autocorrelation: consecutive decode steps drift (clocks, thermals, caches), so they are not
independent and an iid interval is too narrow (AR(1) phi=0.8: ~45 % coverage in the tests).
``block=b`` analyses means of consecutive non-overlapping batches of b steps (batch means: with
batches longer than the correlation time they are nearly independent, and coverage is back at
~94 %). Drift *between* separately captured arms is confounded with the effect and no statistic
removes it; only interleaving does (replica ``timing.json``: ``paired=True`` on block pairs).

Noise: ``MAD * 1.4826`` per observation - the SD for normal data, unmoved by rare 10x steps.

MDE: normal approximation for the rank test, ``(t_{1-a'/2} + t_power) * sqrt(s_a^2/n_a +
s_b^2/n_b) / sqrt(3/pi)``: the t-test's MDE divided by the square root of the rank test's
efficiency 3/pi under normality, with t quantiles (df n_a+n_b-2; n-1 paired) and a' the exact
test's real size (<= alpha: U is discrete) as small-sample corrections; ``inf`` when the exact
test cannot reject at all (3 vs 3). Simulated power at the MDE in the tests: 0.80 (8 vs 8),
0.82 (40 vs 40), 0.81 (20 pairs); 0.76 with 3 % of 10x outliers (the MAD ignores them, the
rank test loses their information), lower still for strongly skewed small samples.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from copyprof.grouping import median
from copyprof.stats.quantiles import norm_ppf, t_ppf
from copyprof.stats.ranks import achieved_alpha, depth, diff_order_stats, hl_two_sample, walsh_median, walsh_order_stats

ARE_RANK = 3.0 / math.pi  # Wilcoxon / Mann-Whitney vs t under normality (Hodges & Lehmann 1956)


@dataclass(frozen=True)
class ShiftResult:
    """Measured location shift between two arms (all values in ms; see the module sign conventions).

    ``n_baseline``/``n_candidate`` count raw observations (steps, requests or timing blocks);
    ``n_units`` counts what the interval was computed on (the same, or batches when ``block``
    > 1, or pairs when ``paired``). ``noise_ms`` is the raw per-observation robust spread (for
    display); ``unit_noise_ms`` the spread of the analysed units that the MDE must use (for
    ``paired`` the spread of the paired differences divided by sqrt 2, so that the two-sample
    MDE formula gives the one-sample one).
    """

    estimate_ms: float  # candidate - baseline (negative: candidate faster)
    ci95_ms: tuple[float, float]  # interval for estimate_ms, at level ``confidence``
    method: str
    n_baseline: int
    n_candidate: int
    noise_ms: dict[str, float]
    mean_ms: dict[str, float]
    median_ms: dict[str, float]
    confidence: float = 0.95
    paired: bool = False
    block: int = 1
    n_units: dict[str, int] | None = None
    unit_noise_ms: dict[str, float] | None = None
    test: str = "rank"  # "rank" (the rank test's MDE, efficiency 3/pi) or "t" (a t test on the units)
    df: float | None = None  # the t test's degrees of freedom where they are not Welch's (pooled runs)

    @property
    def saving_ms(self) -> float:
        """Measured saving, baseline - candidate (positive: candidate faster)."""
        return -self.estimate_ms

    @property
    def saving_ci95_ms(self) -> tuple[float, float]:
        """Interval for ``saving_ms`` (the shift interval negated and swapped)."""
        return (-self.ci95_ms[1], -self.ci95_ms[0])

    @property
    def resolved(self) -> bool:
        """True when the interval excludes zero, i.e. the rank test rejects "no shift"."""
        lo, hi = self.ci95_ms
        return lo > 0 or hi < 0

    @property
    def effective_noise_ms(self) -> dict[str, float]:
        """Per-step-equivalent noise: ``unit_noise * sqrt(block)`` (includes autocorrelation)."""
        un = self.unit_noise_ms or self.noise_ms
        return {k: v * math.sqrt(self.block) for k, v in un.items()}

    def mde_ms(self, *, alpha: float = 0.05, power: float = 0.8) -> float:
        """MDE of this very analysis (same units, pairing and batch size as the interval)."""
        un = self.unit_noise_ms or self.noise_ms
        nu = self.n_units or {"baseline": self.n_baseline, "candidate": self.n_candidate}
        if self.test == "t":
            from copyprof.stats.between_runs import t_mde

            return t_mde(un["baseline"], un["candidate"], nu["baseline"], nu["candidate"], alpha=alpha, power=power,
                         df=self.df)
        return minimum_detectable_effect(un["baseline"], un["candidate"], nu["baseline"], nu["candidate"],
                                         alpha=alpha, power=power, paired=self.paired)

    def steps_needed(self, effect_ms: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
        """Raw observations (steps) per arm this analysis would need to resolve ``effect_ms``."""
        un = self.unit_noise_ms or self.noise_ms
        if self.test == "t":
            from copyprof.stats.between_runs import t_mde

            if not all(math.isfinite(v) and v >= 0 for v in un.values()) or not effect_ms:
                return 0
            n = 2
            while n < 10**7 and t_mde(un["baseline"], un["candidate"], n, n, alpha=alpha, power=power) > abs(effect_ms):
                n = max(n + 1, int(n * 1.25))
            return n * self.block
        units = steps_needed(effect_ms, un["baseline"], un["candidate"], alpha=alpha, power=power,
                             paired=self.paired)
        return units * self.block

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON dict plus the saving-signed fields; an infinite interval end becomes None."""
        d = asdict(self)
        d["ci95_ms"] = [json_float(v) for v in self.ci95_ms]
        d["saving_ms"] = self.saving_ms
        d["saving_ci95_ms"] = [json_float(v) for v in self.saving_ci95_ms]
        return d


def json_float(x: float) -> float | None:
    """``None`` for inf/nan (strict JSON has no Infinity), the float otherwise."""
    return float(x) if math.isfinite(x) else None


_MAD_TO_SD = 1.0 / NormalDist().inv_cdf(0.75)  # 1.4826: scipy's median_abs_deviation(scale="normal")


def robust_noise(x: np.ndarray) -> float:
    """``MAD * 1.4826``: equals the SD for normal data, ignores a few 10x outlier steps.

    Same value as ``scipy.stats.median_abs_deviation(x, scale="normal")``, computed directly
    because scipy's argument handling costs ~1 ms a call, which dominates simulations.
    """
    x = np.asarray(x, dtype=float)
    return float(_MAD_TO_SD * median(np.abs(x - median(x)))) if x.size else math.nan


def shift_estimate(baseline: np.ndarray, candidate: np.ndarray, *, paired: bool = False,
                   confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0,
                   block: int | None = None, ci: Literal["rank", "bootstrap"] = "rank") -> ShiftResult:
    """Hodges-Lehmann shift candidate - baseline with a ``confidence`` interval.

    ``paired``: ``baseline[i]`` and ``candidate[i]`` belong together (interleaved timing blocks);
    ``block``: analyse means of consecutive batches of ``block`` observations (or of paired
    differences) because consecutive steps are autocorrelated; ``ci``: ``"rank"`` (exact /
    distribution-free, default) or ``"bootstrap"`` (scipy BCa, uses ``n_resamples``/``seed``).
    """
    b, c = _clean(baseline, "baseline"), _clean(candidate, "candidate")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    bs = 1 if block is None else int(block)
    if bs < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    if ci not in ("rank", "bootstrap"):
        raise ValueError(f"ci must be 'rank' or 'bootstrap', got {ci!r}")
    alpha = 1 - confidence
    common: dict[str, Any] = {
        "n_baseline": int(b.size), "n_candidate": int(c.size), "confidence": confidence, "paired": paired,
        "block": bs, "noise_ms": {"baseline": robust_noise(b), "candidate": robust_noise(c)},
        "mean_ms": {"baseline": float(b.mean()), "candidate": float(c.mean())},
        "median_ms": {"baseline": float(np.median(b)), "candidate": float(np.median(c))}}
    batch_note = f" on means of {bs}-step batches" if bs > 1 else ""
    if paired:
        if b.size != c.size:
            raise ValueError(f"paired needs equal lengths, got {b.size} and {c.size}")
        d = _batch_means(c - b, bs)
        est = walsh_median(d)
        if ci == "rank":
            k, top = depth(d.size, d.size, alpha, True), d.size * (d.size + 1) // 2
            lo, hi = walsh_order_stats(d, [k, top + 1 - k]) if k >= 1 else (-math.inf, math.inf)
            kind = "Wilcoxon signed-rank"
        else:
            from copyprof.stats.bootstrap import bootstrap_ci, walsh_median_stat

            lo, hi, kind = bootstrap_ci((d,), walsh_median_stat, confidence, n_resamples, seed)
        method = f"paired Hodges-Lehmann (Walsh averages), {kind} interval{batch_note}"
        un = robust_noise(d) / math.sqrt(2)
        return ShiftResult(estimate_ms=est, ci95_ms=(lo, hi), method=method, **common,
                           n_units={"baseline": int(d.size), "candidate": int(d.size)},
                           unit_noise_ms={"baseline": un, "candidate": un})
    ub, uc = _batch_means(b, bs), _batch_means(c, bs)
    est = hl_two_sample(ub, uc)
    if ci == "rank":
        k, top = depth(ub.size, uc.size, alpha, False), ub.size * uc.size
        lo, hi = diff_order_stats(ub, uc, [k, top + 1 - k]) if k >= 1 else (-math.inf, math.inf)
        kind = "Moses (Mann-Whitney) rank"
    else:
        from copyprof.stats.bootstrap import bootstrap_ci, hl2_stat

        lo, hi, kind = bootstrap_ci((ub, uc), hl2_stat, confidence, n_resamples, seed)
    method = f"Hodges-Lehmann shift, {kind} interval{batch_note}"
    return ShiftResult(estimate_ms=est, ci95_ms=(lo, hi), method=method, **common,
                       n_units={"baseline": int(ub.size), "candidate": int(uc.size)},
                       unit_noise_ms={"baseline": robust_noise(ub), "candidate": robust_noise(uc)})


def minimum_detectable_effect(noise_a: float, noise_b: float, n_a: int, n_b: int, *, alpha: float = 0.05,
                              power: float = 0.8, paired: bool = False) -> float:
    """Smallest |shift| the two-sided rank test detects with probability ``power`` (ms).

    t-corrected normal approximation with the rank test's efficiency 3/pi (module doc); ``inf``
    when the exact test cannot reach ``alpha`` with these sizes. ``paired``: ``n_a == n_b`` pairs and the
    noises are the spread of the paired differences / sqrt 2 (as in ``ShiftResult``).
    """
    if n_a < 1 or n_b < 1 or depth(int(n_a), int(n_b), alpha, paired) < 1:
        return math.inf
    df = n_a - 1 if paired else n_a + n_b - 2
    size = achieved_alpha(int(n_a), int(n_b), alpha, paired)
    z = t_ppf(1 - size / 2, df) + t_ppf(power, df)
    return float(z * math.sqrt(noise_a**2 / n_a + noise_b**2 / n_b) / math.sqrt(ARE_RANK))


def steps_needed(effect_ms: float, noise_a: float, noise_b: float, *, alpha: float = 0.05,
                 power: float = 0.8, ratio: float = 1.0, paired: bool = False) -> int:
    """Observations in arm A (arm B gets ``ceil(ratio * n_a)``) so that MDE <= |effect_ms|.

    The smallest such ``n_a``: the inverse of :func:`minimum_detectable_effect`, so
    ``minimum_detectable_effect(.., n, ceil(ratio*n)) <= |effect_ms|`` holds and fails at n - 1.
    """
    eff = abs(float(effect_ms))
    if not math.isfinite(eff) or eff == 0:
        raise ValueError(f"steps_needed needs a finite non-zero effect, got {effect_ms}")
    if ratio <= 0:
        raise ValueError(f"ratio must be > 0, got {ratio}")
    z = norm_ppf(1 - alpha / 2) + norm_ppf(power)
    n = max(1, math.ceil((z / eff) ** 2 * (noise_a**2 + noise_b**2 / ratio) / ARE_RANK))

    def ok(k: int) -> bool:
        return minimum_detectable_effect(noise_a, noise_b, k, math.ceil(ratio * k), alpha=alpha, power=power,
                                         paired=paired) <= eff
    while not ok(n):  # n came from z quantiles; t quantiles / the exact size / feasibility ask more
        n += 1
    while n > 1 and ok(n - 1):
        n -= 1
    return n


# -- internals -------------------------------------------------------------------------------

def _clean(x: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite values")
    return a


def _batch_means(x: np.ndarray, block: int) -> np.ndarray:
    """Means of ``len(x)//block`` consecutive batches (sizes differ by at most one; none dropped)."""
    if block == 1:
        return x
    k = x.size // block
    if k < 1:
        raise ValueError(f"block={block} is longer than the series ({x.size} values)")
    return np.array([p.mean() for p in np.array_split(x, k)])
