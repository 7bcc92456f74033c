"""Property-based tests of the readers (hypothesis): what holds for *every* input, not just samples.

For each format, hypothesis writes small files whose fields take values of the wrong type,
huge or negative numbers, NaN, empty strings and non-UTF-8 bytes, with events duplicated and
out of order; then the reader, ``summarize`` and ``analyze_run`` run in this process. Expected:

* the only exception is CopyprofError (one line), and no numpy RuntimeWarning is raised (it
  means garbage values, and the CLI would print it on stderr);
* a returned table keeps the event-table contract (events.py): every column present with its
  dtype, durations >= 0, ``bytes_src`` "none" exactly where bytes is unknown;
* where the input is well formed, nothing is lost: every event is a row, order does not
  matter, a duplicate is two rows;
* one damaged event in a Kineto array costs that event only, whichever piece it falls in.

Derandomized (the same examples on every run) and bounded (examples per test below, a 30 s
alarm per example), so CI time is fixed: about 20 s in all.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import signal
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from copyprof.analysis.report import analyze_run
from copyprof.analysis.summary import summarize
from copyprof.errors import CopyprofError
from copyprof.events import CLOCK_COLUMNS, COLUMNS, INT_COLUMNS, Trace, compact_ints
from copyprof.readers import files as source
from copyprof.readers.kineto import read_kineto
from copyprof.readers.nsys_sqlite import read_nsys
from copyprof.readers.rocpd import read_rocpd
from copyprof.readers.rocprof_v1 import read_rocprof_v1_csv
from copyprof.readers.rocprofv3_csv import read_rocprofv3_csv
from tests.fuzz.seeds import DATA

# A numpy RuntimeWarning (overflow, invalid cast) means garbage values, and the CLI would print it.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NON_UTF8 = "\udcff\udcfe"  # written with surrogateescape: raw 0xff 0xfe bytes in the file

weird_int = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63)]))
weird_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([1e308, -1e308, 1e19, 9.3e15, -0.0]))  # ns beyond int64 once x1000
weird_text = st.one_of(st.text(max_size=12), st.sampled_from(["", "nan", "12", "1e400", "../../evil", NON_UTF8]))
weird = st.one_of(st.none(), st.booleans(), weird_int, weird_float, weird_text, st.lists(weird_int, max_size=4))


def bounded(test: Callable[..., None]) -> Callable[..., None]:
    """A hang fails the example (30 s) instead of stalling CI."""
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        def boom(signum: int, frame: Any) -> None:
            raise TimeoutError("reader still running after 30 s")
        old = signal.signal(signal.SIGALRM, boom)
        signal.alarm(30)
        try:
            test(*args, **kwargs)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    return run


def check_contract(traces: list[Trace]) -> None:
    for t in traces:
        ev = t.events
        assert list(ev.columns) == list(COLUMNS)
        for col, dtype in INT_COLUMNS.items():  # the clock int64; the rest compacted (events.py)
            if col in CLOCK_COLUMNS:
                assert ev[col].dtype == np.dtype(dtype), col
            else:
                assert ev[col].dtype == compact_ints(ev[col].to_numpy()).dtype, col
                assert ev[col].dtype.kind == "i" and ev[col].dtype.itemsize <= np.dtype(dtype).itemsize, col
        assert (ev["dur_ns"] >= 0).all()
        assert ((ev["bytes"] < 0) == (ev["bytes_src"] == "none")).all()
        assert all(v >= 0 for v in t.meta.kind_counts.values())
        summarize(t)


def read_all(reader: Callable[[Any], list[Trace]], arg: Any, path: str) -> list[Trace] | None:
    """Run reader + summary + report analysis; None when it said no with a CopyprofError."""
    try:
        traces = reader(arg)
    except CopyprofError as exc:
        assert "\n" not in str(exc) or "Traceback" not in str(exc)
        return None
    check_contract(traces)
    try:
        analyze_run(traces, path, None)
    except CopyprofError:
        pass
    return traces


# ------------------------------------------------------------------------ Kineto
kineto_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "B", None, 1]),
     "cat": st.sampled_from(["kernel", "gpu_memcpy", "cuda_runtime", "user_annotation", "cpu_op", "Kernel", "x"]),
     "name": st.one_of(st.sampled_from(["Memcpy DtoD (Device -> Device)", "execute_context_0(0)_generation_4(4)",
                                        "__amd_rocclr_copyBuffer.kd", "cudaGraphLaunch", "aten::copy_"]), weird_text)},
    optional={"ts": st.one_of(weird_float, weird_int, weird_text), "dur": st.one_of(weird_float, weird_int, weird_text),
              "pid": weird, "tid": weird,
              "args": st.one_of(weird, st.dictionaries(st.sampled_from(["device", "stream", "correlation", "bytes", "grid",
                                                                        "block", "External id", "graph id", "kind"]),
                                                       weird, max_size=5))})


def fresh(tmp_path: Path) -> Path:
    """A new folder per hypothesis example (tmp_path is shared by all examples of a test)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def _write_json(path: Path, doc: Any) -> str:
    path.write_bytes(json.dumps(doc, allow_nan=True).encode("utf-8", "surrogateescape"))
    return str(path)


@SETTINGS
@given(events=st.lists(kineto_event, max_size=30), header=st.dictionaries(st.sampled_from(
    ["deviceProperties", "distributedInfo", "traceName", "cupti_version", "roctracer_version"]), weird, max_size=3),
    rank=weird)
@bounded
def test_kineto_any_events(tmp_path: Path, events: list[dict], header: dict, rank: Any) -> None:
    tmp_path = fresh(tmp_path)
    header.setdefault("distributedInfo", {"rank": rank, "world_size": 8})
    path = _write_json(tmp_path / "t.json", {**header, "traceEvents": events})
    read_all(read_kineto, path, path)


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


# ------------------------------------------------------------------------ CSV formats
KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Workgroup_Size_X", "Workgroup_Size_Y",
                 "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
cell = st.one_of(weird_int.map(str), weird_float.map(str), weird_text, st.sampled_from(["Agent 2", "GPU 0", "CPU 1"]))


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows([header, *rows])
    path.write_bytes(buf.getvalue().encode("utf-8", "surrogateescape"))
    return str(path)


@SETTINGS
@given(rows=st.lists(st.lists(cell, min_size=17, max_size=17), max_size=12))
@bounded
def test_rocprofv3_kernel_csv_any_cells(tmp_path: Path, rows: list[list[str]]) -> None:
    tmp_path = fresh(tmp_path)
    path = _write_csv(tmp_path / "1_kernel_trace.csv", KERNEL_HEADER, rows)
    read_all(read_rocprofv3_csv, [path], path)


@SETTINGS
@given(spans=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 10**9)), min_size=1, max_size=30))
@bounded
def test_rocprofv3_well_formed_rows_all_kept(tmp_path: Path, spans: list[tuple[int, int]]) -> None:
    tmp_path = fresh(tmp_path)
    rows = [["KERNEL_DISPATCH", "Agent 2", "1", "3", "9", str(i), "1", f"k{i % 3}", str(i), str(s), str(s + d),
             "256", "1", "1", "4096", "1", "1"] for i, (s, d) in enumerate(spans)]
    path = _write_csv(tmp_path / "1_kernel_trace.csv", KERNEL_HEADER, rows)
    [t] = read_rocprofv3_csv([path])
    assert sorted(t.events["start_ns"].tolist()) == sorted(s for s, _ in spans)
    assert sorted(t.events["dur_ns"].tolist()) == sorted(d for _, d in spans)
    assert (t.events["grid_x"] == 16).all() and not t.meta.warnings


V1_HEADER = (DATA / "rocprof_v1_results.csv").read_text().splitlines()[0].replace('"', "").split(",")


@SETTINGS
@given(rows=st.lists(st.lists(cell, min_size=len(V1_HEADER) - 2, max_size=len(V1_HEADER) + 1), max_size=12))
@bounded
def test_rocprof_v1_any_cells(tmp_path: Path, rows: list[list[str]]) -> None:
    tmp_path = fresh(tmp_path)
    path = _write_csv(tmp_path / "results.csv", V1_HEADER, rows)
    traces = read_all(read_rocprof_v1_csv, path, path)
    if traces is not None:  # every row is a kernel or is counted as skipped
        assert len(traces[0].events) <= len(rows)


# ------------------------------------------------------------------------ SQLite formats
sql_value = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), weird_float, st.text(max_size=8),
                      st.binary(max_size=4))


@SETTINGS
@given(values=st.lists(st.lists(sql_value, min_size=6, max_size=6), max_size=10))
@bounded
def test_nsys_any_cell_values(tmp_path: Path, values: list[list[Any]]) -> None:
    tmp_path = fresh(tmp_path)
    # start, end, deviceId, streamId, correlationId, demangledName with anything SQLite stores.
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")  # no NOT NULL: anything goes in
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,"
                 " streamId INTEGER, correlationId INTEGER, demangledName INTEGER, globalPid INTEGER)")
    conn.execute("INSERT INTO StringIds VALUES (1, 'kernel_a')")
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId,"
                     " demangledName, globalPid) VALUES (?, ?, ?, ?, ?, ?, 281492156579840)", values)
    conn.commit()
    cols = ("start", "end", "deviceId", "streamId", "correlationId", "demangledName")
    # What SQLite stored (INTEGER affinity turns 0.0 and '12' into integers) decides what is "not an integer".
    bad = conn.execute("SELECT " + " + ".join(f"COALESCE(SUM(typeof({c}) NOT IN ('integer', 'null')), 0)"
                                              for c in cols) + " FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    conn.close()
    traces = read_all(read_nsys, str(path), str(path))
    if traces is not None:
        assert (bad > 0) == any("not integers" in w for w in traces[0].meta.warnings)


@SETTINGS
@given(values=st.lists(st.lists(sql_value, min_size=5, max_size=5), min_size=1, max_size=10))
@bounded
def test_rocpd_any_cell_values(tmp_path: Path, values: list[list[Any]]) -> None:
    tmp_path = fresh(tmp_path)
    # pid, name, start, end, agent_type_index of the kernels view, with anything SQLite stores (no
    # declared types, so no affinity conversions). A non-integer pid or index reads as missing.
    path = tmp_path / "1_results.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE rocpd_metadata (tag TEXT, value TEXT)")
    conn.execute("CREATE TABLE k (pid, name, start, \"end\", agent_type_index, agent_type)")
    conn.executemany("INSERT INTO k VALUES (?, ?, ?, ?, ?, 'GPU')", values)
    conn.execute("CREATE VIEW kernels AS SELECT * FROM k")
    conn.execute("CREATE VIEW memory_copies AS SELECT * FROM k WHERE 0")
    conn.commit()
    whole = conn.execute("SELECT COUNT(*) FROM k WHERE typeof(start) = 'integer' AND typeof(\"end\") = 'integer'"
                         ).fetchone()[0]
    conn.close()
    traces = read_all(read_rocpd, str(path), str(path))
    if traces is not None:  # rows with integer start/end are kept, the rest skipped with a warning
        assert sum(len(t.events) for t in traces) == whole
