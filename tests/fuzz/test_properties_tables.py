"""Property-based tests of the table readers (hypothesis): rocprofv3 CSV, rocprof v1, nsys SQLite, rocpd.

Inputs (tests/fuzz/properties.py): mostly valid tables — rows as each profiler writes them,
any printable kernel names (commas and quotes included), clocks up to 2**62, zero durations,
duplicate rows, any order — with about six in ten files given one or two damaged cells (wrong
types, huge or negative numbers, NaN, empty strings, non-UTF-8 bytes; rows cut short or too
long for rocprof v1). Expected, for every file:

* nothing but a one-line CopyprofError naming the file, and no numpy RuntimeWarning;
* at least half the files of each test are read (one that refuses everything fails);
* a returned table keeps the event-table contract (events.py);
* undamaged: every row is an event with its start, duration and name, and nothing is warned;
* SQLite: a row whose times are integers is kept, whatever else it holds; a cell that is not an
  integer is reported (nsys) or its row skipped with a warning (rocpd).

Derandomized and bounded (60 examples per test, a 30 s alarm per example): CI time is fixed.
"""
from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from copyprof.readers.nsys_sqlite import read_nsys
from copyprof.readers.rocpd import read_rocpd
from copyprof.readers.rocprof_v1 import read_rocprof_v1_csv
from copyprof.readers.rocprofv3_csv import read_rocprofv3_csv
from tests.fuzz.properties import (
    SETTINGS,
    UNDAMAGED,
    Tally,
    apply_damage,
    bounded,
    damage,
    fresh,
    name_text,
    weird_float,
)
from tests.fuzz.seeds import DATA

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

clock = st.integers(0, 2**62)
span = st.integers(0, 10**9)  # ns; zero durations included
small = st.integers(0, 2**31 - 1)


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows([header, *rows])
    path.write_bytes(buf.getvalue().encode("utf-8", "surrogateescape"))
    return str(path)


def _exact(traces: list[Any], starts: list[int], durs: list[int], names: list[str]) -> None:
    """Every row is an event (in whichever process's trace) with its start, duration and name."""
    assert sorted(s for t in traces for s in t.events["start_ns"].tolist()) == sorted(starts)
    assert sorted(d for t in traces for d in t.events["dur_ns"].tolist()) == sorted(durs)
    assert sorted(n for t in traces for n in t.events["name"].astype(str).tolist()) == sorted(names)
    assert not any(t.meta.warnings or t.meta.partial for t in traces)


# ------------------------------------------------------------------------ rocprofv3 kernel_trace.csv
KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Workgroup_Size_X", "Workgroup_Size_Y",
                 "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
v3_row = st.builds(
    lambda agent, ids, name, start, dur, wg, blocks: [
        "KERNEL_DISPATCH", f"Agent {agent}", *map(str, ids[:5]), name, str(ids[5]), str(start), str(start + dur),
        str(wg), "1", "1", str(wg * blocks), "1", "1"],
    st.integers(1, 9), st.lists(small, min_size=6, max_size=6), name_text, clock, span,
    st.sampled_from([64, 256, 512, 1024]), st.integers(1, 4096))


def test_rocprofv3_kernel_csv_mostly_valid(tmp_path: Path) -> None:
    tally = Tally()

    @SETTINGS
    @given(rows=st.lists(v3_row, min_size=1, max_size=12), intact=UNDAMAGED, hits=damage)
    @bounded
    def example(rows: list[list[str]], intact: bool, hits: list) -> None:
        hits = [] if intact else hits
        path = _write_csv(fresh(tmp_path) / "1_kernel_trace.csv", KERNEL_HEADER, apply_damage(rows, hits))
        traces = tally.read(read_rocprofv3_csv, [path], path)
        if not hits:
            assert traces is not None, "an undamaged kernel trace was refused"
            [t] = traces
            _exact(traces, [int(r[9]) for r in rows], [int(r[10]) - int(r[9]) for r in rows], [r[7] for r in rows])
            # Grid_Size is in work-items (trace-formats §2.2): the table holds blocks.
            assert t.events["grid_x"].tolist() == [int(r[14]) // int(r[11]) for r in rows]
            tally.exact += 1
    example()
    tally.check()


@SETTINGS
@given(spans=st.lists(st.tuples(clock, span), min_size=1, max_size=30))
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


# ------------------------------------------------------------------------ rocprof v1 results.csv
V1_HEADER = (DATA / "rocprof_v1_results.csv").read_text().splitlines()[0].replace('"', "").split(",")
v1_row = st.builds(
    lambda i, name, ids, grd, wgr, regs, dispatch, wait, dur: [
        str(i), name, *map(str, ids), str(grd * wgr), str(wgr), *map(str, regs), "64", "0x0", "0x7f7b27c04500",
        str(dispatch), str(dispatch + wait), str(dispatch + wait + dur), str(dispatch + wait + dur + 100), str(dur)],
    small, name_text, st.lists(small, min_size=5, max_size=5), st.integers(1, 4096), st.sampled_from([64, 256, 1024]),
    st.lists(st.integers(0, 512), min_size=5, max_size=5), clock, st.integers(0, 10**6), span)


def test_rocprof_v1_mostly_valid(tmp_path: Path) -> None:
    tally = Tally()

    @SETTINGS
    @given(rows=st.lists(v1_row, min_size=1, max_size=12), intact=UNDAMAGED, hits=damage,
           cut=st.lists(st.tuples(st.integers(0, 999), st.integers(-2, 1)), max_size=1))
    @bounded
    def example(rows: list[list[str]], intact: bool, hits: list, cut: list) -> None:
        hits, cut = ([], []) if intact else (hits, cut)
        pid = V1_HEADER.index("pid")
        rows = [r[:pid] + [rows[0][pid]] + r[pid + 1:] for r in rows]  # one process (several are warned about)
        table = apply_damage(rows, hits)
        for r, extra in cut:  # a row cut short by one or two cells, or one cell too long
            row = table[r % len(table)]
            table[r % len(table)] = row[:extra] if extra < 0 else row + ["9"]
        path = _write_csv(fresh(tmp_path) / "results.csv", V1_HEADER, table)
        traces = tally.read(read_rocprof_v1_csv, path, path)
        if traces is not None:  # every row is a kernel or is counted as skipped
            assert sum(len(t.events) for t in traces) <= len(rows)
        if not hits and not cut:
            assert traces is not None, "an undamaged results.csv was refused"
            begin, end = V1_HEADER.index("BeginNs"), V1_HEADER.index("EndNs")
            _exact(traces, [int(r[begin]) for r in rows], [int(r[end]) - int(r[begin]) for r in rows],
                   [r[1] for r in rows])
            tally.exact += 1
    example()
    tally.check()


# ------------------------------------------------------------------------ SQLite formats
sql_value = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), weird_float, st.text(max_size=8),
                      st.binary(max_size=4))
sql_damage = st.lists(st.tuples(st.integers(0, 999), st.integers(0, 99), sql_value), min_size=1, max_size=2)


def _sql_damage(rows: list[list[Any]], hits: list[tuple[int, int, Any]], columns: int) -> list[list[Any]]:
    out = [list(r) for r in rows]
    for r, c, value in hits:
        out[r % len(out)][c % columns] = value
    return out


def test_nsys_mostly_valid(tmp_path: Path) -> None:
    tally = Tally()

    @SETTINGS
    @given(rows=st.lists(st.tuples(clock, span, st.integers(0, 7), small, small), min_size=1, max_size=10),
           intact=UNDAMAGED, hits=sql_damage)
    @bounded
    def example(rows: list[tuple[int, int, int, int, int]], intact: bool, hits: list) -> None:
        hits = [] if intact else hits
        # start, end, deviceId, streamId, correlationId, demangledName (1 = 'kernel_a' in StringIds).
        values = _sql_damage([[s, s + d, dev, stream, corr, 1] for s, d, dev, stream, corr in rows], hits, 6)
        path = fresh(tmp_path) / "t.sqlite"
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
        traces = tally.read(read_nsys, str(path), str(path))
        if traces is not None:
            assert (bad > 0) == any("not integers" in w for w in traces[0].meta.warnings)
        if not hits:
            assert traces is not None, "an undamaged nsys export was refused"
            _exact(traces, [s for s, *_ in rows], [d for _, d, *_ in rows], ["kernel_a"] * len(rows))
            tally.exact += 1
    example()
    tally.check()


def test_rocpd_mostly_valid(tmp_path: Path) -> None:
    tally = Tally()

    @SETTINGS
    @given(rows=st.lists(st.tuples(st.sampled_from([908, 4242]), name_text, clock, span, st.integers(0, 7)),
                         min_size=1, max_size=10), intact=UNDAMAGED, hits=sql_damage)
    @bounded
    def example(rows: list[tuple[int, str, int, int, int]], intact: bool, hits: list) -> None:
        hits = [] if intact else hits
        # pid (one or two processes), name, start, end, agent_type_index of the kernels view, with anything
        # SQLite stores (no declared types, so no affinity conversions). A non-integer pid or index reads as missing.
        values = _sql_damage([[pid, name, s, s + d, idx] for pid, name, s, d, idx in rows], hits, 5)
        path = fresh(tmp_path) / "1_results.db"
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
        traces = tally.read(read_rocpd, str(path), str(path))
        if traces is not None:  # rows with integer start/end are kept, the rest skipped with a warning
            assert sum(len(t.events) for t in traces) == whole
        if not hits:
            assert traces is not None, "an undamaged rocpd database was refused"
            _exact(traces, [s for _, _, s, _, _ in rows], [d for *_, d, _ in rows], [n for _, n, *_ in rows])
            tally.exact += 1
    example()
    tally.check()
