"""Hand-made Kineto edge files: legacy layouts, flavours, copy forms, damaged input.

Each file is written by the test so its content is visible here; shapes follow
trace-formats.md §1 (kineto output_json.cpp, legacy tb_plugin samples, H200 measurements).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from copyprof.errors import CopyprofError
from copyprof.readers.kineto import read_kineto
from copyprof.taxonomy.copies import copy_class, resolve_bytes_at


def _write(path: Path, doc, gz: bool = False, indent: int | None = None) -> Path:
    text = json.dumps(doc, indent=indent).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _x(cat, name, ts, dur, pid=0, tid=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_legacy_bare_list_with_capitalised_categories(tmp_path):
    # 2020-21 tb_plugin layout: top-level list, `Kernel`/`Memcpy`/`Runtime`, tid "stream 7",
    # lower-case "external id".
    doc = [
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 5, "ts": 10, "dur": 2,
         "args": {"correlation": 9, "external id": 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 12, "dur": 1.5, "args": {"device": 0, "correlation": 9, "bytes": 4096}},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 14, "dur": 1, "args": {}},
    ]
    [t] = read_kineto(str(_write(tmp_path / "legacy.json", doc)))
    ev = t.events
    assert t.meta.kind_counts["memcpy"] == 1 and t.meta.kind_counts["kernel"] == 1
    memcpy = ev[ev["kind"] == "memcpy"].iloc[0]
    assert memcpy["stream"] == 7 and memcpy["bytes"] == 4096 and memcpy["copy_dir"] == "DtoD"
    assert memcpy["start_ns"] == 12000 and memcpy["dur_ns"] == 1500
    assert ev[ev["kind"] == "runtime"].iloc[0]["external_id"] == 3


def test_string_pids_and_trace_events_as_dict(tmp_path):
    # Third-party writers key traceEvents by "pid,tid" and use string pids ("Spans").
    doc = {"traceEvents": {"0,7": [_x("kernel", "k", 1.0, 2.0, pid="0")],
                           "Spans,1": [{"ph": "X", "cat": "Trace", "name": "s", "pid": "Spans", "tid": 1, "ts": 0, "dur": 9}]}}
    [t] = read_kineto(str(_write(tmp_path / "dict.json", doc)))
    assert t.meta.kind_counts["kernel"] == 1
    assert t.events.iloc[0]["device"] == 0


def test_rocprofiler_sdk_flavour_copybuffer_kernels(tmp_path):
    # rocprofiler-sdk Kineto: blit copies are cat=kernel `__amd_rocclr_copyBuffer.kd`; an eager
    # one carries bytes (correlated copy API), a graph-replayed one carries nothing.
    doc = {"rocprofiler-sdk_version": "1.0", "deviceProperties": [{"id": 0, "name": "AMD Instinct MI355X", "warpSize": 64, "numSms": 256, "computeMajor": 9, "computeMinor": 5}],
           "traceEvents": [
               _x("kernel", "__amd_rocclr_copyBuffer.kd", 1, 5, device=0, stream=1, correlation=1, bytes=229376),
               _x("kernel", "__amd_rocclr_copyBuffer.kd", 10, 5, device=0, stream=1, correlation=2),
               _x("kernel", "__amd_rocclr_fillBufferAligned.kd", 20, 1, device=0, stream=1, correlation=3),
               _x("kernel", "triton_poi_fused_copy__0", 30, 1, device=0, stream=1, correlation=4),
           ]}
    [t] = read_kineto(str(_write(tmp_path / "sdk.json.gz", doc, gz=True)))
    assert t.meta.flavour == "rocprofiler-sdk"
    assert list(copy_class(t.events)) == ["d2d", "d2d", "memset", "elementwise_copy"]


def test_memcpy32_post_bytes_from_grid(tmp_path):
    # H200 graph replay (trace-formats.md §1.5.1): memcpy32_post, grid [36,1,1] block [256,1,1]
    # moved 36,864 bytes = 36 * 256 * 4.
    doc = {"traceEvents": [_x("kernel", "memcpy32_post", 1, 2, device=0, stream=7, correlation=5, grid=[36, 1, 1], block=[256, 1, 1])]}
    [t] = read_kineto(str(_write(tmp_path / "m.json", doc)))
    cls = copy_class(t.events)
    nbytes, src = resolve_bytes_at(t.events, np.flatnonzero((cls == "d2d").to_numpy()))
    assert cls.iloc[0] == "d2d"
    assert nbytes[0] == 36864 and src[0] == "grid"


def test_many_chunks_pretty_printed_match_compact(tmp_path):
    # Documents larger than one block are cut into chunks at event boundaries; nested args
    # objects and "},{" inside names must not break it. Same events, two layouts, same table.
    events = [_x("kernel", f"k{i} weird }},{{ name", i, 1, device=0, stream=i % 3, correlation=i,
                 grid=[i, 1, 1], block=[128, 1, 1], nested={"a": [{"b": 1}, {"c": 2}]}) for i in range(30000)]
    doc = {"schemaVersion": 1, "traceEvents": events, "traceName": "x"}
    from copyprof.readers import files as source
    old = source.BLOCK_SIZE
    try:
        source.BLOCK_SIZE = 1 << 16  # force many blocks
        [a] = read_kineto(str(_write(tmp_path / "compact.json", doc)))
        [b] = read_kineto(str(_write(tmp_path / "pretty.json.gz", doc, gz=True, indent=2)))
    finally:
        source.BLOCK_SIZE = old
    assert len(a.events) == len(b.events) == 30000
    assert a.events["correlation"].tolist() == list(range(30000))
    assert (a.events["grid_x"].to_numpy() == b.events["grid_x"].to_numpy()).all()


def test_events_larger_than_the_cut_search_window_are_cut_at_their_ends(tmp_path):
    # The splitter looks for the last event boundary of a block in a window at its end that
    # holds a few usual events and grows until a boundary is in it. Events of 5-40 KB (a
    # stack-laden or huge-args event) leave windows without one; every event must still be
    # read whole, in order, the same as with one block for the whole document.
    events = [_x("kernel", f"k{i}", i, 1, device=0, stream=0, correlation=i, note="x" * (5000 + 7000 * (i % 6)))
              for i in range(400)]
    doc = {"schemaVersion": 1, "traceEvents": events}
    from copyprof.readers import files as source
    old = source.BLOCK_SIZE
    try:
        source.BLOCK_SIZE = 1 << 16
        [cut] = read_kineto(str(_write(tmp_path / "cut.json", doc)))
    finally:
        source.BLOCK_SIZE = old
    [whole] = read_kineto(str(_write(tmp_path / "whole.json", doc)))
    assert cut.events["correlation"].tolist() == whole.events["correlation"].tolist() == list(range(400))


def test_truncated_gzip_keeps_whole_events_and_says_so(tmp_path):
    events = [_x("kernel", "k", i, 1, device=0, correlation=i) for i in range(50000)]
    full = gzip.compress(json.dumps({"traceEvents": events}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(full[: len(full) // 2])
    [t] = read_kineto(str(path))
    assert t.meta.partial and "gzip stream ends" in t.meta.partial
    assert 0 < len(t.events) < 50000
    # The events kept are a prefix of the file, complete and in order.
    assert t.events["correlation"].tolist() == list(range(len(t.events)))


def test_invalid_json_is_a_one_line_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [{"ph": X}]}')
    with pytest.raises(CopyprofError) as err:
        read_kineto(str(path))
    assert "bad.json" in str(err.value) and "\n" not in str(err.value)


def test_non_numeric_fields_are_tolerated(tmp_path):
    # "N/A" bandwidths, string bytes, NaN-like durations, args that are not objects.
    doc = {"traceEvents": [
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "5.5", "N/A", device=0, bytes="9216"),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 1, "dur": 1, "args": [1, 2]},
    ]}
    [t] = read_kineto(str(_write(tmp_path / "odd.json", doc)))
    m = t.events[t.events["kind"] == "memcpy"].iloc[0]
    assert m["bytes"] == 9216 and m["start_ns"] == 5500 and m["dur_ns"] == 0


def test_missing_and_null_args_read_as_unknown(tmp_path):
    # Events without "args" share one frozen default EventArgs; "args": null is the other spelling
    # (trace-formats.md §1: args is optional). Both must give the table's unknown values (-1,
    # device from pid for GPU rows, stream from tid), exactly as an empty args object does.
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "no_args", "pid": 3, "tid": 11, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "null_args", "pid": 3, "tid": 11, "ts": 2, "dur": 1, "args": None},
        _x("kernel", "empty_args", 3, 1, pid=3, tid=11),
        _x("kernel", "full_args", 4, 1, pid=3, tid=11, device=5, stream=7, correlation=42, grid=[2, 1, 1]),
    ]}
    [t] = read_kineto(str(_write(tmp_path / "args.json", doc)))
    ev = t.events.set_index(t.events["name"].astype(str))
    for name in ("no_args", "null_args", "empty_args"):
        row = ev.loc[name]
        assert (row["device"], row["stream"], row["correlation"], row["grid_x"]) == (3, 11, -1, -1), name
    full = ev.loc["full_args"]
    assert (full["device"], full["stream"], full["correlation"], full["grid_x"]) == (5, 7, 42, 2)
