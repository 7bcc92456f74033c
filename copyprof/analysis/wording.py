"""Words and number formats shared by the analysis and every renderer, without numpy.

A report answered from the result cache must not import numpy (tests/report/test_result_cache.py), so
the verdict prefixes and the significant-digit format live here rather than in verdict.py.
"""
from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal

from copyprof.vocabulary import VerdictKey

VERDICT_PREFIX = {
    VerdictKey.NONE_NONE: "no change expected and none measured",
    VerdictKey.NONE_MEASURED: "no change expected, but one measured",
    VerdictKey.CONSISTENT: "consistent with the estimate",
    VerdictKey.NOT_RESOLVABLE: "not resolvable with this sample",
    VerdictKey.LARGER: "larger than estimated",
    VerdictKey.SMALLER: "smaller than estimated",
    VerdictKey.OPPOSITE: "opposite to the estimate",
}

# A verdict in a table cell: a few words, never the key itself ("none none" is no word).
VERDICT_CELL = {
    VerdictKey.NONE_NONE: "none expected, none seen",
    VerdictKey.NONE_MEASURED: "none expected, one seen",
    VerdictKey.CONSISTENT: "as estimated",
    VerdictKey.NOT_RESOLVABLE: "not resolvable",
    VerdictKey.LARGER: "larger than estimated",
    VerdictKey.SMALLER: "smaller than estimated",
    VerdictKey.OPPOSITE: "opposite to the estimate",
    VerdictKey.UNMEASURED: "boot-to-boot variation unmeasured",
    VerdictKey.DESCRIPTIVE: "these two runs only",
}


def fmt_ms(x: float, digits: int = 3) -> str:
    """``digits`` significant digits, never scientific (0.000131, 0.131, 25.5, 1230).

    Rounds the float's exact binary value half-to-even, as numpy's
    ``format_float_positional(x, precision=digits, fractional=False, trim="-")`` does (checked
    equal on 400,000 random values), so the text of a report does not depend on which of the two formatted it.
    """
    if not math.isfinite(x):
        return "inf" if x > 0 else "-inf" if x < 0 else "nan"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    exact = Decimal(float(x))
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_HALF_EVEN)
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
