"""Property-based tests of the Kineto reader (hypothesis): what holds for every input, not just samples.

Inputs (tests/fuzz/properties.py): mostly valid traces — kernels, copies, memsets, runtime
calls, annotations and host ops as PyTorch writes them, any printable names, any order — with
a few fields or whole events damaged (wrong types, huge or negative numbers, NaN, empty
strings, non-UTF-8 bytes) and header fields of the wrong type. Expected:

* the reader, ``summarize`` and ``analyze_run`` raise nothing but a one-line CopyprofError
  naming the file, and no numpy RuntimeWarning (garbage values; the CLI would print it);
* at least half the examples are read (one that refuses everything fails);
* a returned table keeps the event-table contract (events.py);
* an undamaged trace loses nothing: every event is counted by kind and every GPU event is a
  row; shuffling changes no row and a duplicate is two rows;
* one damaged event in a Kineto array costs that event only, whichever piece it falls in.

Derandomized and bounded (examples per test below, a 30 s alarm per example): CI time is fixed.
The CSV and SQLite formats are in test_properties_tables.py.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copyprof.readers import files as source
from copyprof.readers.kineto import read_kineto
from tests.fuzz.properties import (
    SETTINGS,
    UNDAMAGED,
    Tally,
    bounded,
    fresh,
    name_text,
    weird,
    weird_float,
    weird_int,
    weird_text,
)

# A numpy RuntimeWarning (overflow, invalid cast) means garbage values, and the CLI would print it.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
KIND_OF_CAT = {**GPU_CATS, "cuda_runtime": "runtime", "user_annotation": "annotation", "cpu_op": "cpu_op"}
NAMES = {"gpu_memcpy": ["Memcpy DtoD (Device -> Device)", "Memcpy HtoD (Pinned -> Device)"],
         "gpu_memset": ["Memset (Device)"], "cuda_runtime": ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaGraphLaunch"],
         "user_annotation": ["execute_context_0(0)_generation_4(4)", "ProfilerStep#3"], "cpu_op": ["aten::copy_"]}


def _event(cat: str, i: int, name: str, ts_ns: int, dur_ns: int, nbytes: int, grid: int) -> dict[str, Any]:
    """One event of ``cat`` with the fields PyTorch's Kineto writes (trace-formats.md §1)."""
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": NAMES[cat][i % len(NAMES[cat])] if cat in NAMES else name,
                          "pid": 0 if cat in GPU_CATS else 4242, "tid": 7 if cat in GPU_CATS else 4242,
                          "ts": ts_ns / 1000, "dur": dur_ns / 1000}
    if cat == "kernel":
        ev["args"] = {"device": 0, "stream": 7, "correlation": i, "grid": [grid, 1, 1], "block": [256, 1, 1],
                      "External id": i}
    elif cat in GPU_CATS:
        ev["args"] = {"device": 0, "stream": 7, "correlation": i, "bytes": nbytes}
    elif cat == "cuda_runtime":
        ev["args"] = {"correlation": i, "External id": i}
    else:
        ev["args"] = {"External id": i}
    return ev


valid_event = st.builds(_event, st.sampled_from(list(KIND_OF_CAT)), st.integers(0, 10**6), name_text,
                        st.integers(0, 10**15), st.integers(0, 10**7), st.integers(0, 2**40), st.integers(1, 2**20))
weird_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "B", None, 1]),
     "cat": st.sampled_from(["kernel", "gpu_memcpy", "cuda_runtime", "user_annotation", "cpu_op", "Kernel", "x"]),
     "name": st.one_of(st.sampled_from(["Memcpy DtoD (Device -> Device)", "execute_context_0(0)_generation_4(4)",
                                        "__amd_rocclr_copyBuffer.kd", "cudaGraphLaunch", "aten::copy_"]), weird_text)},
    optional={"ts": st.one_of(weird_float, weird_int, weird_text), "dur": st.one_of(weird_float, weird_int, weird_text),
              "pid": weird, "tid": weird,
              "args": st.one_of(weird, st.dictionaries(st.sampled_from(["device", "stream", "correlation", "bytes", "grid",
                                                                        "block", "External id", "graph id", "kind"]),
                                                       weird, max_size=5))})
field_damage = st.lists(st.tuples(st.integers(0, 999), st.sampled_from(["ph", "cat", "name", "ts", "dur", "pid", "tid",
                                                                         "args", "args.device", "args.stream",
                                                                         "args.correlation", "args.bytes", "args.grid"]),
                                  weird), min_size=1, max_size=2)


def _write_json(path: Path, doc: Any) -> str:
    path.write_bytes(json.dumps(doc, allow_nan=True).encode("utf-8", "surrogateescape"))
    return str(path)


def _damaged(events: list[dict], hits: list[tuple[int, str, Any]]) -> list[dict]:
    out = [dict(e, args=dict(e["args"])) for e in events]
    for i, field, value in hits:
        ev = out[i % len(out)]
        if field.startswith("args."):
            ev["args"][field[5:]] = value
        else:
            ev[field] = value
    return out


def test_kineto_mostly_valid_traces(tmp_path: Path) -> None:
    tally = Tally()

    @SETTINGS
    @given(events=st.lists(valid_event, min_size=1, max_size=30), intact=UNDAMAGED, hits=field_damage,
           extra=st.lists(weird_event, max_size=1), at=st.integers(0, 30),
           header=st.one_of(st.just({}), st.dictionaries(st.sampled_from(
               ["deviceProperties", "distributedInfo", "traceName", "cupti_version", "roctracer_version"]), weird,
               min_size=1, max_size=2)))
    @bounded
    def example(events: list[dict], intact: bool, hits: list, extra: list[dict], at: int, header: dict) -> None:
        if intact:
            hits, extra, header = [], [], {}
        doc = _damaged(events, hits)
        doc[at % (len(doc) + 1):at % (len(doc) + 1)] = extra
        path = _write_json(fresh(tmp_path) / "t.json", {**header, "traceEvents": doc})
        traces = tally.read(read_kineto, path, path)
        if hits or extra or header:
            return
        # Undamaged: nothing lost. Every event is counted by its kind, every GPU event is a row.
        assert traces is not None, "an undamaged trace was refused"
        [t] = traces
        want: dict[str, int] = {}
        for ev in events:
            want[KIND_OF_CAT[ev["cat"]]] = want.get(KIND_OF_CAT[ev["cat"]], 0) + 1
        assert {k: v for k, v in t.meta.kind_counts.items() if v} == want
        for cat, kind in GPU_CATS.items():
            assert int((t.events["kind"] == kind).sum()) == want.get(kind, 0), cat
        assert not t.meta.partial and not t.meta.warnings
        tally.exact += 1
    example()
    tally.check()


good_event = st.builds(
    lambda i, cat, ts, dur, nb: {"ph": "X", "cat": cat, "name": f"op{i % 7}", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                                 "args": {"device": 0, "stream": 7, "correlation": i, "bytes": nb,
                                          "nested": [{"a": i}, {"b": 1}]}},
    st.integers(0, 10**6), st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]), st.integers(0, 10**9),
    st.integers(0, 10**4), st.integers(0, 2**40))


@SETTINGS
@given(events=st.lists(good_event, min_size=1, max_size=40), order=st.randoms(use_true_random=False),
       dup=st.integers(0, 39))
@bounded
def test_kineto_well_formed_nothing_lost_order_free(tmp_path: Path, events: list[dict], order: Any, dup: int) -> None:
    tmp_path = fresh(tmp_path)
    # Every GPU event is a row; shuffling changes no row; a duplicated event is two rows.
    [a] = read_kineto(_write_json(tmp_path / "a.json", {"traceEvents": events}))
    shuffled = events + [events[dup % len(events)]]
    order.shuffle(shuffled)
    [b] = read_kineto(_write_json(tmp_path / "b.json", {"traceEvents": shuffled}))
    assert len(a.events) == len(events) and len(b.events) == len(events) + 1
    key = ["start_ns", "dur_ns", "correlation", "bytes"]
    rows_a = a.events[key].sort_values(key).to_numpy().tolist()
    rows_b = b.events[key].sort_values(key).to_numpy().tolist()
    extra = [r for r in rows_b]
    for r in rows_a:
        extra.remove(r)
    assert len(extra) == 1 and extra[0] in rows_a


@settings(SETTINGS, max_examples=40)
@given(events=st.lists(good_event, min_size=3, max_size=60), victim=st.integers(0, 59),
       block=st.sampled_from([0, 256, 1024, 4096]))
@bounded
def test_kineto_one_damaged_event_costs_one_event(tmp_path: Path, events: list[dict], victim: int, block: int) -> None:
    tmp_path = fresh(tmp_path)
    # The damaged event's first ':' becomes ';' (invalid JSON). With small blocks the damage
    # falls in any piece of the streaming reader, not just the final one.
    victim %= len(events)
    lines = [json.dumps(e) for e in events]
    lines[victim] = lines[victim].replace(":", ";", 1)
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    old = source.BLOCK_SIZE, source.READ_SIZE
    if block:
        source.BLOCK_SIZE = source.READ_SIZE = block
    try:
        [t] = read_kineto(str(path))
    finally:
        source.BLOCK_SIZE, source.READ_SIZE = old
    kept = set(t.events["correlation"].tolist())
    assert kept == {e["args"]["correlation"] for i, e in enumerate(events) if i != victim}
    assert t.meta.partial  # says what was skipped (or, for the last event, where the array broke)
