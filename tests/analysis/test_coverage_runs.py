"""Coverage of the A/B intervals with the right unit of replication, by simulation.

The model: each run (one server boot) has its own level, ``u ~ N(0, sd_between)``, on which its
decode steps vary as an AR(1) series (consecutive steps drift together); a run's value is the
median of its steps. The candidate arm is the baseline shifted by ``delta``. The report's own
code computes every interval (``units.run_level`` for boots, ``units.within_process``
for arms of one process); 2,000+ replications per case, coverage and each tail checked.

Expected: the runs-as-unit pooled t interval is exact for normal run values (the step median of
a Gaussian AR(1) series is near normal): coverage within 93.5-96.5 % and each tail 1.5-3.5 %
(4 standard errors around 95 % and 2.5 % at 2,000 replications). An interval on steps or
requests instead — the unit this report used before — covers far less once boots differ
(checked too, so that a change back fails here).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from copyprof.analysis.ab.units import Arms, run_level, within_process
from tests.analysis.test_coverage import ar1

REPS = 2000
MU = 5.0  # a decode step of ~5 ms (the H200 corpus)


def _runs(rng: np.random.Generator, n_runs: int, steps: int, sd_between: float, phi: float, sd_step: float,
          shift: float = 0.0, session: str | None = None, offset: float = 0.0) -> list[SimpleNamespace]:
    level = rng.normal(0, sd_between, n_runs)
    series = MU - shift + offset + level[:, None] + sd_step * ar1(rng, (n_runs, steps), phi)
    return [SimpleNamespace(step_series={"period_ms": s.tolist()}, tpot_ms=[], setup=SimpleNamespace(ab_group=session))
            for s in series]


def _coverage(intervals: np.ndarray, truth: float) -> tuple[float, float]:
    below = float(np.mean(truth < intervals[:, 0]))  # the interval lies above the true saving
    above = float(np.mean(truth > intervals[:, 1]))
    return below, above


@pytest.mark.parametrize(("runs", "steps", "sd_between", "phi", "aa"), [
    (2, 24, 0.3, 0.5, 0), (3, 24, 0.3, 0.8, 0), (5, 20, 0.5, 0.3, 0),
    (2, 24, 0.05, 0.5, 0),  # boots barely differ: the step average is most of a run's spread
    (1, 24, 0.3, 0.5, 3),  # one run per arm, the spread from a 3-boot A/A of the same setup
])
def test_runs_as_unit_interval_covers(runs: int, steps: int, sd_between: float, phi: float, aa: int) -> None:
    rng = np.random.default_rng(100 + runs * 7 + aa)
    delta = 0.05
    ci = []
    for _ in range(REPS):
        base = _runs(rng, runs, steps, sd_between, phi, 0.1)
        cand = _runs(rng, runs, steps, sd_between, phi, 0.1, shift=delta)
        groups = [_runs(rng, aa, steps, sd_between, phi, 0.1)] if aa else []
        rs = run_level(Arms(base, cand, groups), "period_ms")  # type: ignore[arg-type]
        ci.append(rs.ci95_ms)
    below, above = _coverage(np.asarray(ci, dtype=float), delta)
    assert 0.935 <= 1 - below - above <= 0.965, (below, above)
    assert 0.015 <= below <= 0.035 and 0.015 <= above <= 0.035, (below, above)


@pytest.mark.parametrize(("per_session", "sessions"), [((2, 2), 2), ((2, 1), 2), ((1, 1), 3)])
def test_sessions_as_blocks_cover_and_cancel_a_machine_offset(per_session: tuple[int, int], sessions: int) -> None:
    """Runs of several capture sessions (each session one machine, which moves both arms by its
    own offset, SD 3x the boot-to-boot SD): the interval read within sessions covers near 95 %,
    and is narrower than the pooled one, which the offsets widen (the OLMo graph A/B: two ABBA
    boots per arm on one machine, one AB round on another 0.4 % faster). Layouts: 2+2 runs per
    arm, then 2 per arm and 1 per arm (the corpus's OLMo shape), then three AB rounds."""
    rng = np.random.default_rng(300 + sessions * 10 + per_session[1])
    delta, sd_boot, ci, pooled_width = 0.05, 0.03, [], []
    for _ in range(REPS):
        base, cand = [], []
        for j in range(sessions):
            k = per_session[min(j, 1)]
            off = float(rng.normal(0, 3 * sd_boot))
            base += _runs(rng, k, 24, sd_boot, 0.5, 0.01, session=f"s{j}", offset=off)
            cand += _runs(rng, k, 24, sd_boot, 0.5, 0.01, shift=delta, session=f"s{j}", offset=off)
        rs = run_level(Arms(base, cand), "period_ms")  # type: ignore[arg-type]
        assert rs.sessions == sessions
        ci.append(rs.ci95_ms)
        for r in base + cand:
            r.setup.ab_group = None  # the same runs, sessions unknown: pooled
        lo, hi = run_level(Arms(base, cand), "period_ms").ci95_ms  # type: ignore[arg-type]
        pooled_width.append(hi - lo)
    ci_arr = np.asarray(ci, dtype=float)
    below, above = _coverage(ci_arr, delta)
    assert 0.935 <= 1 - below - above <= 0.965, (below, above)
    assert 0.015 <= below <= 0.035 and 0.015 <= above <= 0.035, (below, above)
    assert np.median(ci_arr[:, 1] - ci_arr[:, 0]) < np.median(pooled_width)


def test_sessions_that_each_hold_one_arm_are_not_blocked() -> None:
    """Baseline from one session, candidate from another: the patch and the session cannot be
    told apart, so the pooled interval stays and nothing is read within sessions."""
    rng = np.random.default_rng(5)
    base = _runs(rng, 2, 24, 0.03, 0.5, 0.01, session="s0")
    cand = _runs(rng, 2, 24, 0.03, 0.5, 0.01, session="s1")
    rs = run_level(Arms(base, cand), "period_ms")  # type: ignore[arg-type]
    assert rs.sessions == 0 and rs.df == 2


def test_one_run_per_arm_without_an_aa_has_no_interval() -> None:
    rng = np.random.default_rng(7)
    rs = run_level(Arms(_runs(rng, 1, 24, 0.3, 0.5, 0.1), _runs(rng, 1, 24, 0.3, 0.5, 0.1)), "period_ms")  # type: ignore[arg-type]
    assert rs.ci95_ms == (None, None) and rs.sd_between_ms is None and not rs.resolved


def test_steps_as_the_unit_would_not_cover_between_boots() -> None:
    """Why runs are the unit: the same boots, analysed with steps as the unit (what a within-run
    interval does), cover well under 95 % once boots differ by more than steps vary."""
    rng = np.random.default_rng(11)
    delta, hits = 0.05, 0
    for _ in range(500):
        b = _runs(rng, 1, 24, 0.3, 0.5, 0.1)[0].step_series["period_ms"]
        c = _runs(rng, 1, 24, 0.3, 0.5, 0.1, shift=delta)[0].step_series["period_ms"]
        lo, hi = within_process(np.asarray(b), np.asarray(c)).saving_ci95_ms
        hits += lo <= delta <= hi
    assert hits / 500 < 0.6


@pytest.mark.parametrize(("steps", "phi"), [(20, 0.375), (20, 0.0), (32, 0.5), (100, 0.8), (400, 0.5)])
def test_within_process_interval_on_short_autocorrelated_runs(steps: int, phi: float) -> None:
    """Arms of one process (the replica's): a finite t interval on batch means of 3τ even at 20
    steps, covering near 95 % (an approximate method: a band of 92-97.5 %, each tail 1-4.5 %)."""
    rng = np.random.default_rng(int(steps * 10 + phi * 100))
    delta = 0.05
    base = MU + 0.1 * ar1(rng, (REPS, steps), phi)
    cand = MU - delta + 0.1 * ar1(rng, (REPS, steps), phi)
    ci = np.array([within_process(b, c).saving_ci95_ms for b, c in zip(base, cand)], dtype=float)
    assert np.isfinite(ci).all(), "every interval is finite"
    below, above = _coverage(ci, delta)
    assert 0.92 <= 1 - below - above <= 0.975, (below, above)
    assert 0.01 <= below <= 0.045 and 0.01 <= above <= 0.045, (below, above)
