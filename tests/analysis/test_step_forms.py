"""`inspect --steps` on a hand-made CUDA-graph trace: both D2D forms, attributed by correlation.

Expected counts are those of the trace as written below: two annotated steps, each with one
cudaGraphLaunch whose GPU work (a GEMM, a `Memcpy DtoD` of 229,376 B and two `memcpy32_post`
driver kernels of 48 x 256 x 4 = 49,152 B) runs after the CPU range has closed — so it can
only be placed by the launch's correlation id; and a sampler D2H copy outside every step.
"""
from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cli_json

STEP = "execute_context_0(0)_generation_16(16)"


def _x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _graph_step(t0: float, corr: int) -> list[dict]:
    return [
        _x("user_annotation", STEP, t0, 20),
        _x("cuda_runtime", "cudaGraphLaunch", t0 + 5, 10, correlation=corr),
        _x("kernel", "nvjet_gemm", t0 + 30, 5, correlation=corr, grid=[8, 1, 1], block=[128, 1, 1], device=0,
           stream=7),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t0 + 40, 1, correlation=corr, bytes=229376, device=0,
           stream=7),
        _x("kernel", "memcpy32_post", t0 + 42, 1, correlation=corr, grid=[48, 1, 1], block=[256, 1, 1], device=0,
           stream=7),
        _x("kernel", "memcpy32_post", t0 + 44, 1, correlation=corr, grid=[48, 1, 1], block=[256, 1, 1], device=0,
           stream=7),
    ]


def test_copies_per_step_by_form(tmp_path: Path) -> None:
    events = _graph_step(0, 11) + _graph_step(100, 12) + [
        _x("cuda_runtime", "cudaMemcpyAsync", 130, 2, correlation=13),  # sampler D2H, outside any step
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 135, 1, correlation=13, bytes=64, device=0, stream=7),
    ]
    path = tmp_path / "rank0.1.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    [f] = cli_json("inspect", str(path), "--steps")["files"]
    steps = f["steps"]
    assert steps["annotations"][STEP] == {"steps": 2, "copies_per_step": {
        "kernel memcpy32_post 49152": 2, "memcpy DtoD 229376": 1, "runtime cudaGraphLaunch": 1}}
    assert steps["outside_steps"] == {"memcpy DtoH 64": 1, "runtime cudaMemcpyAsync": 1}
    assert steps["gpu_events"] == 9  # 4 GPU rows per step, and the D2H copy


def test_an_unmatched_pattern_says_so(tmp_path: Path) -> None:
    path = tmp_path / "rank0.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": _graph_step(0, 11)}))
    [f] = cli_json("inspect", str(path), "--step-pattern", "^no_such_step")["files"]
    assert f["steps"]["annotations"] == {} and f["steps"]["pattern"] == "^no_such_step"
