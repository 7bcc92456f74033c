"""Inputs and checks the native scanner's tests share (test_kineto_native.py: the scanner
against the Python path; test_kineto_native_modes.py: the scanner's own paths against each
other): real traces and their chunks, a mix of real events, and events with one field retyped."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from copyprof.readers.files import BlockStream
from copyprof.readers.kineto import native as kineto_native
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
