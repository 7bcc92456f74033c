"""Valid JSON is never reported as damaged, whatever keys follow ``traceEvents``.

A Chrome trace is an object; keys may follow ``traceEvents`` in any order and hold anything:
``"INFO": []``, and SGLang's rank merger (sgl-project/sglang
``python/sglang/srt/utils/profile_merger.py``) writes ``traceEvents`` first and then the first
rank's other keys plus every rank's ``deviceProperties`` after it. A reader that took the last
``]`` of the document for the array's end would cut ``], "INFO": [`` out of such a file as
"skipped N bytes of damaged JSON". These tests put such tails after the array, read them
in one piece and across many pieces (the splitter cuts inside a tail's ``[{...}, {...}]`` too),
serially and with worker processes, and check that real damage is still found and costs only
itself.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from copyprof.readers import files as source
from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto
from copyprof.readers.kineto.pool import ChunkPool

DEVICES = [{"id": i, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9,
            "computeMinor": 0, "numSms": 132, "warpSize": 32} for i in range(3)]


def _events(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": 10.0 * i, "dur": 2.0, "args": {"correlation": i, "External id": i}})
        out.append({"ph": "X", "cat": "kernel", "name": f"kernel_{i % 7}", "pid": 0, "tid": 7, "ts": 10.0 * i + 3,
                    "dur": 3.0, "args": {"correlation": i, "device": 0, "stream": 7, "grid": [1, 1, 1],
                                         "block": [128, 1, 1], "note": "a ], b [ and }, { in a string"}})
    return out


TAILS = {
    "info": {"INFO": []},
    "merged": {"deviceProperties": DEVICES, "schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}},
    "nested": {"INFO": [{"a": [1, {"b": []}]}, {"c": "]"}], "x": {"y": [[], [{}]]}, "traceName": "t]"},
}


def _write(path: Path, n: int, tail: dict, head: dict | None = None) -> Path:
    doc = {**(head or {"schemaVersion": 1}), "traceEvents": _events(n), **tail}
    path.write_text(json.dumps(doc, indent=1))
    return path


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("tail", list(TAILS), ids=list(TAILS))
def test_keys_after_trace_events_are_valid_json(tmp_path, monkeypatch, tail, native):
    monkeypatch.setattr(kineto_native, "_NATIVE", native)
    [trace] = read_kineto(str(_write(tmp_path / "t.json", 40, TAILS[tail])))
    assert trace.meta.partial is None
    assert trace.meta.kind_counts["kernel"] == 40 and trace.meta.kind_counts["runtime"] == 40
    if tail == "merged":  # the keys after the array are read, as a header before it would be
        assert len(trace.meta.devices) == 3 and trace.meta.flavour == "cupti"
        assert trace.meta.metadata["distributedInfo"]["world_size"] == 2


@pytest.mark.parametrize("jobs", [1, 2], ids=["serial", "pool"])
def test_tail_read_across_many_pieces(tmp_path, monkeypatch, jobs):
    # 64 KiB blocks: the array ends inside a piece and the tail's "[{...}, {...}]" makes more
    # pieces after it; none of them may be taken for events or damage.
    monkeypatch.setattr(source, "BLOCK_SIZE", 1 << 16)
    tail = {"deviceProperties": DEVICES * 40, "INFO": [], "traceName": "merged"}
    path = _write(tmp_path / "big.json", 3000, tail)
    if jobs == 1:
        [trace] = read_kineto(str(path))
    else:
        with ChunkPool(jobs) as pool:
            [trace] = read_kineto(str(path), pool)
    assert trace.meta.partial is None
    assert trace.meta.kind_counts["kernel"] == 3000 and len(trace.events) == 3000 + 3000
    assert len(trace.meta.devices) == 120


def test_real_damage_with_a_tail_costs_only_the_damaged_event(tmp_path):
    path = _write(tmp_path / "t.json", 40, TAILS["nested"])
    text = path.read_bytes()
    at = text.index(b'"kernel_3"', len(text) // 2)
    path.write_bytes(text[:at] + b'"kernel_3\x01' + text[at + 10:])  # a control byte: invalid JSON
    [trace] = read_kineto(str(path))
    assert trace.meta.kind_counts["kernel"] == 39  # one kernel lost, the rest kept
    assert trace.meta.partial is not None and "skipped" in trace.meta.partial
    skipped = int(trace.meta.partial.split("skipped ")[1].split(" bytes")[0].replace(",", ""))
    assert skipped < 600  # about one event (each is ~400 bytes here), not the tail
    assert "invalid JSON" not in trace.meta.partial  # the array's end and the tail were read


def test_damaged_tail_keeps_every_event(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(10)})[:-1] + ', "INFO": [1, }')
    [trace] = read_kineto(str(path))
    assert trace.meta.kind_counts["kernel"] == 10
    assert "after the event array are not valid JSON" in trace.meta.partial


def test_invalid_utf8_at_the_end_is_damage_not_a_traceback(tmp_path):
    # Found by the fuzzer (kineto:8:non_utf8:251595023644780:1024): the syntax pass that finds the
    # array's end does not check UTF-8 inside strings; the decode after it does, and its error
    # must lead to the usual repair, not escape.
    path = _write(tmp_path / "t.json", 10, TAILS["info"])
    text = path.read_bytes()
    at = text.rindex(b'"kernel_')
    path.write_bytes(text[:at + 1] + b"\xff\xfe" + text[at + 3:])
    [trace] = read_kineto(str(path))
    assert trace.meta.kind_counts["kernel"] == 9 and "skipped" in trace.meta.partial
