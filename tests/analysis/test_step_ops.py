"""The census's row gathering and per-step extents against their plain definitions.

Why: step_ops._counted_rows replaced one ``lexsort((start, step))`` over all GPU rows, and
steps.step_extents one argsort over the table, with blockwise and run-wise passes that keep a
1 GB trace's temporaries to a few MB. They must give exactly what the plain versions give —
same rows, same order (ties in table order), same per-step first start / last end / count —
for any block size, interleaving of steps and order of start times.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from copyprof.analysis.steps import ops as step_ops, projection as step_projection
from copyprof.analysis.steps.rows import no_steps, step_dtype
from copyprof.analysis.steps.segment import Steps, step_extents
from copyprof.columns import Columns
from copyprof.events import KINDS


def _case(rng: np.random.Generator, n: int, sorted_steps: bool, sorted_starts: bool) -> tuple[pd.DataFrame, np.ndarray]:
    step_of = rng.integers(-1, 6, n).astype(np.int32)
    start = rng.integers(0, 50, n).astype(np.int64)  # many ties: order among them must be the table's
    if sorted_steps:
        step_of = np.sort(step_of)
    if sorted_starts:
        start = np.sort(start)
    events = pd.DataFrame({
        "on_gpu": rng.random(n) < 0.9,
        "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "memset", "runtime"], n), categories=KINDS),
        "device": rng.integers(-1, 2, n).astype(np.int8),
        "start_ns": start,
        "dur_ns": rng.integers(0, 20, n).astype(np.int16),
    })
    return events, step_of


@pytest.mark.parametrize("seed", range(40))
def test_counted_rows_equal_a_stable_lexsort(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    events, step_of = _case(rng, int(rng.integers(0, 2500)), seed % 3 == 0, seed % 2 == 0)
    device = int(rng.integers(-1, 2))
    counted = np.array([0, 2, 3, 5, 9])  # 9: a counted step no row has
    monkeypatch.setattr(step_ops, "ROWS_PER_PASS", int(rng.integers(1, 700)))
    monkeypatch.setattr(step_ops, "MAX_RUNS", 1 << 16 if seed % 4 else int(rng.integers(1, 40)))  # both paths
    got, _, _ = step_ops._counted_rows(Columns.from_pandas(events), Steps("test", Columns(), step_of, device), counted)
    pick = events["on_gpu"].to_numpy() & events["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()
    pick &= np.isin(step_of, counted) & ((events["device"].to_numpy() == device) if device >= 0 else True)
    rows = np.flatnonzero(pick)
    expected = rows[np.lexsort((events["start_ns"].to_numpy()[rows], step_of[rows]))]
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("seed", range(20))
def test_step_extents_equal_the_per_step_min_max_and_count(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    events, step_of = _case(rng, int(rng.integers(0, 2500)), seed % 2 == 0, False)
    start, dur = events["start_ns"].to_numpy(), events["dur_ns"].to_numpy()
    first, last, count = step_extents(step_of, start, dur, 6, rows_per_pass=int(rng.integers(1, 700)))
    for k in range(6):
        mine = step_of == k
        assert count[k] == mine.sum()
        if mine.any():
            assert first[k] == start[mine].min() and last[k] == (start[mine] + dur[mine].astype(np.int64)).max()
        else:  # sentinels, dropped by _build_table (n_events == 0)
            assert first[k] == np.iinfo(np.int64).max and last[k] == np.iinfo(np.int64).min



def _projection_by_definition(events: pd.DataFrame, ann: pd.DataFrame, gpu_mask: np.ndarray) -> np.ndarray:
    """step_of by the rule's words (a step owns what its process launched in its
    window): a runtime call belongs to the first CPU range (in the ranges' order) of its own
    thread that contains its start, else to the first range of any thread that does; a
    correlation id is claimed by the first such call, own-thread claims before the others,
    threads in order of first appearance and each thread's calls in time order (ties in table
    order); a GPU op takes the step that claimed its id."""
    corr = events["correlation"].to_numpy()
    claims: tuple[dict[int, int], dict[int, int]] = ({}, {})  # own thread's range, another thread's
    rt = np.flatnonzero((events["kind"] == "runtime").to_numpy() & (corr >= 0))
    tids = list(dict.fromkeys(events["stream"].to_numpy()[rt].tolist()))
    ranges = list(zip(ann["start_ns"], ann["dur_ns"], ann["stream"]))
    for tid in tids:
        calls = sorted((int(events["start_ns"].iat[r]), k, int(corr[r])) for k, r in enumerate(rt)
                       if events["stream"].iat[r] == tid)
        for start, _, c in calls:
            own = [i for i, (lo, d, t) in enumerate(ranges) if t == tid and lo <= start < lo + d]
            other = [i for i, (lo, d, t) in enumerate(ranges) if t != tid and lo <= start < lo + d]
            if own:
                claims[0].setdefault(c, own[0])
            elif other:
                claims[1].setdefault(c, other[0])
    claim = {**claims[1], **claims[0]}
    out = np.full(len(events), -1)
    for r in np.flatnonzero(gpu_mask):
        out[r] = claim.get(int(corr[r]), -1)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_correlation_projection_follows_its_definition(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two threads with ranges, a third without (its calls go to the ranges of the others); calls
    # out of time order on some seeds; ids that repeat (claimed by the first range) and ids
    # that decrease over time (no sorted shortcut).
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(1, 400))
    kind = rng.choice(["runtime", "kernel", "memcpy"], n)
    events = pd.DataFrame({
        "kind": pd.Categorical(kind, categories=KINDS),
        "stream": rng.choice([11, 12, 13], n).astype(np.int32),
        "start_ns": (np.sort(rng.integers(0, 1000, n)) if seed % 2 else rng.integers(0, 1000, n)).astype(np.int64),
        "correlation": (rng.integers(-1, n // 2 + 2, n) if seed % 3 else np.arange(n)[::-1]).astype(np.int32),
    })
    ann = pd.DataFrame({"stream": np.array([11, 12, 11, 12], dtype=np.int32),
                        "start_ns": np.array([0, 100, 400, 600], dtype=np.int64),
                        "dur_ns": np.array([390, 450, 300, 400], dtype=np.int64)})
    gpu_mask = np.isin(kind, ["kernel", "memcpy"])
    monkeypatch.setattr(step_projection, "ROWS_PER_PASS", int(rng.integers(1, 300)))
    got = no_steps(n, len(ann))
    step_projection.project_through_correlations(Columns.from_pandas(events), Columns.from_pandas(ann), gpu_mask, got)
    assert got.tolist() == _projection_by_definition(events, ann, gpu_mask).tolist()


def test_step_ids_take_the_narrowest_type_that_holds_every_id() -> None:
    # Ids run 0..n_steps-1 and -1 marks "no step": int16 holds them up to 32,766 steps; one
    # more and an id would wrap, so the type widens to int32 there.
    assert step_dtype(0) is np.int16 and step_dtype(32_766) is np.int16
    assert step_dtype(32_767) is np.int32 and step_dtype(10**6) is np.int32
    ids = no_steps(5, 40_000)
    ids[:] = [-1, 0, 32_767, 39_999, 12]
    assert ids.tolist() == [-1, 0, 32_767, 39_999, 12]


def test_a_trace_of_more_than_32767_steps_keeps_every_step_id() -> None:
    # 40,000 idle-gap steps of one kernel each: every kernel gets its own step id, none wraps.
    n = 40_000
    step_of = no_steps(n, n)
    step_of[np.arange(n)] = np.arange(n)
    first, last, count = step_extents(step_of, np.arange(n, dtype=np.int64) * 10, np.ones(n, dtype=np.int64), n)
    assert count.tolist() == [1] * n and first[-1] == (n - 1) * 10


@pytest.mark.parametrize("seed", range(30))
def test_nearest_kernels_of_the_copies_follow_their_definition(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy's next (previous) kernel is the first kernel after (last before) it in its own
    # step, "" when the step has none there. The ops next to a copy are looked at first and a
    # search among all kernels takes the rest: a small NEAR_OPS on some seeds sends most copies
    # there, sparse kernels on others leave long runs of non-kernel ops.
    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(1, 3000))
    is_kernel = rng.random(n) < (0.9 if seed % 3 else 0.02)
    op_first = np.unique(np.concatenate(([0], rng.integers(0, n, int(rng.integers(0, 40))))))
    at = np.sort(rng.choice(n, int(rng.integers(0, min(n, 200) + 1)), replace=False))
    at_step = np.searchsorted(op_first, at, side="right") - 1
    codes = rng.integers(-1, 5, n).astype(np.int16)  # -1: an op without a name
    rows = rng.permutation(n)
    categories = np.array(["k0", "k1", "k2", "k3", "k4"], dtype=object)
    monkeypatch.setattr(step_ops, "NEAR_OPS", 64 if seed % 2 else int(rng.integers(1, 4)))
    ends = np.append(op_first[1:], n)
    for after in (True, False):
        got = step_ops._kernel_names(is_kernel, op_first, at, at_step, (rows, codes, categories), after=after)
        want = []
        for a, k in zip(at.tolist(), at_step.tolist()):
            span = range(a + 1, int(ends[k])) if after else range(a - 1, int(op_first[k]) - 1, -1)
            hit = next((p for p in span if is_kernel[p]), None)
            want.append("" if hit is None else categories[codes[rows[hit]]])
        assert got.tolist() == want
