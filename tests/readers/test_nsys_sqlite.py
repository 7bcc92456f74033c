"""Tests for the Nsight Systems SQLite reader.

Two kinds of input:
* the two public samples in shared/sample_traces (skipped when absent); every expected number
  below was counted with plain sqlite3 queries against the file (quoted in the comments), not
  copied from the README;
* small databases built here from the real nsys DDL (tests/data/nsys_schema_subset.sql, copied
  from the samples' sqlite_master.sql), because no public export has DtoD/PtoP copies, graph
  launches or several processes.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from copyprof.readers.nsys_sqlite import is_nsys, read_nsys
from tests.readers import nsys_db
from tests.readers.nsys_db import CLOVERLEAF, SAXPY, _db, _kernel, _need, _runtime, gtid

handmade = nsys_db.handmade  # the fixture

# ---------------------------------------------------------------- public samples
def test_cloverleaf_counts() -> None:
    t, = read_nsys(_need(CLOVERLEAF))
    ev, meta = t.events, t.meta
    # SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL -> 1312; MEMCPY -> 279;
    # RUNTIME -> 3048 (eventClass 0: 3047 runtime calls, 1: one cuModuleGetLoadingMode; no backtrace rows).
    # No MEMSET and no NVTX_EVENTS table in this export, so those kinds are absent from kind_counts.
    assert meta.kind_counts == {"kernel": 1312, "memcpy": 279, "runtime": 3048}
    # SELECT copyKind, srcKind, dstKind, COUNT(*), SUM(bytes) ... GROUP BY 1,2,3
    #   -> (1, 0, 2, 254, 225065752) and (2, 2, 0, 25, 51200): pageable HtoD and DtoH only.
    copies = t.of_kind("memcpy")
    assert copies["copy_dir"].astype(str).value_counts().to_dict() == {"HtoD": 254, "DtoH": 25}
    assert not copies["copy_dir"].isin(["DtoD", "PtoP"]).any()
    assert set(copies["name"].astype(str)) == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}
    assert copies.loc[copies.copy_dir == "HtoD", "bytes"].sum() == 225065752
    assert (copies["bytes_src"] == "event").all()
    # Runtime names lose the _v suffix: 1312 x cudaLaunchKernel_v7000, 279 x cudaMemcpy_v3020.
    rt = t.of_kind("runtime")["name"].astype(str).value_counts()
    assert rt["cudaLaunchKernel"] == 1312 and rt["cudaMemcpy"] == 279
    # Every kernel's correlationId names one cudaLaunchKernel row (checked with a JOIN: 1312 matches).
    launches = set(t.of_kind("runtime").query("name == 'cudaLaunchKernel'")["correlation"])
    assert set(t.of_kind("kernel")["correlation"]) <= launches
    # Runtime rows live on thread 1701896 = globalTid & 0xFFFFFF (pid 1701896's main thread).
    assert set(t.of_kind("runtime")["stream"]) == {1701896}
    # All kernels on deviceId 0, streamId 7; graphNodeId is NULL everywhere -> -1.
    k = t.of_kind("kernel")
    assert set(k["device"]) == {0} and set(k["stream"]) == {7} and (k["graph_node_id"] == -1).all()
    assert meta.graph_launches == 0
    # TARGET_INFO_GPU: 4 x 'NVIDIA A100-SXM4-80GB', computeMajor 8 / Minor 0, smCount 108.
    assert meta.devices == [{"name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80", "sms": 108}] * 4
    assert meta.metadata["nsys_schema"] == "3.13.2"  # META_DATA_EXPORT
    assert meta.format == "nsys-sqlite" and meta.flavour == "cupti" and meta.ranks == [0]
    assert meta.partial is None and meta.warnings == []
    assert (ev["dur_ns"] >= 0).all() and ev["start_ns"].is_monotonic_increasing


def test_saxpy_counts_backtrace_rows_and_nvtx() -> None:
    t, = read_nsys(_need(SAXPY))
    meta = t.meta
    # KERNEL 5 rows; MEMCPY 15 rows; MEMSET table present but empty.
    # RUNTIME 95 rows = 56 (eventClass 0, 'cudaMemcpy_v3020'...) + 1 (class 1, driver)
    #   + 38 (class 67 'CUDA backtrace' copies such as 'cudaMemcpy', same correlationId) -> 57 kept.
    # NVTX_EVENTS 24 rows = 22 NvtxPushPopRange (59) + 1 NvtxDomainCreate (75) + 1 NvtxThread (39).
    assert meta.kind_counts == {"kernel": 5, "memcpy": 15, "memset": 0, "runtime": 57, "annotation": 22}
    assert meta.metadata["runtime_backtrace_rows_skipped"] == 38
    assert meta.metadata["nvtx_non_range_rows_skipped"] == 2
    # copyKind 1 x 10 (2,621,440,000 B), copyKind 2 x 5 (1,310,720,000 B); no DtoD/PtoP.
    copies = t.of_kind("memcpy")
    assert copies["copy_dir"].astype(str).value_counts().to_dict() == {"HtoD": 10, "DtoH": 5}
    assert (copies["copy_dir"] == "DtoD").sum() == 0 and (copies["copy_dir"] == "PtoP").sum() == 0
    assert copies.groupby("copy_dir", observed=True)["bytes"].sum().to_dict() == {"DtoH": 1310720000, "HtoD": 2621440000}
    # No backtrace duplicates: each cudaMemcpy correlationId appears once among runtime rows.
    rt = t.of_kind("runtime")
    assert rt["correlation"].is_unique
    assert rt["name"].astype(str).value_counts()["cudaMemcpy"] == 15
    # Annotation names: text 'saxpy' x5; MPI ranges named through textId: MPI_Send x10 (id 85),
    # MPI_Recv x5 (68), MPI_Init (59), MPI_Finalize (52).
    ann = t.of_kind("annotation")
    assert ann["name"].astype(str).value_counts().to_dict() == {
        "MPI_Send": 10, "saxpy": 5, "MPI_Recv": 5, "MPI_Init": 1, "MPI_Finalize": 1}
    assert not ann["on_gpu"].any()
    # The NvtxThread row says 'MPI Rank 0' (nsys --trace=mpi): rank 0, from the name.
    assert meta.ranks == [0] and meta.metadata["rank_source"] == "mpi-thread-name"
    assert meta.metadata["nsys_schema"] == "2.9.1"  # EXPORT_META_DATA (old table name)
    assert meta.devices == [{"name": "NVIDIA A100-SXM4-40GB", "arch": "sm_80", "sms": 108}]
    assert meta.metadata["pid"] == 1230493 and meta.metadata["process_name"] == "./saxpy-mpi-cuda"
    # Kernel rows: demangledName id 670 = 'saxpy(double *, double *, double *, double, int)', grid 2x1x1, block 512.
    k = t.of_kind("kernel")
    assert set(k["name"].astype(str)) == {"saxpy(double *, double *, double *, double, int)"}
    assert set(zip(k.grid_x, k.grid_y, k.grid_z, k.block_x)) == {(2, 1, 1, 512)}


@pytest.mark.parametrize("sample", [CLOVERLEAF, SAXPY], ids=["cloverleaf", "saxpy"])
def test_samples_are_detected(sample: Path) -> None:
    # Both have StringIds and CUPTI_ACTIVITY_KIND_* tables (format detection rule, trace-formats §5).
    conn = sqlite3.connect(f"file:{_need(sample)}?mode=ro", uri=True)
    try:
        assert is_nsys(conn)
    finally:
        conn.close()


# ---------------------------------------------------------------- hand-made database
def test_handmade_dtod_ptop_graph(handmade: str) -> None:
    t, = read_nsys(handmade)
    meta, ev = t.meta, t.events
    # 2 kernels, 4 copies, 1 memset; 6 runtime rows minus 1 backtrace duplicate = 5 (graph launch,
    # 3 x cudaMemcpyAsync, cudaMemsetAsync); 2 ranges (the mark is dropped).
    assert meta.kind_counts == {"kernel": 2, "memcpy": 4, "memset": 1, "runtime": 5, "annotation": 2}
    copies = t.of_kind("memcpy").set_index("start_ns")
    # copyKind 8 -> DtoD, 10 -> PtoP, 1 -> HtoD, named from srcKind/dstKind labels like Kineto does.
    assert copies["copy_dir"].astype(str).to_dict() == {2800: "DtoD", 3000: "DtoD", 3500: "PtoP", 4600: "HtoD"}
    assert copies.loc[2800, "name"] == "Memcpy DtoD (Device -> Device)"
    assert copies.loc[3500, "name"] == "Memcpy PtoP (Device -> Device)"
    assert copies.loc[4600, "name"] == "Memcpy HtoD (Pinned -> Device)"
    assert copies["bytes"].to_dict() == {2800: 1 << 20, 3000: 4096, 3500: 8 << 20, 4600: 64}
    assert (copies["bytes_src"] == "event").all() and copies["on_gpu"].all()
    assert copies.loc[2800, "graph_node_id"] == 103 and copies.loc[3000, "graph_node_id"] == -1
    # Kernels: graphNodeId kept; the empty demangled name falls back to shortName.
    k = t.of_kind("kernel").set_index("start_ns")
    assert k["graph_node_id"].to_dict() == {2000: 101, 2600: 102}
    assert k["name"].astype(str).to_dict() == {2000: "void copy_kernel<float>(float *, const float *, int)",
                                               2600: "short_only"}
    assert (k.loc[2000, ["grid_x", "grid_y", "grid_z", "block_x"]].tolist()) == [64, 2, 1, 256]
    # Graph launch: one cudaGraphLaunch_v10000 row; its correlation (500) joins the graph's GPU work.
    assert meta.graph_launches == 1
    launch = t.of_kind("runtime").query("name == 'cudaGraphLaunch'")
    assert launch["correlation"].tolist() == [500]
    assert len(ev[(ev.correlation == 500) & ev.on_gpu]) == 3
    # The backtrace row (class 67, 'cudaMemcpyAsync' corr 501) is gone; the real one remains once.
    assert (t.of_kind("runtime")["correlation"] == 501).sum() == 1
    assert set(t.of_kind("runtime")["stream"]) == {4242}  # thread id from globalTid
    # Memset keeps its bytes and names the memory kind.
    ms = t.of_kind("memset")
    assert ms["name"].tolist() == ["Memset (Device)"] and ms["bytes"].tolist() == [4096]
    # NVTX: COALESCE(text, StringIds[textId]); host-side annotations.
    ann = t.of_kind("annotation")
    assert sorted(ann["name"].astype(str)) == ["decode_step", "step 7"] and not ann["on_gpu"].any()
    assert ann.set_index("name")["dur_ns"].to_dict() == {"decode_step": 4100, "step 7": 4040}
    # TARGET_INFO_GPU rows ordered by id; compute 9.0 -> sm_90.
    assert meta.devices == [{"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "sms": 132}] * 2
    assert meta.metadata["nsys_schema"] == "3.13.2" and meta.metadata["process_name"] == "python3"
    assert meta.ranks == [0] and meta.partial is None


def test_fixed_copy_kinds_without_enum_tables(handmade: str) -> None:
    # Schema 2.x exports have no ENUM_* tables: the fixed CUPTI numbers must give the same answer.
    conn = sqlite3.connect(handmade)
    conn.executescript("DROP TABLE ENUM_CUDA_MEMCPY_OPER; DROP TABLE ENUM_CUDA_MEM_KIND;"
                       " DROP TABLE ENUM_NSYS_EVENT_CLASS; DROP TABLE ENUM_NSYS_EVENT_TYPE;")
    conn.close()
    t, = read_nsys(handmade)
    assert sorted(t.of_kind("memcpy")["copy_dir"].astype(str)) == ["DtoD", "DtoD", "HtoD", "PtoP"]
    assert t.meta.kind_counts["runtime"] == 5 and t.meta.kind_counts["annotation"] == 2


def _two_processes(tmp_path: Path, rank_names: dict[int, int] | None) -> str:
    path = tmp_path / "two.sqlite"
    conn = _db(path)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "k"), (2, "cudaLaunchKernel_v7000")])
    for pid, t0 in ((200, 100), (100, 200)):  # pid 200 written first: order must come from the pid
        _kernel(conn, t0 + 10, t0 + 20, pid, pid, 1, 1)
        _runtime(conn, t0, t0 + 5, pid, pid, 2)
    for pid, rank in (rank_names or {}).items():
        conn.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) VALUES (0, 39, ?, ?)",
                     (f"MPI Rank {rank}", gtid(pid)))
    conn.commit()
    conn.close()
    return str(path)


def test_several_processes_pid_order(tmp_path: Path) -> None:
    # No MPI rank names: one trace per globalPid, ranks 0..n-1 by pid, and a warning says so.
    traces = read_nsys(_two_processes(tmp_path, None))
    assert [t.meta.metadata["pid"] for t in traces] == [100, 200]
    assert [t.meta.ranks for t in traces] == [[0], [1]]
    for t in traces:
        # All five activity tables exist in the schema, so every kind is counted, empty ones as 0.
        assert t.meta.kind_counts == {"kernel": 1, "memcpy": 0, "memset": 0, "runtime": 1, "annotation": 0}
        assert set(t.events["rank"]) == set(t.meta.ranks)
        assert any("2 processes" in w and "process-id order" in w for w in t.meta.warnings)
    assert traces[0].events["correlation"].tolist() == [100, 100]


def test_several_processes_mpi_rank_names(tmp_path: Path) -> None:
    # nsys --trace=mpi names threads 'MPI Rank N': that beats pid order (pid 100 is rank 1 here).
    traces = read_nsys(_two_processes(tmp_path, {100: 1, 200: 0}))
    assert [(t.meta.metadata["pid"], t.meta.ranks) for t in traces] == [(100, [1]), (200, [0])]
    assert all(t.meta.metadata["rank_source"] == "mpi-thread-name" for t in traces)


def test_a_report_of_two_processes_says_processes_and_warns_once(tmp_path: Path) -> None:
    """Two processes of one export without MPI rank names are numbered by process id: the report
    calls them processes (they are no ranks of a TP group) and says the export's warning once."""
    import io

    from rich.console import Console

    from copyprof.analysis.report import analyze_run
    from copyprof.render.report_text import ReportView, render_terminal

    path = _two_processes(tmp_path, None)
    run = analyze_run(read_nsys(path), path, None)
    assert sum("2 processes in one export" in w for w in run.warnings) == 1
    out = io.StringIO()
    render_terminal(ReportView([run], None, ["x"]), Console(file=out, width=10_000))
    text = out.getvalue()
    assert "processes [0, 1] (headline process 0)" in text and "ranks [0, 1]" not in text
    assert text.count("2 processes in one export") == 1
