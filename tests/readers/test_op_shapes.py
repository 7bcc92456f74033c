"""Recorded shapes of host copy ops (torch profiler ``record_shapes``): ``Input Dims`` and
``Input type`` of a kept ``aten::copy_`` become ``TraceMeta.op_shapes`` by External id, the
same whether the native scanner (which notes the raw text of those args for the Python side to
read) or the Python path decodes the chunk, and ops without shapes or without an External id
are left out.
"""
from __future__ import annotations

import json

import pytest

from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto.chunk import shape_text
from copyprof.readers.kineto.columns import decode_chunk


def _op(ext: object, dims: object = None, types: object = None, name: str = "aten::copy_") -> dict:
    args: dict = {"External id": ext}
    if dims is not None:
        args["Input Dims"] = dims
    if types is not None:
        args["Input type"] = types
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, "args": args}


CHUNK = json.dumps([
    _op(7, [[16, 2048], [16, 2048], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"]),
    _op(8, [[16, 8, 128], [16, 8, 128]], ["c10::BFloat16", "float"]),
    _op(9),  # no shapes recorded
    _op(-1, [[4]], ["long int", "long int"]),  # no External id: nothing to join it by
    _op(10, "not a list", ["float", "float"]),  # an odd value: no shape, the op is kept
    _op(11, [[2, 2]], ["float", "float"], name="aten::mm"),  # not a copy op: not kept, no shape
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2.0, "dur": 1.0, "args": {"correlation": 1}},
]).encode()
EXPECTED = {7: "[16,2048] bf16<-bf16", 8: "[16,8,128] bf16<-fp32"}


def test_shape_text_reads_what_torch_records() -> None:
    assert shape_text([[16, 2048], [16, 2048]], ["c10::BFloat16", "c10::Half"]) == "[16,2048] bf16<-fp16"
    assert shape_text([[3]], None) == "[3]" and shape_text([], ["float"]) == "" and shape_text(None, None) == ""


def test_python_path_collects_the_copy_ops_shapes() -> None:
    res = decode_chunk(CHUNK)
    assert res.shapes == EXPECTED
    assert int(res.counts[5]) == 6  # every cpu_op counted; the copy ops kept as rows


@pytest.mark.skipif(not kineto_native.native_available(), reason="native scanner not built")
def test_native_path_reads_the_same_shapes() -> None:
    res = kineto_native.scan_columns(CHUNK)
    assert not isinstance(res, str), res  # the scanner does not decline a chunk with shapes
    assert res.shapes == EXPECTED
    assert kineto_native.scan_columns(CHUNK.replace(b'"Input Dims"', b'"Input Dimz"')).shapes == {}


@pytest.mark.skipif(not kineto_native.native_available(), reason="native scanner not built")
def test_both_paths_agree_on_the_public_samples(samples, monkeypatch) -> None:
    # real traces with record_shapes (vLLM, SGLang, TraceLens samples): both decoders give the
    # same shapes for the same copy ops
    from copyprof.readers.kineto import read_kineto

    found = 0
    for path in sorted(samples.glob("kineto_*.json.gz")):
        native = {t.meta.ranks[0]: t.meta.op_shapes for t in read_kineto(str(path))}
        monkeypatch.setattr(kineto_native, "_NATIVE", False)
        python = {t.meta.ranks[0]: t.meta.op_shapes for t in read_kineto(str(path))}
        monkeypatch.setattr(kineto_native, "_NATIVE", True)
        assert native == python, path.name
        found += sum(len(v) for v in native.values())
    assert found > 0  # the samples do record shapes
