"""Each Kineto decode path against a plain ``json`` reading of the same real trace.

Why: test_kineto_native.py holds the native scanner to the Python path, which is worth only
as much as the Python path itself; and an install without a C compiler runs on that path
alone. So each path is compared here with what the standard library's json module reads from
the file: every GPU event (kernel, gpu_memcpy, gpu_memset) and runtime call (cuda_runtime,
cuda_driver), as (kind, name, start ns, duration ns, correlation id, bytes), ns being
``rint(µs * 1000)`` (events.py: times in the file's own clock). The Python path runs on every
install; the native one where it is built (test_kineto_native.py fails an install that has a
compiler but no scanner).
"""
from __future__ import annotations

import functools
import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "sample_traces"
KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_runtime": "runtime",
        "cuda_driver": "runtime"}
TRACES = {  # name -> path; the public samples (from ../shared) and two small captures of ours (traces/)
    **{n: SAMPLES / n for n in ("kineto_cupti_a100_cudagraph_rank0.json.gz", "kineto_cupti_b200_eager.json.gz",
                                "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz",
                                "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz",
                                "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz")},
    "h200-copies-eager": next((REPO / "traces").glob("copies-eager-*/rank0.*.pt.trace.json.gz")),
    "h200-kimi-linear-eager": next((REPO / "traces").glob("replica-kimi-linear-48b-a3b-tp8-c16-eager-baseline-*/rank0.*")),
}


def _int_or(value: object, default: int = -1) -> int:
    """An id or size as the trace wrote it: an integer, or a decimal string (roctracer writes
    runtime args as strings); anything else is unknown."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


@functools.cache  # each path's parametrised cases compare against one reading
def plain_reading(path: Path) -> Counter:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    out: Counter = Counter()
    for ev in events:
        kind = KIND.get(str(ev.get("cat", "")).lower())
        if ev.get("ph") != "X" or kind is None:
            continue
        args = ev.get("args") or {}
        nbytes = _int_or(args.get("bytes")) if kind != "runtime" else -1
        out[(kind, ev["name"], int(np.rint(ev["ts"] * 1000.0)), int(np.rint(ev.get("dur", 0) * 1000.0)),
             _int_or(args.get("correlation")), nbytes)] += 1
    return out


def table_rows(path: Path) -> Counter:
    [trace] = read_kineto(str(path))
    ev = trace.events
    ev = ev[ev["kind"].isin(["kernel", "memcpy", "memset", "runtime"]).to_numpy()]
    nbytes = np.where(ev["kind"].to_numpy() == "runtime", -1, ev["bytes"].to_numpy())
    return Counter(zip(ev["kind"].astype(str), ev["name"].astype(str), ev["start_ns"].tolist(), ev["dur_ns"].tolist(),
                       ev["correlation"].tolist(), nbytes.tolist()))


@pytest.mark.parametrize("decoder", ["python", "native"])
@pytest.mark.parametrize("name", sorted(TRACES))
def test_decoder_reads_what_json_reads(monkeypatch, name, decoder):
    path = TRACES[name]
    if not path.is_file():
        pytest.skip(f"sample {path.name} not found (../shared/sample_traces is not next to this checkout)")
    if decoder == "native" and kineto_native.native_scanner is None:
        pytest.skip("native scanner not built: only the Python path is there to compare")
    calls: list[int] = []
    real_scan = kineto_native.scan_columns

    def counting_scan(data: bytes) -> object:
        calls.append(1)
        return real_scan(data)
    monkeypatch.setattr(kineto_native, "scan_columns", counting_scan)
    monkeypatch.setattr(kineto_native, "_NATIVE", decoder == "native")
    got, want = table_rows(path), plain_reading(path)
    assert (not calls) if decoder == "python" else calls  # the path named is the path taken
    missing, extra = want - got, got - want
    assert not missing and not extra, (list(missing.items())[:5], list(extra.items())[:5])
