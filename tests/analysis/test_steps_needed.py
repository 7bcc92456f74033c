"""A copy group's "steps to see it": Guenther's t-corrected size agrees with the exact t-based one.

The report computes it without scipy (a single run's report must not pay the ~1 s import of
scipy.stats); the exact size, found here by stepping n with scipy's t quantiles until the
two-sided 5 % t test at 80 % power resolves the effect, is the reference it must stay within one
step of, from effects of 1/20 of the noise to 5 times it.
"""
from __future__ import annotations

import math

import pytest

from copyprof.analysis.cost.candidates import steps_to_see as steps_needed_for_test

stats = pytest.importorskip("scipy.stats")


def exact(effect: float, noise: float) -> int:
    n = 2
    while (stats.t.ppf(0.975, 2 * n - 2) + stats.t.ppf(0.8, 2 * n - 2)) * noise * math.sqrt(2 / n) > effect:
        n += 1
    return n


@pytest.mark.parametrize("ratio", [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0])
def test_within_one_step_of_the_exact_t_size(ratio: float) -> None:
    got, want = steps_needed_for_test(ratio * 0.4, 0.4), exact(ratio * 0.4, 0.4)
    assert abs(got - want) <= 1 and got >= 2, (got, want)


def test_no_noise_or_no_effect_has_no_answer() -> None:
    assert steps_needed_for_test(0.1, None) is None and steps_needed_for_test(0.0, 1.0) is None
