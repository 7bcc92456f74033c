"""Verdict in words, derived only from the numbers of an A/B (no judgement calls left to the reader).

Sign convention (the one a PR reviewer thinks in): an *estimate* is a predicted **saving**,
baseline - candidate, positive when the candidate should be faster (a removed copy). The
measured saving is ``shift.saving_ms`` = -``shift.estimate_ms`` with interval
``shift.saving_ci95_ms``. An estimate < 0 (the candidate adds work) is handled symmetrically:
"larger"/"smaller" always compare magnitudes in the estimate's direction.

Decision table (CI = the saving interval, E = the estimate):

============================  ============================================  ===================
condition                     verdict starts with                           ``classify`` key
============================  ============================================  ===================
E == 0, 0 in CI               "no change expected and none measured"        ``none-none``
E == 0, 0 not in CI           "no change expected, but one measured"        ``none-measured``
E in CI, 0 not in CI          "consistent with the estimate"                ``consistent``
E in CI, 0 in CI              "not resolvable with this sample (need >= N"  ``not-resolvable``
CI entirely beyond E          "larger than estimated"                       ``larger``
CI between E and 0 (0 incl.)  "smaller than estimated"                      ``smaller``
CI entirely on the far side   "opposite to the estimate"                    ``opposite``
============================  ============================================  ===================

Every verdict ends with what the sample can resolve (its MDE) and, when the estimate is below
the MDE, how many observations per arm would resolve it.
"""
from __future__ import annotations

import math

from copyprof.stats.shift import ShiftResult, json_float
from copyprof.analysis.wording import VERDICT_PREFIX, fmt_ms
from copyprof.analysis.ab.results import EstimateCheck, EstimatorCheck
from copyprof.vocabulary import VerdictKey

ZERO_MS = 1e-9  # estimates below a picosecond are "no change expected"



def classify(estimate_ms: float, shift: ShiftResult) -> VerdictKey:
    """The verdict's key (see the module table); ``estimate_ms`` is a saving (baseline - candidate)."""
    lo, hi = shift.saving_ci95_ms
    if abs(estimate_ms) <= ZERO_MS:
        return VerdictKey.NONE_NONE if lo <= 0 <= hi else VerdictKey.NONE_MEASURED
    s = 1.0 if estimate_ms > 0 else -1.0
    plo, phi = sorted((s * lo, s * hi))  # the interval along the estimate's direction
    e = abs(estimate_ms)
    if plo <= e <= phi:
        return VerdictKey.CONSISTENT if plo > 0 else VerdictKey.NOT_RESOLVABLE
    if plo > e:
        return VerdictKey.LARGER
    return VerdictKey.OPPOSITE if phi < 0 else VerdictKey.SMALLER


def verdict(estimate_ms: float, shift: ShiftResult, mde_ms: float, steps_needed: int | None,
            *, unit: str = "steps") -> str:
    """One sentence a reviewer can paste: category first, then the numbers that decided it.

    ``estimate_ms``: predicted saving (baseline - candidate, > 0 = candidate faster);
    ``mde_ms``: the sample's minimum detectable effect; ``steps_needed``: observations per arm
    needed to resolve ``estimate_ms`` (ignored when no change is expected); ``unit``: what one
    observation is ("steps", "requests", "blocks").
    """
    key = classify(estimate_ms, shift)
    lo, hi = shift.saving_ci95_ms
    level = f"{100 * shift.confidence:g} % CI"
    ci = (f"{level} {fmt_ms(lo)} to {fmt_ms(hi)} ms" if math.isfinite(lo) and math.isfinite(hi)
          else f"no finite {level} with {shift.n_baseline} vs {shift.n_candidate} {unit}")
    measured = f"measured saving {fmt_ms(shift.saving_ms)} ms ({ci})"
    est = f"estimated {fmt_ms(estimate_ms)} ms"
    e = abs(estimate_ms)
    need = (f"need >= {steps_needed} {unit} per arm to resolve {fmt_ms(e)} ms"
            if steps_needed is not None and e > ZERO_MS else "")
    resolution = (f"this sample resolves only effects above {fmt_ms(mde_ms)} ms"
                  if math.isfinite(mde_ms) else "this sample is too small to resolve any effect")
    resolution += f" at 80 % power ({shift.n_baseline} vs {shift.n_candidate} {unit})"
    tail = f"; {resolution}" + (f"; {need}" if need and e < mde_ms else "") + "."

    if key == VerdictKey.NONE_NONE:
        return f"{VERDICT_PREFIX[key]}: {measured}{tail}"
    if key == VerdictKey.NONE_MEASURED:
        faster = "faster" if shift.saving_ms > 0 else "slower"
        return f"{VERDICT_PREFIX[key]}: the candidate is {faster}, {measured}{tail}"
    if key == VerdictKey.NOT_RESOLVABLE:
        head = f"{VERDICT_PREFIX[key]} ({need})" if need else VERDICT_PREFIX[key]
        return f"{head}: {measured} contains both zero and the {est}; {resolution}."
    if key == VerdictKey.CONSISTENT:
        return f"{VERDICT_PREFIX[key]}: {measured} vs {est}{tail}"
    if key == VerdictKey.LARGER:
        return f"{VERDICT_PREFIX[key]}: {measured} lies above the {est}{tail}"
    if key == VerdictKey.SMALLER:
        what = "no measurable effect" if (lo <= 0 <= hi) else "an effect smaller than estimated"
        return f"{VERDICT_PREFIX[key]}: {measured} excludes the {est} ({what}){tail}"
    slower = "slower" if estimate_ms > 0 else "faster"
    return f"{VERDICT_PREFIX[key]}: the candidate is {slower}, {measured} vs {est}{tail}"


def estimator_check(kernel_ms: float, kernel_plus_gap_ms: float, shift: ShiftResult) -> EstimatorCheck:
    """Which estimate (kernel time only, or kernel + dispatch gap) the measured A/B supports.

    Both estimates are savings (baseline - candidate). ``supported`` is the one inside the CI;
    if both or neither are, the closer one to the measured saving (``basis`` says which case).
    ``rel_error`` = (estimate - measured) / measured (``None`` when the measured saving is 0).
    ``within_10pct`` applies the issue's target (|rel_error| <= 10 %) to the supported estimate,
    and is meaningful only when ``ci_narrower_than_saving`` (otherwise the CI is the limit).
    """
    m = shift.saving_ms
    lo, hi = shift.saving_ci95_ms
    rows: dict[str, EstimateCheck] = {}
    for name, e in (("kernel", float(kernel_ms)), ("kernel_plus_gap", float(kernel_plus_gap_ms))):
        rows[name] = EstimateCheck(estimate_ms=e, in_ci=bool(lo <= e <= hi), abs_error_ms=abs(e - m),
                                   rel_error=(e - m) / m if m != 0 else None)
    inside = [k for k, r in rows.items() if r.in_ci]
    closest = min(rows, key=lambda k: rows[k].abs_error_ms)
    if len(inside) == 1:
        supported, basis = inside[0], "only this estimate lies in the CI"
    elif inside:
        supported, basis = closest, "both lie in the CI; this one is closer to the measured saving"
    else:
        supported, basis = closest, "neither lies in the CI; this one is closer to the measured saving"
    rel = rows[supported].rel_error
    return EstimatorCheck(measured_ms=m, ci95_ms=[json_float(lo), json_float(hi)], resolved=bool(shift.resolved),
                          ci_narrower_than_saving=bool(hi - lo < abs(m)), estimates=rows, supported=supported,
                          basis=basis, within_10pct=bool(rel is not None and abs(rel) <= 0.10))
