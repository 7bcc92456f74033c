"""Which GPU ops a graph replay ran (analysis/census/graph_ops.py): the ops whose correlation id
is a cudaGraphLaunch's. The ids are looked up in a dense index when they are small (as CUPTI
numbers them, from 1) and searched when they are not; both give the same answer, written out
here by hand for a small trace."""
from __future__ import annotations

import json

import numpy as np
import pytest

from copyprof.analysis.census.graph_ops import graph_replayed
from copyprof.readers.kineto import read_kineto


def _trace(path, first: int) -> tuple[str, list[bool]]:
    events, expected = [], []
    for i in range(6):
        corr = first + i
        launch = "cudaGraphLaunch" if i % 2 == 0 else "cudaLaunchKernel"
        events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 1, "tid": 1, "ts": 10.0 * i,
                       "dur": 1.0, "args": {"correlation": corr}})
        for k in range(3):  # a graph launch runs three kernels; a plain launch one each time
            events.append({"ph": "X", "cat": "kernel", "name": f"k{k}", "pid": 0, "tid": 7, "ts": 10.0 * i + 2 + k,
                           "dur": 0.5, "args": {"device": 0, "stream": 7, "correlation": corr}})
            expected.append(i % 2 == 0)
    events.append({"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7, "ts": 99.0, "dur": 0.5,
                   "args": {"device": 0, "stream": 7}})  # no correlation id: replayed by nothing
    expected.append(False)
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path), expected


@pytest.mark.parametrize("first", [1, 10**12], ids=["dense ids", "sparse ids"])
def test_ops_of_graph_launches_are_the_replayed_ones(tmp_path, first):
    path, expected = _trace(tmp_path / "t.json", first)
    [trace] = read_kineto(path)
    table = trace.table
    kernels = np.flatnonzero(table["kind"] == "kernel")
    assert graph_replayed(table, kernels).tolist() == expected
    runtime = np.flatnonzero(table["kind"] == "runtime")
    assert not graph_replayed(table, runtime[:0]).any()
