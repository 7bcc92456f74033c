"""The native scanner's C twin of chunk.py's rules (low_level/kept.h: kept_rows, _kept_names,
assemble, _narrow) against those rules in numpy and the Python path.

The contract: for a chunk the twin takes, the columns, dtypes, names, counts, rank counts and
shapes are exactly those the numpy rules give (``check`` compares both with the Python path);
the chunks it leaves to numpy (rank marks, irregular values in kept rows) give the same result
that way. The inputs sit at the rules' edges: names first seen on dropped or bad rows, every
narrowing boundary, rounding halves, the type edges of ids and times.
"""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copyprof.readers.kineto.native import scan_columns
from tests.readers.native_cases import TYPE_EDGES, check, finished_in_c, kept_rule_events, needs_scanner


@needs_scanner
def test_irregular_ids_in_kept_rows_follow_the_python_rules():
    # roctracer writes runtime args as strings ("bytes": "9216", "stream": "0x0"). A kept
    # column holding one goes through the Python path's tolerant conversion as a whole:
    # "9216" is 9216; "0x0" is unreadable (-1) and sends its column through float64, so an
    # integer above 2**53 in another row of that column is rounded as that path rounds it.
    big = 2**53 + 1
    data = json.dumps([
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 851, "tid": 851, "ts": 1.5, "dur": 2,
         "args": {"correlation": 5, "bytes": "9216", "stream": "0x0", "kind": "1"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "Spans", "tid": 3, "ts": 4, "dur": 1,
         "args": {"correlation": 6, "bytes": 64, "stream": big, "device": 0}},
    ]).encode()
    assert check(data)  # accepted, and equal to the Python path
    res = scan_columns(data)
    assert res.cols["bytes"].tolist() == [9216, 64]
    assert res.cols["stream"].tolist() == [851, int(float(big))] and int(float(big)) != big  # runtime: the thread
    assert res.cols["device"].tolist() == [-1, 0]
    # The dropped Trace span's string pid/tid change nothing, and are accepted too.
    data = (b'[{"ph":"X","cat":"Trace","name":"t","pid":"Spans","tid":"PyTorch Profiler","ts":0,"dur":9},'
            b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"device":0}}]')
    assert check(data)


@needs_scanner
def test_the_c_columns_follow_chunk_rules_at_their_edges():
    # The scanner's C twin of chunk.py's rules (low_level/kept.h) takes these chunks and gives
    # the Python path's columns, dtypes, names, counts and shapes (check), whichever events
    # are there and in whatever order: names first seen on dropped or bad rows, all rows
    # bad, none kept, nothing at all.
    rng = random.Random(5)
    events = kept_rule_events()
    cases = [events, events[::-1], [], events[:2], [events[10], events[11]], [events[1]]]
    cases += [rng.sample(events, rng.randrange(1, len(events))) for _ in range(60)]
    for evs in cases:
        data = json.dumps(evs).encode()
        assert finished_in_c(data), evs
        assert check(data), evs


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(TYPE_EDGES), st.integers(-2**63, 2**63 - 1)), min_size=12, max_size=12),
       st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0005, 0.0015, -0.0025])),
                min_size=2, max_size=2))
def test_any_ids_and_times_give_the_same_c_columns(ids, times):
    # Every narrowed column at and beyond each type's edge, any ts and dur: the C twin's
    # derivations, int32 casts, rint and narrowing against chunk.py's.
    fields = ("device", "fromDevice", "stream", "correlation", "External id", "external id", "bytes", "size",
              "graph id", "graph node id")
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": ids[10], "tid": ids[11], "ts": times[0],
              "dur": times[1], "args": {**dict(zip(fields, ids)), "grid": ids[:3], "block": ids[3:6]}}
    runtime = {**kernel, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1.5, "dur": 2.0}
    data = json.dumps([kernel, runtime]).encode()
    if check(data):
        assert finished_in_c(data)


@needs_scanner
@pytest.mark.parametrize("change", ["rank", "rank on a dropped row", "rank pid", "string id", "string ts"])
def test_chunks_the_c_twin_leaves_to_numpy_match(change):
    # Rank marks (per-rank counts) and irregular values in kept rows (the Python path's
    # tolerant conversions) are assembled by chunk.py's rules in numpy; the result is the
    # same either way, and a dropped row's irregular value leaves the chunk to the twin.
    events = kept_rule_events()
    if change == "rank":
        events[3]["args"]["rank"] = 2
    elif change == "rank on a dropped row":
        events[1]["args"] = {"rank": 1}
    elif change == "rank pid":
        events[1]["pid"] = "[TP01-DP00] 1234"
    elif change == "string id":
        events[5]["args"]["bytes"] = "9216"
    else:
        events[4]["ts"] = "3.5"
    data = json.dumps(events).encode()
    assert not finished_in_c(data)
    assert check(data)
    events[0]["args"]["bytes"] = "9216"  # a dropped cpu_op's odd value: the twin could take that one
    assert check(json.dumps(events).encode())
    events = kept_rule_events()
    events[0]["args"]["bytes"] = "9216"
    events[1]["pid"] = "Spans"
    assert finished_in_c(json.dumps(events).encode())
