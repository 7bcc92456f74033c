"""GPU busy time and graph-replay span per step (analysis/steps/gpu_time.py) against a
brute-force reading: the busy time of a step is the number of nanoseconds covered by at least
one of its ops (counted one by one), the replay span the first-to-last extent of its replayed
ops. Chunks of a few ops force the chunked path through step boundaries."""
from __future__ import annotations

import numpy as np
import pytest

from copyprof.analysis.steps import gpu_time
from copyprof.analysis.steps.gpu_time import gpu_time_per_step


def _steps(rng: np.random.Generator, n_steps: int, t0: int = 10**15):
    start, dur, replayed, first = [], [], [], []
    t = t0
    for _ in range(n_steps):
        first.append(len(start))
        m = int(rng.integers(1, 9))
        # several streams: ops of one step overlap, nest, touch and leave gaps
        s = np.sort(rng.integers(0, 120, m)) + t
        start += s.tolist()
        dur += rng.integers(0, 40, m).tolist()
        replayed += (rng.random(m) < 0.6).tolist()
        t += int(rng.integers(0, 250))  # steps may overlap the next one's start
    return np.array(start, dtype=np.int64), np.array(dur, dtype=np.int64), np.array(replayed), np.array(first)


def _brute(start, dur, replayed, first):
    bounds = list(first) + [len(start)]
    busy, span = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):
        covered = set()
        for i in range(a, b):
            covered.update(range(int(start[i]), int(start[i] + dur[i])))
        busy.append(len(covered))
        r = [i for i in range(a, b) if replayed[i]]
        span.append(max(start[i] + dur[i] for i in r) - min(start[i] for i in r) if r else np.nan)
    return np.array(busy), np.array(span, dtype=float)


@pytest.mark.parametrize("rows_per_pass", [3, 7, 1 << 20])
def test_union_and_replay_span_equal_a_brute_force_count(monkeypatch, rows_per_pass):
    monkeypatch.setattr(gpu_time, "ROWS_PER_PASS", rows_per_pass)
    rng = np.random.default_rng(7)
    for _ in range(40):
        start, dur, replayed, first = _steps(rng, int(rng.integers(1, 12)))
        rows = np.arange(len(start))
        busy, span = gpu_time_per_step(start, dur, rows, first, replayed)
        want_busy, want_span = _brute(start, dur, replayed, first)
        assert busy.tolist() == want_busy.tolist()
        assert np.array_equal(span, want_span, equal_nan=True)


def test_concurrent_streams_count_once_and_idle_time_not_at_all():
    # two streams: [0, 10) and [5, 12) overlap (12 ns busy), then idle until [20, 25)
    start = np.array([0, 5, 20], dtype=np.int64)
    dur = np.array([10, 7, 5], dtype=np.int64)
    busy, span = gpu_time_per_step(start, dur, np.arange(3), np.array([0]), np.array([True, True, False]))
    assert busy.tolist() == [17] and span.tolist() == [12.0]


def test_rows_select_the_ops_from_the_event_table():
    # the table holds other events between the steps' ops: only the rows given are counted
    start = np.array([0, 1000, 5, 2000, 100], dtype=np.int64)
    dur = np.array([10, 500, 10, 500, 4], dtype=np.int64)
    busy, span = gpu_time_per_step(start, dur, np.array([0, 2, 4]), np.array([0, 2]))
    assert busy.tolist() == [15, 4] and np.isnan(span).all()  # no replay flags given: no span


def test_a_chunk_spanning_more_time_than_offsets_allow_is_still_exact():
    # steps ~10^18 ns apart: one cumulative maximum over offset segments would overflow int64
    start = np.array([0, 4, 10**18, 10**18 + 3, 2 * 10**18], dtype=np.int64)
    dur = np.array([5, 5, 2, 2, 1], dtype=np.int64)
    busy, _ = gpu_time_per_step(start, dur, np.arange(5), np.array([0, 2, 4]))
    assert busy.tolist() == [9, 4, 1]
