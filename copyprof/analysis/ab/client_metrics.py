"""Client-side serving metrics (`client_metrics.json`, written by `copyprof run`) in an A/B.

One decode step produces one token per request, so a removed per-step cost shows up in each
request's time per output token (TPOT). The same statistics as for step periods apply, with
requests as the observations — which is what tells a reviewer that "8 requests resolve only
effects above X ms TPOT".
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from copyprof.analysis.ab.replica_timing import read_run_file
from copyprof.stats.shift import ShiftResult, shift_estimate
from copyprof.analysis.ab.verdict import verdict


def load_tpots(run_path: str) -> np.ndarray | None:
    found = read_run_file(run_path, "client_metrics.json")
    if found is None:
        return None
    try:
        values = [r.get("tpot_ms") for r in found[1].get("per_request", []) if isinstance(r, dict)]
    except AttributeError:
        return None
    arr = np.asarray([v for v in values if isinstance(v, (int, float)) and math.isfinite(v)], dtype=float)
    return arr if len(arr) >= 2 else None


def client_comparison(paths: tuple[str, ...] | list[str], estimate_ms: float) -> tuple[ShiftResult, dict[str, Any]] | None:
    """TPOT per request of both arms: the shift and the JSON object of ``comparison.client``."""
    a, b = load_tpots(paths[0]), load_tpots(paths[1])
    if a is None or b is None:
        return None
    shift = shift_estimate(a, b)
    mde = shift.mde_ms()
    lo, hi = shift.saving_ci95_ms
    need = shift.steps_needed(estimate_ms) if estimate_ms > 0 else None
    return shift, {
        "metric": "tpot_ms", "requests": {"baseline": int(len(a)), "candidate": int(len(b))},
        "median_ms": shift.median_ms, "measured_ms": shift.saving_ms, "ci95_ms": [lo, hi],
        "noise_ms": shift.noise_ms, "mde_ms": mde if math.isfinite(mde) else None, "requests_needed": need,
        "verdict": verdict(estimate_ms, shift, mde, need, unit="requests"),
    }
