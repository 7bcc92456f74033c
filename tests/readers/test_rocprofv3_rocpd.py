"""rocpd SQLite reader, on databases built by a fixture (no public .db sample exists).

The fixture creates plain tables holding the columns of the ``kernels``, ``memory_copies``
and ``regions`` views listed in trace-formats.md §2.4 (schema 3) and exposes them as views
of those names, plus ``rocpd_metadata``, ``rocpd_info_agent`` and ``processes``. A second
variant uses the schema-4 spellings (``correlation_id``, ``agent_absolute_index``, graph ids).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from copyprof.errors import CopyprofError
from copyprof.readers.rocpd import is_rocpd, read_rocpd

KERNEL_COLS_V3 = [
    "id", "guid", "tid", "category", "region", "name", "nid", "pid", "agent_abs_index",
    "agent_log_index", "agent_type_index", "agent_type", "code_object_id", "kernel_id",
    "dispatch_id", "stream_id", "queue_id", "queue", "stream", "start", "end", "duration",
    "grid_x", "grid_y", "grid_z", "workgroup_x", "workgroup_y", "workgroup_z", "lds_size",
    "scratch_size", "vgpr_count", "accum_vgpr_count", "sgpr_count", "static_lds_size",
    "static_scratch_size", "stack_id", "parent_stack_id", "corr_id"]
COPY_COLS_V3 = [
    "id", "guid", "category", "nid", "pid", "tid", "start", "end", "duration", "name",
    "region_name", "stream_id", "queue_id", "stream_name", "queue_name", "size", "dst_device",
    "dst_agent_abs_index", "dst_agent_log_index", "dst_agent_type_index", "dst_agent_type",
    "dst_address", "src_device", "src_agent_abs_index", "src_agent_log_index",
    "src_agent_type_index", "src_agent_type", "src_address", "stack_id", "parent_stack_id", "corr_id"]
REGION_COLS_V3 = ["id", "guid", "category", "name", "nid", "pid", "tid", "start", "end", "duration",
                  "event_id", "stack_id", "parent_stack_id", "corr_id", "extdata", "call_stack", "line_info"]
G = "0000ddb5-8903-7903-b269-cd8d3745bb8a"


def _kernel(pid, name, start, dur, agent_abs, type_index, stream, queue, grid, wg, stack, corr=0):
    return dict(id=stack, guid=G, tid=pid, category="KERNEL_DISPATCH", region=name, name=name, nid=1,
                pid=pid, agent_abs_index=agent_abs, agent_log_index=agent_abs, agent_type_index=type_index,
                agent_type="GPU", code_object_id=1, kernel_id=stack, dispatch_id=stack, stream_id=stream,
                queue_id=queue, queue=f"Queue {queue}", stream=f"Stream {stream}", start=start, end=start + dur,
                duration=dur, grid_x=grid, grid_y=1, grid_z=1, workgroup_x=wg, workgroup_y=1, workgroup_z=1,
                lds_size=0, scratch_size=0, vgpr_count=16, accum_vgpr_count=0, sgpr_count=32,
                static_lds_size=0, static_scratch_size=0, stack_id=stack, parent_stack_id=0, corr_id=corr)


def _copy(pid, direction, start, dur, size, src, dst, stack):
    (st, si), (dt, di) = src, dst
    return dict(id=stack, guid=G, category="MEMORY_COPY", nid=1, pid=pid, tid=pid, start=start,
                end=start + dur, duration=dur, name=direction, region_name="hipMemcpyAsync", stream_id=2,
                queue_id=None, stream_name="Stream 2", queue_name=None, size=size, dst_device="gfx942",
                dst_agent_abs_index=di + 2, dst_agent_log_index=di + 2, dst_agent_type_index=di,
                dst_agent_type=dt, dst_address=1 << 40, src_device="gfx942", src_agent_abs_index=si + 2,
                src_agent_log_index=si + 2, src_agent_type_index=si, src_agent_type=st,
                src_address=1 << 41, stack_id=stack, parent_stack_id=0, corr_id=0)


def _region(pid, category, name, start, dur, stack):
    return dict(id=stack, guid=G, category=category, name=name, nid=1, pid=pid, tid=pid + 1, start=start,
                end=start + dur, duration=dur, event_id=stack, stack_id=stack, parent_stack_id=0,
                corr_id=0, extdata="{}", call_stack="{}", line_info="{}")


def _table(conn, view: str, cols: list[str], rows: list[dict]) -> None:
    """A plain table with the view's columns, exposed under the view's name."""
    quoted = ", ".join(f'"{c}"' for c in cols)
    conn.execute(f'CREATE TABLE "_{view}_data" ({quoted})')
    conn.executemany(f'INSERT INTO "_{view}_data" VALUES ({", ".join("?" * len(cols))})',
                     [[r.get(c) for c in cols] for r in rows])
    conn.execute(f'CREATE VIEW "{view}" AS SELECT * FROM "_{view}_data"')


def make_rocpd(path: Path, schema: int = 3) -> Path:
    k = [_kernel(501, "__amd_rocclr_copyBuffer", 1_000_000, 2680, 2, 0, 3, 1, 49152, 512, 11),
         _kernel(501, "__amd_rocclr_fillBufferAligned", 1_010_000, 1500, 2, 0, 3, 1, 256, 256, 12),
         _kernel(501, "void gemm<bf16>(float*, int)", 1_020_000, 9000, 3, 1, 4, 2, 1000, 256, 13, corr=42),
         _kernel(502, "__amd_rocclr_copyBuffer", 2_000_000, 3000, 4, 2, 0, 7, 131072, 512, 21)]
    m = [_copy(501, "MEMORY_COPY_DEVICE_TO_DEVICE", 1_030_000, 4000, 1 << 20, ("GPU", 0), ("GPU", 1), 14),
         _copy(501, "MEMORY_COPY_HOST_TO_DEVICE", 1_040_000, 9000, 4096, ("CPU", 0), ("GPU", 1), 15),
         _copy(502, "MEMORY_COPY_DEVICE_TO_HOST", 2_010_000, 5000, 512, ("GPU", 2), ("CPU", 0), 22)]
    r = [_region(501, "HIP_RUNTIME_API_EXT", "hipMemcpyAsync", 999_000, 700, 11),
         _region(501, "HIP_RUNTIME_API_EXT", "hipGraphLaunch", 1_019_000, 400, 13),
         _region(501, "MARKER_CORE_API", "decode_step", 990_000, 60_000, 10),
         _region(501, "HSA_CORE_API", "hsa_signal_wait_scacquire", 1_050_000, 100, 16)]
    kcols, mcols, rcols = list(KERNEL_COLS_V3), list(COPY_COLS_V3), list(REGION_COLS_V3)
    if schema == 4:  # reshaped views: renamed columns, graph ids
        ren = {"corr_id": "correlation_id", "agent_abs_index": "agent_absolute_index"}
        for rows in (k, m, r):
            for row in rows:
                for old, new in ren.items():
                    if old in row:
                        row[new] = row.pop(old)
        k[0].update(graph_exec_id=5, graph_node_id=9)
        kcols = [ren.get(c, c) for c in kcols] + ["graph_exec_id", "graph_node_id"]
        mcols = [ren.get(c, c) for c in mcols]
        rcols = [ren.get(c, c) for c in rcols]
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT)')
    conn.executemany("INSERT INTO rocpd_metadata (tag, value) VALUES (?, ?)",
                     [("schema_version", str(schema)), ("uuid", "_0000ddb5")])
    conn.execute('CREATE TABLE rocpd_info_agent (id INTEGER PRIMARY KEY, guid TEXT, nid INT, pid INT, '
                 'type TEXT, absolute_index INT, logical_index INT, type_index INT, name TEXT, '
                 'product_name TEXT, extdata TEXT)')
    agents = [("CPU", 0, 0, "AMD EPYC 9454", "AMD EPYC 9454", 96)] + [
        ("GPU", i + 2, i, "gfx942", "AMD Instinct MI300X", 304) for i in range(3)]
    conn.executemany("INSERT INTO rocpd_info_agent (guid, nid, pid, type, absolute_index, type_index, "
                     "name, product_name, extdata) VALUES (?, 1, 1, ?, ?, ?, ?, ?, ?)",
                     [(G, t, a, i, n, p, f'{{"cu_count": {c}}}') for t, a, i, n, p, c in agents])
    _table(conn, "processes", ["nid", "hostname", "guid", "ppid", "pid", "init", "fini", "command"],
           [dict(nid=1, hostname="node-a", guid=G, ppid=1, pid=501, init=0, fini=9, command="python serve.py"),
            dict(nid=1, hostname="node-a", guid=G, ppid=1, pid=502, init=0, fini=9, command="python worker.py")])
    _table(conn, "kernels", kcols, k)
    _table(conn, "memory_copies", mcols, m)
    _table(conn, "regions", rcols, r)
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_rocpd(tmp_path / "501_results.db")


def test_is_rocpd(db: Path, tmp_path: Path) -> None:
    with sqlite3.connect(db) as conn:
        assert is_rocpd(conn)
    nsys = tmp_path / "nsys.sqlite"
    with sqlite3.connect(nsys) as conn:  # an Nsight Systems export is not rocpd
        conn.execute("CREATE TABLE StringIds (id INT, value TEXT)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT)")
        assert not is_rocpd(conn)
    with sqlite3.connect(tmp_path / "blank.db") as conn:
        assert not is_rocpd(conn)


def test_one_trace_per_pid(db: Path) -> None:
    a, b = read_rocpd(str(db))
    assert (a.meta.metadata["pid"], b.meta.metadata["pid"]) == (501, 502)
    assert a.meta.kind_counts == {"kernel": 3, "memcpy": 2, "runtime": 2, "annotation": 1}
    assert b.meta.kind_counts == {"kernel": 1, "memcpy": 1}
    for t in (a, b):
        assert (t.meta.format, t.meta.flavour, t.meta.ranks, t.meta.grid_unit) == (
            "rocpd", "rocprofiler-sdk", [0], "work-items")
    assert a.meta.metadata["schema_version"] == "3" and a.meta.metadata["hostname"] == "node-a"
    assert a.meta.metadata["command"] == "python serve.py"
    assert a.meta.graph_launches == 1
    assert (a.events["rank"] == 0).all() and (b.events["rank"] == 0).all()
    # pid 501's HSA region is neither HIP API nor a marker: skipped, with a warning there only.
    assert any("skipped 1" in w for w in a.meta.warnings) and b.meta.warnings == []


def test_kernels(db: Path) -> None:
    a, b = read_rocpd(str(db))
    k = a.events[a.events.kind == "kernel"].set_index("correlation")  # correlation = stack_id
    assert k.loc[11, "name"] == "__amd_rocclr_copyBuffer"
    assert (k.loc[11, "grid_x"], k.loc[11, "block_x"], k.loc[11, "dur_ns"]) == (96, 512, 2680)
    assert k.loc[12, "name"] == "__amd_rocclr_fillBufferAligned" and k.loc[12, "bytes"] == -1
    assert k.loc[13, "grid_x"] == 4  # ceil(1000 / 256)
    # agent_type_index is the ordinal among GPUs: the table's device index.
    assert k.device.tolist() == [0, 0, 1]
    assert k.stream.tolist() == [3, 3, 4]
    assert k.loc[13, "external_id"] == 42 and k.loc[11, "external_id"] == -1  # corr_id 0 = none
    assert b.events[b.events.kind == "kernel"].device.tolist() == [2]
    # Process 502's only stream id is 0 -> its queue is used as the stream.
    assert b.events[b.events.kind == "kernel"].stream.tolist() == [7]


def test_memory_copies(db: Path) -> None:
    a, b = read_rocpd(str(db))
    m = a.events[a.events.kind == "memcpy"].set_index("correlation")
    assert m.loc[14, "name"] == "Memcpy DtoD" and m.loc[14, "copy_dir"] == "DtoD"
    assert m.loc[14, "bytes"] == 1 << 20 and m.loc[14, "bytes_src"] == "event"  # size column
    assert m.loc[14, "device"] == 0  # DtoD attributed to the source GPU
    assert m.loc[15, "device"] == 1 and m.loc[15, "copy_dir"] == "HtoD"  # HtoD -> destination GPU
    bm = b.events[b.events.kind == "memcpy"].iloc[0]
    assert (bm.copy_dir, bm.device, bm.bytes) == ("DtoH", 2, 512)


def test_regions_become_runtime_and_annotations(db: Path) -> None:
    a, _ = read_rocpd(str(db))
    rt = a.events[a.events.kind == "runtime"]
    assert sorted(rt.name) == ["hipGraphLaunch", "hipMemcpyAsync"] and set(rt.stream) == {502}
    assert not rt.on_gpu.any() and (rt.device == -1).all()
    ann = a.events[a.events.kind == "annotation"]
    assert ann.name.tolist() == ["decode_step"] and ann.dur_ns.tolist() == [60_000]


def test_devices_from_info_agent(db: Path) -> None:
    a, _ = read_rocpd(str(db))
    assert [(d["index"], d["arch"], d["name"], d["cus"]) for d in a.meta.devices] == [
        (i, "gfx942", "AMD Instinct MI300X", 304) for i in range(3)]


def test_schema4_column_spellings(tmp_path: Path) -> None:
    a, _ = read_rocpd(str(make_rocpd(tmp_path / "v4.db", schema=4)))
    k = a.events[a.events.kind == "kernel"].set_index("correlation")
    assert k.loc[13, "external_id"] == 42  # from correlation_id
    assert (k.loc[11, "graph_id"], k.loc[11, "graph_node_id"]) == (5, 9)
    assert (k.loc[12, "graph_id"], k.loc[12, "graph_node_id"]) == (-1, -1)  # NULL -> -1


def test_opened_read_only(db: Path) -> None:
    before = db.read_bytes()
    read_rocpd(str(db))
    assert db.read_bytes() == before and not Path(str(db) + "-journal").exists()


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "e_results.db"
    p.write_bytes(b"")
    with pytest.raises(CopyprofError, match="empty"):
        read_rocpd(str(p))


def test_not_a_database(tmp_path: Path) -> None:
    p = tmp_path / "x_results.db"
    p.write_text("Kind,Agent_Id\n" * 200)
    with pytest.raises(CopyprofError) as e:
        read_rocpd(str(p))
    assert str(p) in str(e.value)


def test_sqlite_without_rocpd_views(tmp_path: Path) -> None:
    p = tmp_path / "other.db"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE t (a INT)")
    with pytest.raises(CopyprofError, match="not a rocpd database"):
        read_rocpd(str(p))


def test_truncated_database(db: Path, tmp_path: Path) -> None:
    data = db.read_bytes()
    p = tmp_path / "cut_results.db"
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(CopyprofError) as e:
        read_rocpd(str(p))
    assert str(p) in str(e.value)


def test_no_rows(tmp_path: Path) -> None:
    p = tmp_path / "none.db"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE rocpd_metadata (tag TEXT, value TEXT)")
        _table(conn, "kernels", KERNEL_COLS_V3, [])
        _table(conn, "memory_copies", COPY_COLS_V3, [])
    with pytest.raises(CopyprofError, match="no kernel"):
        read_rocpd(str(p))
