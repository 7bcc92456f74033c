"""What an Nsight Systems SQLite export looks like: table names, enums, id encodings, and the
small column helpers the reader (copyprof/readers/nsys_sqlite.py) applies to them.

Kept as data, with where each value was seen: the saxpy (schema 2.9) and cloverleaf (schema
3.13) samples in ../shared/sample_traces, and NVIDIA's documented export schema.
"""
from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
ACTIVITY_TABLES: dict[str, str] = {
    KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset", RUNTIME: "runtime", NVTX: "annotation"}

# CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind; used when the export has no ENUM_* tables
# (schema 2.x). Same numbers as ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND in schema 3.13.
COPY_KINDS: dict[int, str] = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM_HtoD", 12: "UVM_DtoH", 13: "UVM_DtoD",
}
MEM_KINDS: dict[int, str] = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
NVTX_RANGE_TYPES: dict[str, int] = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
NVTX_THREAD_TYPE = ("NvtxThread", 39)
BACKTRACE_CLASSES: dict[str, int] = {
    "TRACE_PROCESS_EVENT_CUDABACKTRACE": 67,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_START": 68,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH": 69,
}
TID_MASK = 0xFFFFFF  # globalTid = ... | pid << 24 | tid (as pipit decodes it)
VERSION_SUFFIX = re.compile(r"_v\d+$")
MPI_RANK = re.compile(r"MPI Rank (\d+)")
CHUNK = 1 << 18
IN_BATCH = 900  # stay under SQLITE_MAX_VARIABLE_NUMBER of old SQLite builds (999)


@dataclass
class Part:
    """Rows of one activity table: int columns, local names and a process key per row."""

    kind: str
    names: list[str]
    codes: np.ndarray  # int32 index into names
    cols: dict[str, np.ndarray]
    pid: np.ndarray  # int64 globalPid (tid bits cleared), -1 unknown


def text(value: Any) -> str | None:
    """A name cell as text: blobs decoded leniently, numbers spelled out, NULL kept as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def common(a: np.ndarray) -> dict[str, np.ndarray]:
    """Columns 0-4 of every GPU activity SELECT: start, end, deviceId, streamId, correlationId."""
    return {"start_ns": a[:, 0], "dur_ns": np.maximum(a[:, 1] - a[:, 0], 0), "device": a[:, 2],
            "stream": a[:, 3], "correlation": a[:, 4]}


def tid(g: np.ndarray) -> np.ndarray:
    return np.where(g >= 0, g & TID_MASK, -1)


def pid_of_tid(g: np.ndarray) -> np.ndarray:
    return np.where(g >= 0, g & ~TID_MASK, -1)


def intern(keys: np.ndarray, label: Callable[[Any], str]) -> tuple[list[str], np.ndarray]:
    """Name each distinct key (an id or a row of ids) once; return unique names and per-row codes."""
    if len(keys) == 0:
        return [], np.empty(0, np.int32)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    index: dict[str, int] = {}
    remap = np.array([index.setdefault(label(k), len(index)) for k in uniq.tolist()], dtype=np.int32)
    return list(index), remap[inv.reshape(-1)]


def subset(p: Part, mask: np.ndarray) -> Part:
    return Part(p.kind, p.names, p.codes[mask], {k: v[mask] for k, v in p.cols.items()}, p.pid[mask])
