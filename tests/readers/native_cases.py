"""Inputs and checks the native scanner's tests share (test_kineto_native.py: the scanner
against the Python path; test_kineto_native_kept.py: its C twin of chunk.py's rules;
test_kineto_native_modes.py: the scanner's own paths against each other): real traces and
their chunks, a mix of real events, events with one field retyped, and the comparison of a
chunk's two decodes."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from copyprof.readers.files import BlockStream
from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto.chunk import CATMAP, ChunkResult
from copyprof.readers.kineto.columns import decode_chunk
from copyprof.readers.kineto.native import scan_columns
from copyprof.readers.kineto.state import StreamState
from copyprof.readers.kineto.stream import stream_event_chunks
from tests.fuzz.mutate import ARG_FIELDS, EVENT_FIELDS, WEIRD

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "sample_traces"

# The comparisons need the scanner; whether it *should* be there is
# test_kineto_native.py's test_the_scanner_is_built_and_in_use's question, which never skips for its absence alone.
needs_scanner = pytest.mark.skipif(kineto_native.native_scanner is None,
                                   reason="native scanner not built (see test_the_scanner_is_built_and_in_use)")


def scan(data: bytes):  # noqa: ANN201 - the extension's own return shapes
    return kineto_native.native_scanner.scan(data)


SAMPLE_NAMES = ("kineto_cupti_a100_cudagraph_rank0.json.gz", "kineto_cupti_b200_eager.json.gz",
                "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz", "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz",
                "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz")


def real_traces() -> list[Path]:
    # The public samples by name (a missing one is a visible skip, not a case that vanishes),
    # then every capture in traces/ (part of the repository).
    return [SAMPLES / n for n in SAMPLE_NAMES] + sorted((REPO / "traces").rglob("*.pt.trace.json.gz"))


def chunks(path: Path, limit: int) -> list[bytes]:
    """The first ``limit`` chunks the serial reader decodes from ``path`` (pieces, and the
    text after the last cut, which compact one-line files are made of)."""
    out: list[bytes] = []

    def record(data: bytes | memoryview) -> None:
        if len(out) < limit:
            out.append(bytes(data))

    stream = BlockStream(str(path))
    for _ in stream_event_chunks(stream, record, StreamState(), stream.block_size):
        pass
    assert out, f"{path.name}: no chunks"
    return out


def real_events(limit: int = 60) -> list[dict]:
    """A mix of real events: kernels, runtime, memcpy, annotations, flows, the Trace span."""
    out: list[dict] = []
    for name in ("kineto_cupti_b200_eager.json.gz", "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"):
        path = SAMPLES / name
        if not path.is_file():
            pytest.skip(f"sample {name} not found")
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        by_cat: dict[str, list[dict]] = {}
        for ev in events:
            by_cat.setdefault(f"{ev.get('ph')}/{ev.get('cat')}", []).append(ev)
        for group in by_cat.values():
            out.extend(group[:4])
    return out[: limit * 4]


def retyped(events: list[dict], rng: random.Random) -> list[dict]:
    """A copy of ``events`` with one field of one event (or of its args) set to an odd value."""
    evs = [dict(e) for e in events]
    ev = rng.choice(evs)
    if rng.random() < 0.5 and isinstance(ev.get("args"), dict):
        ev["args"] = dict(ev["args"], **{rng.choice(ARG_FIELDS): rng.choice(WEIRD)})
    else:
        ev[rng.choice(EVENT_FIELDS)] = rng.choice(WEIRD)
    return evs


# Narrowing edges: the last value of each signed type and the first beyond it.
TYPE_EDGES = (0, -1, 127, 128, -128, -129, 32767, 32768, -32768, -32769, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1,
              2**63 - 1, -(2**63))


def kept_rule_events() -> list[dict]:
    """Events at the edges of chunk.py's rules that the scanner's C twin (low_level/kept.h)
    repeats: names first seen on dropped rows, host copy ops among other cpu_ops, the device,
    stream, id and bytes fallbacks, times that do not fit (bad rows, whose names still count),
    negative and huge durations, half-way ns for rint, grids beyond int32, args.kind that is
    not a string, graph launches, every known category and none."""
    def ev(cat: str | None, name: str, ts: float | None = 1.0, dur: float | None = 1.0, **args: object) -> dict:
        out: dict = {"ph": "X", "name": name, "pid": 4, "tid": 11}
        out.update({k: v for k, v in (("cat", cat), ("ts", ts), ("dur", dur)) if v is not None})
        if args:
            out["args"] = {k.replace("_", " ") if k in ("External_id", "external_id", "graph_id", "graph_node_id")
                           else k: v for k, v in args.items()}
        return out
    return [
        ev("cpu_op", "aten::mm", External_id=3),  # dropped: not a copy op; its name is not listed
        ev("Trace", "PyTorch Profiler (0)", ts=0.0, dur=1e9),  # unknown category: counted as other
        ev("cpu_op", "aten::copy_", ts=2.0, External_id=7),
        ev("kernel", "k", ts=3.0005, dur=0.0015, device=1, stream=7, correlation=5, grid=[2**31, 1, 1],
           block=[128, 1, 1]),
        ev("kernel", "k", ts=3.0025, dur=2.5e-4, fromDevice=2, stream=-5, correlation=6, grid=[-1, 2**40, 3]),
        ev("gpu_memcpy", "Memcpy DtoD (Device -> Device)", ts=4.0, dur=-1.0, fromDevice=2, bytes=300, kind="DtoD"),
        ev("gpu_memset", "Memset (Device)", ts=5.0, dur=1e300, size=40000),
        ev("Memcpy", "Memcpy PtoP", ts=8.0, dur=2.5, kind=1, graph_id=2**62, graph_node_id=-(2**62), bytes=-7, size=9),
        ev("cuda_runtime", "cudaGraphLaunch", ts=6.0, correlation=-2, external_id=9, External_id=-3),
        ev("cuda_runtime", "cudaLaunchKernel", ts=6.5, External_id=-1, external_id=12),
        ev("kernel", "only on a bad row", ts=None),  # no ts: a bad row
        ev("cuda_runtime", "cudaGraphLaunch_v10000", ts=1e16),  # ns beyond int64: bad
        ev("gpu_memcpy", "Memcpy HtoD", ts=-1e17, kind="HtoD"),
        ev("gpu_memcpy", "Memcpy DtoH", ts=9.0, dur=None, kind=""),
        ev("hip_runtime", "hipGraphLaunch", ts=9.5, stream=3),
        ev("python_function", "f.py(1): f", ts=9.0, dur=0.5),
        ev("user_annotation", "step", ts=9.0, dur=3.0, device=0),
        ev("gpu_user_annotation", "step", ts=9.0, dur=3.0, device=-4),
        ev(None, "no category"),
        ev("Kernel", "legacy spelling", ts=10.0, device=0, stream=0, grid=[1, 1], block=None),
        ev("cpu_op", "aten::to", ts=11.0, **{"External_id": 40, "Input Dims": [[16, 2048], []],
                                            "Input type": ["c10::BFloat16", "float"]}),
    ]


def python_path(data: bytes) -> ChunkResult | None:
    """The Python path's result, or None when it rejects the chunk as malformed JSON."""
    try:
        return decode_chunk(data)
    except msgspec.DecodeError:
        return None


def assert_same(got: ChunkResult, want: ChunkResult) -> None:
    assert got.names == want.names
    assert got.name_codes.dtype == want.name_codes.dtype and np.array_equal(got.name_codes, want.name_codes)
    assert np.array_equal(got.counts, want.counts)
    assert (got.other, got.bad, got.graph_launches) == (want.other, want.bad, want.graph_launches)
    assert got.odd.tolist() == want.odd.tolist()  # values of an unexpected type, per field
    assert got.cols.keys() == want.cols.keys()
    for key, want_col in want.cols.items():
        col = got.cols[key]
        assert col.dtype == want_col.dtype, key
        assert col.shape == want_col.shape and (col == want_col).all(), key
    assert got.rank_counts.keys() == want.rank_counts.keys()
    for key, counts in want.rank_counts.items():
        assert np.array_equal(got.rank_counts[key], counts), key
    assert list(got.shapes.items()) == list(want.shapes.items())


def check(data: bytes) -> bool:
    """Native and Python paths agree on ``data``; True when the scanner accepted it. Where
    it did, the scanner's C twin of chunk.py's rules (low_level/kept.h) and those rules in
    numpy give the same chunk too."""
    want = python_path(data)
    got = scan_columns(data)
    if want is None:  # malformed JSON: the scanner must not accept what msgspec rejects
        assert isinstance(got, str), data[:200]
        return False
    if isinstance(got, str):
        assert " at byte " in got or "kept event" in got  # a one-line reason
        return False
    assert_same(got, want)
    assert_same(scan_columns(data, finish_in_c=False), got)
    return True


def finished_in_c(data: bytes) -> bool:
    """Whether the scanner's C twin (kept.h) made the chunk's columns, not the numpy rules."""
    scanned = scan(data)
    facts = [CATMAP(c) for c in scanned[3]] + [(-1, False)]
    return kineto_native._kept_columns(data, scanned, facts) is not None
