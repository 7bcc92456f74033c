"""Verdict wording: one test per branch of the decision table, signs spelled out.

ShiftResults are built by hand so that each test controls the interval exactly. Remember:
``ShiftResult.estimate_ms``/``ci95_ms`` are candidate - baseline (negative = faster), while the
estimate handed to ``verdict`` is a saving, baseline - candidate (positive = faster).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from copyprof.stats.shift import ShiftResult, shift_estimate
from copyprof.analysis.ab.verdict import (
    VERDICT_PREFIX,
    classify,
    estimator_check,
    fmt_ms,
    verdict,
)


def measured(saving: float, lo: float, hi: float, n: int = 500) -> ShiftResult:
    """A ShiftResult whose *saving* is ``saving`` with saving interval [lo, hi]."""
    assert lo <= saving <= hi
    return ShiftResult(estimate_ms=-saving, ci95_ms=(-hi, -lo), method="test", n_baseline=n, n_candidate=n,
                       noise_ms={"baseline": 0.3, "candidate": 0.3}, mean_ms={"baseline": 25.0, "candidate": 25.0},
                       median_ms={"baseline": 25.0, "candidate": 25.0})


@pytest.mark.parametrize("estimate,saving,lo,hi,key", [
    (0.13, 0.12, 0.10, 0.14, "consistent"),        # estimate inside a CI that excludes zero
    (0.13, 0.30, 0.25, 0.35, "larger"),            # whole CI above the estimate
    (0.13, 0.06, 0.04, 0.08, "smaller"),           # CI between zero and the estimate
    (0.13, 0.01, -0.02, 0.05, "smaller"),          # CI contains zero but excludes the estimate
    (0.13, -0.2, -0.3, -0.1, "opposite"),          # candidate measurably slower
    (0.13, -0.22, -0.6, 0.2, "not-resolvable"),    # PR #50847: CI holds both 0 and 0.13
    (0.0, 0.01, -0.05, 0.07, "none-none"),         # nothing removed, nothing measured
    (0.0, 0.2, 0.1, 0.3, "none-measured"),         # nothing removed, yet faster
    (-0.13, -0.12, -0.15, -0.10, "consistent"),    # an added copy, measured as predicted
    (-0.13, -0.30, -0.35, -0.25, "larger"),        # an added copy costs more than predicted
    (-0.13, 0.2, 0.1, 0.3, "opposite"),            # predicted slower, measured faster
])
def test_each_branch_is_classified_and_worded(estimate: float, saving: float, lo: float, hi: float,
                                              key: str) -> None:
    """The key follows the module's decision table and the sentence starts with its prefix."""
    shift = measured(saving, lo, hi)
    assert classify(estimate, shift) == key
    text = verdict(estimate, shift, mde_ms=0.05, steps_needed=800)
    assert text.startswith(VERDICT_PREFIX[key]), text
    assert fmt_ms(saving) in text and fmt_ms(lo) in text and fmt_ms(hi) in text  # the numbers that decided it


def test_not_resolvable_names_the_sample_that_would_resolve_it() -> None:
    """The PR #50847 case: 8 requests, MDE 0.46 ms, estimate 0.13 ms -> say so and how many
    requests per arm would resolve 0.13 ms."""
    shift = measured(-0.22, -0.6, 0.2, n=8)
    text = verdict(0.13, shift, mde_ms=0.4627, steps_needed=89, unit="requests")
    assert text.startswith("not resolvable with this sample (need >= 89 requests per arm to resolve 0.13 ms)")
    assert "resolves only effects above 0.463 ms" in text and "8 vs 8 requests" in text


def test_underpowered_branches_also_say_what_sample_is_needed() -> None:
    """Even a lucky 'consistent' from a sample whose MDE exceeds the estimate mentions the
    sample needed; a well-powered one does not clutter the sentence with it."""
    shift = measured(0.13, 0.01, 0.25)
    assert "need >= 400 steps per arm" in verdict(0.13, shift, mde_ms=0.2, steps_needed=400)
    assert "need >=" not in verdict(0.13, shift, mde_ms=0.1, steps_needed=400)


def test_infinite_interval_is_reported_as_such() -> None:
    """3 vs 3 has no finite 95 % rank interval: not resolvable, and no '-inf to inf' numbers."""
    shift = ShiftResult(estimate_ms=0.1, ci95_ms=(-math.inf, math.inf), method="test", n_baseline=3, n_candidate=3,
                        noise_ms={"baseline": 0.3, "candidate": 0.3}, mean_ms={"baseline": 1.0, "candidate": 1.0},
                        median_ms={"baseline": 1.0, "candidate": 1.0})
    text = verdict(0.13, shift, mde_ms=math.inf, steps_needed=89)
    assert classify(0.13, shift) == "not-resolvable"
    assert "no finite 95 % CI" in text and "too small to resolve any effect" in text


def test_end_to_end_simulated_saving_is_consistent() -> None:
    """Simulated arms with a true 0.13 ms saving and 0.3 ms noise, 2000 steps each (MDE ~0.03 ms):
    the verdict on the 0.13 ms estimate must be 'consistent', on a 0.5 ms one 'smaller'."""
    rng = np.random.default_rng(5)
    shift = shift_estimate(25 + rng.normal(0, 0.3, 2000), 24.87 + rng.normal(0, 0.3, 2000))
    assert shift.saving_ms > 0
    mde = shift.mde_ms()
    assert classify(0.13, shift) == "consistent"
    assert verdict(0.5, shift, mde, shift.steps_needed(0.5)).startswith("smaller than estimated")


@pytest.mark.parametrize("kernel,gap,supported,basis", [
    (0.08, 0.13, "kernel_plus_gap", "only this estimate lies in the CI"),
    (0.125, 0.135, "kernel", "both lie in the CI"),
    (0.05, 0.30, "kernel", "neither lies in the CI"),
])
def test_estimator_check_picks_the_supported_estimate(kernel: float, gap: float, supported: str,
                                                      basis: str) -> None:
    """Measured saving 0.128 ms, CI [0.12, 0.14]: the estimate inside the CI is supported; if both
    or neither are, the closer one; relative error = (estimate - measured) / measured."""
    shift = measured(0.128, 0.12, 0.14)
    out = estimator_check(kernel, gap, shift)
    assert out.supported == supported and out.basis.startswith(basis)
    assert out.estimates["kernel"].rel_error == pytest.approx((kernel - 0.128) / 0.128)
    assert out.estimates["kernel_plus_gap"].in_ci == (0.12 <= gap <= 0.14)
    assert out.ci_narrower_than_saving and out.resolved
    json.dumps(out.to_json())  # goes into the report JSON as is


def test_estimator_check_within_target_and_zero_measurement() -> None:
    """The issue's target (better estimate within +-10 % of the measured saving) is flagged; a
    measured saving of exactly 0 has no relative error (None, not a division by zero)."""
    assert estimator_check(0.08, 0.135, measured(0.128, 0.12, 0.14)).within_10pct
    assert not estimator_check(0.08, 0.16, measured(0.128, 0.10, 0.16)).within_10pct
    out = estimator_check(0.08, 0.13, measured(0.0, -0.05, 0.05))
    assert out.estimates["kernel"].rel_error is None and not out.within_10pct
    assert not out.resolved and not out.ci_narrower_than_saving


def test_fmt_ms_is_positional_with_three_significant_digits() -> None:
    """Verdict numbers must be readable: no 1.3e-01, no 17 digits."""
    assert fmt_ms(0.13123) == "0.131"
    assert fmt_ms(0.000131234) == "0.000131"
    assert fmt_ms(25.53) == "25.5" and fmt_ms(25.53, 4) == "25.53"
    assert fmt_ms(-0.0742) == "-0.0742" and fmt_ms(math.inf) == "inf"
