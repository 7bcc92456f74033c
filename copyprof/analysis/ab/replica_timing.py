"""Interleaved A/B timing stored by the replica engine (`timing.json` in a run directory).

The replica times its arms (baseline, candidate, a partial arm) in rounds of one block each,
the order rotated every round (AB, BA, … ; ABC, BCA, …), each block many graph replays timed
with device events, so drift cancels within a round: block i of two arms is a pair (paired
Hodges–Lehmann with a signed-rank interval, stats/shift.py). This is the measurement the
trace-based estimate is calibrated against. Every arm's run directory holds the same file;
``run.json``'s ``arm`` says which arm the directory is.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from copyprof.analysis.results import TimingSummary, known
from copyprof.stats.shift import ShiftResult, shift_estimate


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
    """timing.json of a run directory with ``_arms`` (arm -> per-block ms) and ``_arm`` (this
    directory's arm, from run.json); None when absent or unusable."""
    found = read_run_file(run_path, "timing.json")
    if found is None:
        return None
    path, data = found
    try:
        arms = {str(a): np.asarray(v, dtype=float) for a, v in data["per_block_ms"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if "baseline" not in arms or len(arms) < 2 or len({len(v) for v in arms.values()}) != 1 or len(arms["baseline"]) < 2:
        return None
    run = read_run_file(run_path, "run.json")
    arm = run[1].get("arm") if run and isinstance(run[1], dict) else None
    return {**data, "_arms": arms, "_arm": arm if arm in arms else None, "path": path}


def timing_pair(timing: dict[str, Any], candidate: str | None = None) -> tuple[str, str]:
    """(baseline arm, compared arm): ``candidate`` when given, else this directory's own arm,
    else the full-removal ``candidate`` arm, else the first other arm."""
    arms = timing["_arms"]
    for arm in (candidate, timing.get("_arm"), "candidate", *arms):
        if arm and arm != "baseline" and arm in arms:
            return "baseline", arm
    raise ValueError("timing.json holds no arm besides the baseline")


def timing_shift(timing: dict[str, Any], candidate: str | None = None) -> ShiftResult:
    base, cand = timing_pair(timing, candidate)
    return shift_estimate(timing["_arms"][base], timing["_arms"][cand], paired=True)


def timing_summary(timing: dict[str, Any], candidate: str | None = None) -> TimingSummary:
    """The measured saving per step (baseline − the compared arm) from the timed blocks."""
    s = timing_shift(timing, candidate)
    lo, hi = s.saving_ci95_ms
    replays = timing.get("replays_per_block")
    return TimingSummary(
        measured_ms=float(s.saving_ms), ci95_ms=[known(lo), known(hi)],
        noise_ms={k: known(v) for k, v in s.noise_ms.items()}, blocks=int(len(timing["_arms"]["baseline"])),
        replays_per_block=int(replays) if isinstance(replays, int) else None, timer=timing.get("timer"),
        method=s.method, source=timing["path"], median_ms={k: known(v) for k, v in s.median_ms.items()},
        arms=list(timing_pair(timing, candidate)))
