"""The replica census on a hand-made CUDA-graph trace: both D2D forms, attributed by correlation."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from copyprof.capture.replica_census import census, census_run_dirs

STEP = "execute_context_0(0)_generation_16(16)"


def _x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _graph_step(t0: float, corr: int) -> list[dict]:
    """One annotated step: a cudaGraphLaunch whose GPU work finishes after the CPU range closed."""
    return [
        _x("user_annotation", STEP, t0, 20),
        _x("cuda_runtime", "cudaGraphLaunch", t0 + 5, 10, correlation=corr),
        _x("kernel", "nvjet_gemm", t0 + 30, 5, correlation=corr, grid=[8, 1, 1], block=[128, 1, 1]),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t0 + 40, 1, correlation=corr, bytes=229376),
        _x("kernel", "memcpy32_post", t0 + 42, 1, correlation=corr, grid=[48, 1, 1], block=[256, 1, 1]),
        _x("kernel", "memcpy32_post", t0 + 44, 1, correlation=corr, grid=[48, 1, 1], block=[256, 1, 1]),
    ]


def test_census_counts_both_forms_per_step(tmp_path: Path) -> None:
    events = _graph_step(0, 11) + _graph_step(100, 12) + [
        _x("cuda_runtime", "cudaMemcpyAsync", 130, 2, correlation=13),  # sampler D2H, outside any step
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 135, 1, correlation=13, bytes=64),
    ]
    trace = {"schemaVersion": 1, "traceEvents": events}
    result = census(trace)
    assert result["annotations"][STEP] == {"steps": 2, "copies_per_step": {
        "kernel memcpy32_post 49152": 2, "memcpy DtoD 229376": 1, "runtime cudaGraphLaunch": 1}}
    assert result["outside_steps"] == {"memcpy DtoH 64": 1, "runtime cudaMemcpyAsync": 1}
    run = tmp_path / "r"
    run.mkdir()
    with gzip.open(run / "rank0.1.pt.trace.json.gz", "wt") as fh:
        json.dump(trace, fh)
    assert list(census_run_dirs([run]).values()) == [result]
