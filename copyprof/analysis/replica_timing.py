"""Interleaved A/B timing stored by the replica engine (`timing.json` in a run directory).

The replica times baseline and candidate in alternating blocks (AB, BA, …) of many graph
replays with device events, so drift cancels within each pair: the blocks are analysed as
pairs (paired Hodges–Lehmann with a signed-rank interval, analysis/stats.py). This is the
measurement the trace-based estimate is calibrated against.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from copyprof.analysis.results import TimingSummary, known
from copyprof.analysis.stats import ShiftResult, shift_estimate


def read_run_file(run_path: str, name: str) -> tuple[str, Any] | None:
    """(path, parsed JSON) of a file a copyprof run directory carries, or None if absent/unreadable."""
    path = os.path.join(run_path, name) if os.path.isdir(run_path) else None
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return path, json.load(fh)
    except (OSError, ValueError):
        return None


def load_timing(run_path: str) -> dict[str, Any] | None:
    found = read_run_file(run_path, "timing.json")
    if found is None:
        return None
    path, data = found
    try:
        per = data["per_block_ms"]
        base = np.asarray(per["baseline"], dtype=float)
        cand = np.asarray(per["candidate"], dtype=float)
    except (ValueError, KeyError, TypeError):
        return None
    if len(base) < 2 or len(base) != len(cand):
        return None
    return {**data, "_base": base, "_cand": cand, "path": path}


def timing_shift(timing: dict[str, Any]) -> ShiftResult:
    return shift_estimate(timing["_base"], timing["_cand"], paired=True)


def timing_summary(timing: dict[str, Any]) -> TimingSummary:
    """The measured saving per step (baseline − candidate) from the timed blocks."""
    s = timing_shift(timing)
    lo, hi = s.saving_ci95_ms
    replays = timing.get("replays_per_block")
    return TimingSummary(
        measured_ms=float(s.saving_ms), ci95_ms=[known(lo), known(hi)],
        noise_ms={k: known(v) for k, v in s.noise_ms.items()}, blocks=int(len(timing["_base"])),
        replays_per_block=int(replays) if isinstance(replays, int) else None, timer=timing.get("timer"),
        method=s.method, source=timing["path"], median_ms={k: known(v) for k, v in s.median_ms.items()})
