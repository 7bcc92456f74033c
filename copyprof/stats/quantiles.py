"""Quantiles of the t and normal distributions, from scipy.special.

Why not scipy.stats: ``scipy.stats.t.ppf`` and ``scipy.stats.norm.ppf`` call these very
functions (``stdtrit``, ``ndtri``; the values are identical), but importing scipy.stats costs
about a second, which a single run's report (steps needed to see a copy group) never needs.
"""
from __future__ import annotations


def t_ppf(p: float, df: float) -> float:
    """Student's t quantile ``p`` with ``df`` degrees of freedom."""
    from scipy import special

    return float(special.stdtrit(df, p))


def norm_ppf(p: float) -> float:
    """The standard normal quantile ``p``."""
    from scipy import special

    return float(special.ndtri(p))
