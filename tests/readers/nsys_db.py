"""Small Nsight Systems SQLite exports built from the real nsys DDL
(tests/data/nsys_schema_subset.sql, copied from the samples' sqlite_master.sql), and where the
public samples are: shared by tests/readers/test_nsys_sqlite.py and tests/readers/test_nsys_sqlite_damage.py."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "sample_traces"
CLOVERLEAF = SAMPLES / "nsys_sqlite_a100_cloverleaf_schema3.13.sqlite"
SAXPY = SAMPLES / "nsys_sqlite_a100_saxpy_mpi_schema2.9.sqlite"
SCHEMA = Path(__file__).resolve().parents[1] / "data" / "nsys_schema_subset.sql"


def _need(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"sample trace {path.name} not present (shared/sample_traces is not checked out)")
    return str(path)


def gtid(pid: int, tid: int | None = None) -> int:
    """nsys serialized GlobalId as seen in the samples: 1 << 48 | pid << 24 | tid."""
    return (1 << 48) | (pid << 24) | (pid if tid is None else tid)


def gpid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


def _db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.read_text())
    return conn


def _kernel(conn: sqlite3.Connection, start: int, end: int, corr: int, pid: int, name: int, short: int,
            graph_node: int | None = None, grid: int = 64, stream: int = 7) -> None:
    conn.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid,"
        " demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ,"
        " staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, graphNodeId)"
        " VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, 32, ?, 2, 1, 256, 1, 1, 0, 0, 0, 0, 1, ?)",
        (start, end, stream, corr, gpid(pid), name, short, grid, graph_node))


def _runtime(conn: sqlite3.Connection, start: int, end: int, corr: int, pid: int, name: int, cls: int = 0) -> None:
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
                 " returnValue) VALUES (?, ?, ?, ?, ?, ?, 0)", (start, end, cls, gtid(pid), corr, name))


@pytest.fixture
def handmade(tmp_path: Path) -> str:
    """One process (pid 4242) doing what LLM decode does and the samples never show."""
    path = tmp_path / "handmade.sqlite"
    conn = _db(path)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [
        (1, "void copy_kernel<float>(float *, const float *, int)"), (2, "copy_kernel"),
        (3, ""), (4, "short_only"), (5, "cudaGraphLaunch_v10000"), (6, "cudaMemcpyAsync_v3020"),
        (7, "cudaLaunchKernel_v7000"), (8, "decode_step"), (9, "cudaMemcpyAsync"), (10, "cudaMemsetAsync_v3020"),
    ])
    conn.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2')")
    conn.executemany("INSERT INTO TARGET_INFO_GPU (vmId, id, name, smCount, computeMajor, computeMinor)"
                     " VALUES (?, ?, 'NVIDIA H100 80GB HBM3', 132, 9, 0)", [(1, 1), (1, 0)])
    conn.execute("INSERT INTO PROCESSES VALUES (?, 4242, 'python3')", (gpid(4242),))
    # Graph replay (correlation 500): two kernels and one DtoD copy carry graphNodeIds.
    _runtime(conn, 1000, 1100, 500, 4242, 5)
    _kernel(conn, 2000, 2500, 500, 4242, 1, 2, graph_node=101)
    _kernel(conn, 2600, 2700, 500, 4242, 3, 4, graph_node=102, grid=8)  # empty demangled name -> shortName
    memcpy = ("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId,"
              " globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, dstDeviceId, graphNodeId)"
              " VALUES (?, ?, ?, 1, 7, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    conn.executemany(memcpy, [
        (2800, 2900, 0, 500, gpid(4242), 1 << 20, 8, 2, 2, 0, 0, 103),        # DtoD in the graph
        (3000, 3400, 0, 501, gpid(4242), 4096, 8, 2, 2, 0, 0, None),          # eager DtoD
        (3500, 4500, 0, 502, gpid(4242), 8 << 20, 10, 2, 2, 0, 1, None),      # PtoP GPU0 -> GPU1
        (4600, 4700, 0, 503, gpid(4242), 64, 1, 1, 2, None, 0, None),         # HtoD from pinned
    ])
    _runtime(conn, 2950, 3300, 501, 4242, 6)
    _runtime(conn, 2949, 3301, 501, 4242, 9, cls=67)  # CUDA backtrace duplicate: must not count
    _runtime(conn, 3450, 3600, 502, 4242, 6)
    _runtime(conn, 4550, 4650, 503, 4242, 6)
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId,"
                 " globalPid, value, bytes, graphNodeId, memKind) VALUES (4800, 4900, 0, 1, 7, 504, ?, 0, 4096, NULL, 2)",
                 (gpid(4242),))
    _runtime(conn, 4750, 4850, 504, 4242, 10)
    nvtx = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, ?, ?, ?, ?)"
    conn.executemany(nvtx, [
        (900, 5000, 59, None, gtid(4242), 8),       # push/pop range named through StringIds
        (950, 4990, 60, "step 7", gtid(4242), None),  # start/end range with inline text
        (1500, None, 34, "a mark", gtid(4242), None),  # mark: not a range, not an annotation
    ])
    conn.commit()
    conn.close()
    return str(path)
