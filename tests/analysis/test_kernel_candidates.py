"""The elementwise copy kernels' candidates are found a block of counted ops at a time.

Why: the lookups over every counted op (~1 M on a 1 GB trace) held ~4 MB of temporaries at the
analysis' memory peak when taken at once. The blocks must change nothing: a real vLLM capture
gives the same candidates with a block of a few rows (many blocks, ops of one step split across
them) as with the default, and at least one kernel candidate, so the comparison says something.
"""
from __future__ import annotations

import json

import pytest

from copyprof.analysis.cost import candidates
from copyprof.analysis.report import analyze_rank
from copyprof.reading import read_runs
from tests.conftest import REPO


def _capture(prefix: str) -> str:
    runs = json.loads((REPO / "corpus" / "runs.json").read_text())["runs"]
    return str(REPO / "corpus" / "runs" / next(r["name"] for r in runs if r["name"].startswith(prefix)))


@pytest.mark.parametrize("rows_per_pass", [1, 37, 4096])
def test_kernel_candidates_do_not_depend_on_the_block_of_rows(rows_per_pass: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    trace = read_runs([_capture("deepseek-v3-6l-c32-graph-baseline")])[0]
    census = analyze_rank(trace, None).census
    args = (trace.table, census.op_rows, census.op_first, census.op_steps, census.per_step)
    whole = candidates.kernel_candidates(*args, graph=True)
    monkeypatch.setattr(candidates, "ROWS_PER_PASS", rows_per_pass)
    blocks = candidates.kernel_candidates(*args, graph=True)
    assert whole and [c.key for c in whole] == [c.key for c in blocks]
    assert [(c.per_step, c.removable_ms) for c in whole] == [(c.per_step, c.removable_ms) for c in blocks]
