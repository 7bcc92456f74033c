"""A/B statistics with runs as the unit of replication.

Why runs: two boots of identical vLLM code on one H200 ran 4.40 and 4.87 ms per step, five to
ten times the step-to-step noise inside either run. Steps of one run, and requests of one
cohort (they share every step), are repeated measurements of *that boot*; they say nothing of
how much the next boot will differ. So a between-arm interval for anything a boot can move
(step period, GPU span, client TPOT) is computed on one value per run — its median over the
run's steps or requests; the steps only sharpen that value — and the spread between runs of
the same arm.

The interval: the difference of the arms' mean run values with a pooled-variance t interval,
the between-run variance pooled over every group of runs that share code (the two arms, and an
A/A of the same setup when one is given): ``s² = Σ_g Σ_r (y_gr − ȳ_g)² / Σ_g (n_g − 1)``,
``SE = s √(1/k + 1/m)``, ``df = Σ_g (n_g − 1)``. It is exact when run values are normal with one
between-run variance (a boot effect plus a step average: tests/analysis/test_coverage_runs.py
simulates both, with autocorrelated steps). With one run per arm and no A/A, ``df = 0``: the
between-run variation is not measured and no boot-dependent measure can be resolved; the
result says how many runs per arm would resolve the estimate where a spread is known.

Sessions as blocks: boots of one `copyprof run --repeat --interleave` follow each other on one
machine; boots of another such run may land on another machine, whose GPU runs the same kernels
a fixed fraction faster or slower (the OLMo-hybrid graph A/B: 0.4 % lower GPU busy time in both
arms on the second machine, 0.0034 ms, half the patch's saving). When the runs come from two or
more sessions and a session holds both arms, the arm effect is read within sessions — the
two-way additive model ``y = arm + session (+ one mean per A/A group)`` fitted by least squares,
the interval a t on its residual (``df = n − arms − sessions − A/A groups + 1``) — so what moves
a whole session cancels instead of widening the interval, as in a randomised block design. One
session, or sessions that each hold one arm (the patch and the session cannot be told apart),
leave the plain pooled t above, and the second case is said.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from copyprof.stats.quantiles import t_ppf



@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    return t_ppf(p, df)


@dataclass(frozen=True)
class RunShift:
    """Baseline − candidate of the arms' mean run values (positive: the candidate is faster)."""

    saving_ms: float
    ci95_ms: tuple[float | None, float | None]
    sd_between_ms: float | None  # the pooled between-run SD (None: not measured)
    df: int
    runs: dict[str, int]  # runs per arm
    values_ms: dict[str, list[float]]  # each run's value, per arm
    aa_runs: int = 0  # runs of the A/A groups that were pooled in
    sessions: int = 0  # capture sessions the arm effect was read within (0: not blocked)
    se_factor: float | None = None  # SE / SD of the saving (√(1/k + 1/m) when not blocked)

    @property
    def resolved(self) -> bool:
        lo, hi = self.ci95_ms
        return lo is not None and hi is not None and (lo > 0 or hi < 0)

    def mde_ms(self, *, alpha: float = 0.05, power: float = 0.8) -> float | None:
        """Smallest saving this design detects with ``power`` (None without a spread)."""
        if self.sd_between_ms is None or self.df < 1:
            return None
        k, m = self.runs["baseline"], self.runs["candidate"]
        return mde(self.sd_between_ms, k, m, self.df, alpha=alpha, power=power, se_factor=self.se_factor)

    def runs_needed(self, effect_ms: float) -> int | None:
        """Runs per arm for an MDE at or under ``effect_ms`` (None: no spread or no effect)."""
        if self.sd_between_ms is None or effect_ms <= 0:
            return None
        return runs_needed(self.sd_between_ms, effect_ms, extra_df=self.aa_df)

    @property
    def aa_df(self) -> int:
        blocks = max(self.sessions - 1, 0)  # a session's mean costs a degree of freedom
        return max(self.df - (self.runs["baseline"] - 1) - (self.runs["candidate"] - 1) + blocks, 0)


def t_mde(sd_a: float, sd_b: float, n_a: int, n_b: int, *, alpha: float = 0.05, power: float = 0.8,
          df: float | None = None) -> float:
    """Smallest |shift| a two-sided t test on these units detects with ``power`` (ms): Welch's
    degrees of freedom unless ``df`` is given (a pooled variance)."""
    if not (math.isfinite(sd_a) and math.isfinite(sd_b)) or (df is None and (n_a < 2 or n_b < 2)) or (df is not None and df < 1):
        return math.inf
    va, vb = sd_a**2, sd_b**2
    if df is None:
        num = (va / n_a + vb / n_b) ** 2
        den = (va / n_a) ** 2 / (n_a - 1) + (vb / n_b) ** 2 / (n_b - 1)
        df = num / den if den > 0 else n_a + n_b - 2
    return float((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * math.sqrt(va / n_a + vb / n_b))


def mde(sd: float, k: int, m: int, df: int, *, alpha: float = 0.05, power: float = 0.8,
        se_factor: float | None = None) -> float:
    """``se_factor``: SE / SD of the saving where it is not √(1/k + 1/m) (arms read within sessions)."""
    factor = se_factor if se_factor is not None else math.sqrt(1 / k + 1 / m)
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * sd * factor


def runs_needed(sd: float, effect_ms: float, *, extra_df: int = 0) -> int:
    """Runs per arm (k = m) at which the MDE falls to ``effect_ms``: the smallest such k."""
    def ok(k: int) -> bool:
        return mde(sd, k, k, 2 * k - 2 + extra_df) <= effect_ms
    hi = 2
    while not ok(hi) and hi < 10**9:
        hi *= 2
    lo = max(2, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def pooled_sd(groups: list[np.ndarray]) -> tuple[float | None, int]:
    """The pooled within-group SD of run values and its degrees of freedom."""
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g))
    df = sum(max(len(g) - 1, 0) for g in groups)
    return (math.sqrt(ss / df), df) if df > 0 else (None, 0)


def run_shift(baseline: list[float], candidate: list[float], aa_groups: list[list[float]] | None = None) -> RunShift:
    """The between-arm shift of run values; ``aa_groups``: runs of identical code in the same
    setup (each group one code), whose spread is pooled into the between-run variance."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    aa = [np.asarray(g, dtype=float) for g in (aa_groups or []) if len(g) >= 2]
    sd, df = pooled_sd([b, c, *aa])
    saving = float(b.mean() - c.mean())
    ci: tuple[float | None, float | None] = (None, None)
    if sd is not None:
        half = t_quantile(0.975, df) * sd * math.sqrt(1 / len(b) + 1 / len(c))
        ci = (saving - half, saving + half)
    return RunShift(saving_ms=saving, ci95_ms=ci, sd_between_ms=sd, df=df,
                    runs={"baseline": len(b), "candidate": len(c)},
                    values_ms={"baseline": b.tolist(), "candidate": c.tolist()}, aa_runs=sum(len(g) for g in aa))


def blocked_shift(baseline: list[float], candidate: list[float], sessions: tuple[list[str], list[str]],
                  aa_groups: list[list[float]] | None = None) -> RunShift | None:
    """The arm effect within capture sessions (module docstring), or None where blocking does not
    apply: fewer than two sessions, or no session holding both arms, or no residual left."""
    b_s, c_s = sessions
    names = sorted(set(b_s) | set(c_s))
    if len(names) < 2 or not set(b_s) & set(c_s):
        return None
    aa = [np.asarray(g, dtype=float) for g in (aa_groups or []) if len(g) >= 2]
    y = np.concatenate([np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float), *aa])
    cols = 1 + len(names) + len(aa)
    x = np.zeros((len(y), cols))
    x[len(baseline):len(baseline) + len(candidate), 0] = 1.0  # the candidate arm
    for row, s in enumerate([*b_s, *c_s]):
        x[row, 1 + names.index(s)] = 1.0
    row = len(baseline) + len(candidate)
    for j, g in enumerate(aa):
        x[row:row + len(g), 1 + len(names) + j] = 1.0
        row += len(g)
    df = len(y) - cols
    if np.linalg.matrix_rank(x) < cols or df < 1:
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    sd = math.sqrt(float(resid @ resid) / df)
    factor = math.sqrt(float(np.linalg.inv(x.T @ x)[0, 0]))
    saving = -float(coef[0])
    half = t_quantile(0.975, df) * sd * factor
    return RunShift(saving_ms=saving, ci95_ms=(saving - half, saving + half), sd_between_ms=sd, df=df,
                    runs={"baseline": len(baseline), "candidate": len(candidate)},
                    values_ms={"baseline": [float(v) for v in baseline], "candidate": [float(v) for v in candidate]},
                    aa_runs=sum(len(g) for g in aa), sessions=len(names), se_factor=factor)
