"""A value of an unexpected type in a field the reader uses costs that field, never the
event, and is said.

The shape comes from a real trace: HolisticTraceAnalysis ``tests/data/triton_example/
triton_example.json.gz`` (a torch.compile run) has a ``cpu_op`` ``triton_poi_fused_add_cos_sin_0``
whose args hold Inductor's ``"grid": "grid(100,)"`` (a string where Kineto writes ``[x, y, z]``
on kernels). Dropping the event for it would take that op out of the counts, and a kernel
given such a grid out of the table, with no warning and no ``partial``. Both decoders (the
native scanner and the Python path) must give the same table and the same warning.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto


def _events() -> list[dict]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_add_cos_sin_0", "pid": 1, "tid": 1, "ts": 20.0,
         "dur": 5.0, "args": {"External id": 2, "grid": "grid(100,)", "stream": 0, "kernel_backend": "triton"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 21.0, "dur": 2.0,
         "args": {"correlation": 7, "External id": 2}},
        {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_add_cos_sin_0", "pid": 0, "tid": 7, "ts": 30.0,
         "dur": 3.0, "args": {"correlation": 7, "device": 0, "stream": 7, "grid": "grid(100,)", "block": [128, 1, 1]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 40.0,
         "dur": 3.0, "args": {"correlation": 8, "device": 0, "stream": 7, "bytes": 4096}},
    ]


def _read(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kineto_native, "_NATIVE", native)
    [trace] = read_kineto(str(path))
    return trace


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_string_grid_costs_the_field_not_the_event(tmp_path, monkeypatch, native):
    path = tmp_path / "inductor.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _events()}))
    trace = _read(path, native, monkeypatch)
    counts = trace.meta.kind_counts
    # every event is counted: 2 cpu_ops, the launch, the kernel and the copy
    assert (counts["cpu_op"], counts["runtime"], counts["kernel"], counts["memcpy"]) == (2, 1, 1, 1)
    kernel = trace.events[trace.events["kind"] == "kernel"]
    assert len(kernel) == 1
    k = kernel.iloc[0]
    assert (k["grid_x"], k["grid_y"], k["grid_z"]) == (-1, -1, -1)  # the odd grid reads as unknown
    assert (k["block_x"], k["correlation"], k["device"]) == (128, 7, 0)  # the rest of the event is kept
    assert trace.meta.partial is None  # nothing is damaged
    [warning] = trace.meta.warnings
    assert warning.startswith("2 field value(s) of an unexpected type") and "args.grid 2" in warning


def test_both_decoders_agree_on_every_odd_field(tmp_path, monkeypatch):
    # One odd value in each field kind the reader uses: bools and containers in ids, a number
    # as category, an array as args, an object as args.kind, a string block. Each costs its
    # field; the tables and the warning are the same from both decoders.
    events = _events()
    events[2]["args"]["correlation"] = True  # the launch loses its correlation
    events[2]["tid"] = [1]
    events[3]["args"]["block"] = "block(128,)"
    events[4]["args"]["kind"] = {"dir": "DtoD"}
    events.append({"ph": "X", "cat": 5, "name": "odd category", "pid": 1, "tid": 1, "ts": 50.0, "dur": 1.0})
    events.append({"ph": "X", "cat": "kernel", "name": "args as array", "pid": 0, "tid": 7, "ts": 60.0, "dur": 1.0,
                   "args": [1, 2]})
    events.append({"ph": "X", "cat": "kernel", "name": "null args", "pid": 0, "tid": 7, "ts": 61.0, "dur": 1.0,
                   "args": None})
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    # the scanner reads these itself (an Inductor trace has one on every triton op: declining
    # would send every chunk down the ~3x slower Python path)
    assert not isinstance(kineto_native.scan_columns(json.dumps(events).encode()), str)
    native, python = _read(path, True, monkeypatch), _read(path, False, monkeypatch)
    assert native.meta.warnings == python.meta.warnings
    assert native.meta.kind_counts == python.meta.kind_counts
    assert native.events.equals(python.events)
    [warning] = python.meta.warnings
    assert warning.startswith("8 field value(s)")
    for part in ("cat 1", "tid 1", "args 1", "args.correlation 1", "args.kind 1", "args.grid 2", "args.block 1"):
        assert part in warning
    assert python.meta.kind_counts["kernel"] == 3  # the array-args and null-args kernels are kept
    assert np.count_nonzero(python.events["kind"] == "kernel") == 3


def test_whole_document_path_counts_odd_values_too(tmp_path, monkeypatch):
    # traceEvents as a dict keyed "pid,tid" (third-party writers) is decoded at once, not
    # streamed: the same rule holds there.
    path = tmp_path / "grouped.json"
    path.write_text(json.dumps({"traceEvents": {"1,1": _events()[:3], "0,7": _events()[3:]}}))
    trace = _read(path, True, monkeypatch)
    assert trace.meta.kind_counts["cpu_op"] == 2 and trace.meta.kind_counts["kernel"] == 1
    assert any("args.grid 2" in w for w in trace.meta.warnings)
