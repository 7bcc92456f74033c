"""The one event table every reader produces.

Every trace format (Kineto JSON, rocprofv3 CSV/JSON/rocpd, Nsight Systems SQLite) is turned
into the same columnar table so that the analysis never knows where an event came from.

Why columnar and interned: traces reach gigabytes. Readers append plain scalars to per-column
Python lists (no dict or object per event) and intern names to integer codes; the table is
then a ``Columns`` (copyprof/columns.py: named numpy arrays of one length) whose ``name`` and
``kind`` columns are ``Categorical`` (integer codes over one copy of each string). Why not a
pandas DataFrame: importing pandas alone costs ~40 MB of RSS and 0.2 s in a process whose
whole budget on a 1 GB trace is ~110 MB; ``Trace.events`` still hands a library user the
same table as a DataFrame, built on first use.

Columns (dtype; missing value). ``start_ns`` is int64 (clock values are large); every other
integer column is stored in the narrowest of int8/16/32/64 that holds its values (at most the
width listed): on a 1 GB decode trace that cuts the table from 112 to 44 MB at 1.1 M rows.
Code that computes with them must not overflow the narrow type: sums and cumulative sums of
small ints are int64 in numpy and pandas, ``start_ns + dur_ns`` is int64, and products or
arrays that are written into cast to int64 first (taxonomy/copies.py does for bytes and
grid x block).

=============== ========= =====================================================================
kind            category  kernel | memcpy | memset | runtime | annotation | cpu_op | python
                          (python: a Python frame of a trace with stacks, Kineto ``python_function``;
                          ``stream`` is its thread; analysis/sources/frames.py names each copy's code)
name            category  kernel / op / annotation name as the trace spells it
on_gpu          bool      True for device-timeline events (kernels, copies, GPU annotations)
rank            <=int32   distributed rank the file belongs to (0 when unknown)
device          <=int32   GPU index (-1 for host events / unknown)
stream          <=int64   GPU stream or queue; for host events the OS thread id (-1 unknown)
start_ns        int64     start time in ns, in the file's own clock
dur_ns          <=int64   duration in ns (>= 0)
correlation     <=int64   launch correlation id joining a runtime call to its GPU work (-1)
external_id     <=int64   Kineto "External id" linking to CPU ops (-1)
bytes           <=int64   bytes moved by a copy / memset (-1 unknown)
bytes_src       category  where ``bytes`` came from: event | runtime | grid | grid-bound | layout | none
                          (layout: a size-less copy attributed as [N, hidden] by its place, not measured)
grid_x..z       <=int32   launch grid in blocks (workgroups) (-1); see ``grid_unit`` in meta
block_x..z      <=int32   block / workgroup size in threads (-1)
graph_id        <=int64   CUDA/HIP graph id when the trace records it (-1)
graph_node_id   <=int64   graph node id (-1)
copy_dir        category  memcpy direction: DtoD, PtoP, HtoD, DtoH, HtoH, ... ("" otherwise)
=============== ========= =====================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from copyprof.columns import Categorical, Columns, constant

if TYPE_CHECKING:
    import pandas as pd

KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op", "python")
BYTES_SOURCES: tuple[str, ...] = ("none", "event", "runtime", "grid", "grid-bound", "layout")

INT_COLUMNS: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "stream": "int64",
    "start_ns": "int64",
    "dur_ns": "int64",
    "correlation": "int64",
    "external_id": "int64",
    "bytes": "int64",
    "grid_x": "int32",
    "grid_y": "int32",
    "grid_z": "int32",
    "block_x": "int32",
    "block_y": "int32",
    "block_z": "int32",
    "graph_id": "int64",
    "graph_node_id": "int64",
}
CLOCK_COLUMNS: tuple[str, ...] = ("start_ns",)  # always int64
COMPACT_COLUMNS: tuple[str, ...] = tuple(c for c in INT_COLUMNS if c not in CLOCK_COLUMNS)  # narrowest dtype
# (dtype, itemsize, min, max) narrowest first: narrowest_int runs per column per chunk.
_INT_RANGES = tuple((np.dtype(t), np.dtype(t).itemsize, int(np.iinfo(t).min), int(np.iinfo(t).max))
                    for t in (np.int8, np.int16, np.int32, np.int64))
COLUMNS: tuple[str, ...] = (
    "kind", "name", "on_gpu", *INT_COLUMNS, "bytes_src", "copy_dir",
)


def rank_column(n: int, rank: int) -> np.ndarray:
    """The rank column of a table of one rank's ``n`` events: one value, read-only, held once
    (``columns.constant``), in the narrowest type that holds it."""
    return constant(n, np.array(rank, dtype=narrowest_int(rank, rank)))


def narrowest_int(lo: int, hi: int, at_least: Any = np.int8) -> np.dtype:
    """The narrowest signed integer dtype (no narrower than ``at_least``) holding lo..hi."""
    floor = np.dtype(at_least).itemsize
    for dtype, size, low, high in _INT_RANGES:
        if size >= floor and low <= lo and hi <= high:
            return dtype
    return _INT_RANGES[-1][0]


def compact_ints(values: Any, widest: str = "int64") -> np.ndarray:
    """``values`` as an array of the narrowest signed dtype that holds them (a compact column
    of the table); a no-op when it already is. Values wider than ``widest`` are cast
    to it, as the fixed-width table did."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iub":
        arr = arr.astype(widest)
    if np.dtype(widest).itemsize < arr.dtype.itemsize:
        arr = arr.astype(widest)
    if not len(arr):
        return arr.astype(np.int8)
    return arr.astype(narrowest_int(int(arr.min()), int(arr.max())), copy=False)


class EventTableBuilder:
    """Accumulates events column by column; names are interned to integer codes.

    ``add`` takes plain scalars (use -1 for unknown integers) so a reader never builds a
    per-event dict. ``extend_columns`` lets a reader hand over whole arrays (SQLite / CSV).
    """

    __slots__ = ("_names", "_codes", "_cols", "rank")

    def __init__(self, rank: int = 0) -> None:
        self.rank = rank
        self._names: dict[str, int] = {}
        self._codes: list[int] = []
        self._cols: dict[str, list[Any]] = {c: [] for c in COLUMNS if c != "name"}

    def intern(self, name: str) -> int:
        code = self._names.get(name)
        if code is None:
            code = self._names[name] = len(self._names)
        return code

    def __len__(self) -> int:
        return len(self._codes)

    def add(
        self,
        kind: str,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        on_gpu: bool,
        device: int = -1,
        stream: int = -1,
        correlation: int = -1,
        external_id: int = -1,
        bytes_: int = -1,
        bytes_src: str = "none",
        grid: tuple[int, int, int] = (-1, -1, -1),
        block: tuple[int, int, int] = (-1, -1, -1),
        graph_id: int = -1,
        graph_node_id: int = -1,
        copy_dir: str = "",
    ) -> None:
        c = self._cols
        self._codes.append(self.intern(name))
        c["kind"].append(kind)
        c["on_gpu"].append(on_gpu)
        c["rank"].append(self.rank)
        c["device"].append(device)
        c["stream"].append(stream)
        c["start_ns"].append(start_ns)
        c["dur_ns"].append(dur_ns)
        c["correlation"].append(correlation)
        c["external_id"].append(external_id)
        c["bytes"].append(bytes_)
        c["bytes_src"].append(bytes_src if bytes_ >= 0 else "none")
        c["grid_x"].append(grid[0])
        c["grid_y"].append(grid[1])
        c["grid_z"].append(grid[2])
        c["block_x"].append(block[0])
        c["block_y"].append(block[1])
        c["block_z"].append(block[2])
        c["graph_id"].append(graph_id)
        c["graph_node_id"].append(graph_node_id)
        c["copy_dir"].append(copy_dir)

    def build(self) -> Columns:
        names = list(self._names)
        return make_table(np.asarray(self._codes, dtype=np.int32), names, self._cols)


def make_table(name_codes: np.ndarray, names: list[str], cols: dict[str, Any]) -> Columns:
    """Assemble a table from name codes plus column sequences; missing columns get defaults."""
    n = len(name_codes)
    data: dict[str, Any] = {}
    data["kind"] = Categorical.from_values(_col(cols, "kind", n, "kernel"), KINDS)
    data["name"] = Categorical(np.asarray(name_codes), _unique(names))
    data["on_gpu"] = np.asarray(_col(cols, "on_gpu", n, False), dtype=bool)
    for col, dtype in INT_COLUMNS.items():
        default = 0 if col == "rank" else -1
        values = _col(cols, col, n, default)
        data[col] = np.asarray(values, dtype=dtype) if col in CLOCK_COLUMNS else compact_ints(values, dtype)
    data["bytes_src"] = Categorical.from_values(_col(cols, "bytes_src", n, "none"), BYTES_SOURCES)
    data["copy_dir"] = Categorical.from_values(_col(cols, "copy_dir", n, ""))
    return Columns({c: data[c] for c in COLUMNS}, n)


def _unique(names: list[str]) -> list[str]:
    # categories must be unique; interned names already are. Readers that build
    # names themselves (SQLite id -> string) may repeat a string under two ids.
    if len(set(names)) == len(names):
        return names
    raise ValueError("event names passed to make_table must be unique")


def _col(cols: dict[str, Any], key: str, n: int, default: Any) -> Any:
    values = cols.get(key)
    if values is None:
        return np.full(n, default) if not isinstance(default, str) else [default] * n
    if len(values) != n:
        raise ValueError(f"column {key} has {len(values)} values, expected {n}")
    return values


def name_array(events: Columns) -> np.ndarray:
    """Event names as a numpy object array, straight from the categorical's codes."""
    return events["name"].strings()


def empty_table() -> Columns:
    return EventTableBuilder().build()


@dataclass
class TraceMeta:
    """What a reader learned about one trace besides its events.

    ``kind_counts`` counts every event of each kind the file holds, including the ones the
    reader chose not to keep as rows (e.g. cpu_ops that are not copy ops), so that counts in
    ``inspect`` are the file's, not the table's.
    """

    path: str
    format: str  # kineto | rocprofv3-csv | rocprofv3-json | rocpd | nsys-sqlite | rocprof-v1
    flavour: str  # cupti | roctracer | rocprofiler-sdk | cpu | unknown | ...
    ranks: list[int] = field(default_factory=list)
    role: str = "rank"  # rank | frontend (vLLM API-process trace)
    devices: list[dict[str, Any]] = field(default_factory=list)  # name, arch, cus/sms, peak_gbps
    metadata: dict[str, Any] = field(default_factory=dict)  # versions, distributedInfo, vllm_version, ...
    kind_counts: dict[str, int] = field(default_factory=dict)
    graph_launches: int = 0
    grid_unit: str = "blocks"  # blocks | work-items: how the source wrote grid sizes (table is blocks)
    warnings: list[str] = field(default_factory=list)
    partial: str | None = None  # set when only part of the file could be read: says how much
    op_shapes: dict[str, str] = field(default_factory=dict)
    """Input shapes and dtypes of the host copy ops (``aten::copy_`` ...) where the trace recorded
    them (torch profiler ``record_shapes``), by the op's External id (as a string, so the table
    cache's JSON keeps it): ``"[16,2048] bf16<-bf16"`` — destination dims, dst<-src dtypes."""


class Trace:
    """One rank's events and what the reader learned about them.

    ``table`` is the event table as ``Columns`` (what the analysis reads, no pandas);
    ``events`` the same table as a pandas DataFrame, built on first use (for a library user,
    the plots, the readers that build one) and sharing the numeric columns."""

    __slots__ = ("meta", "_table", "_frame")

    def __init__(self, meta: TraceMeta, events: Columns | pd.DataFrame) -> None:
        self.meta = meta
        self._table: Columns | None = events if isinstance(events, Columns) else None
        self._frame: pd.DataFrame | None = None if isinstance(events, Columns) else events

    @property
    def table(self) -> Columns:
        if self._table is None:
            assert self._frame is not None
            self._table = Columns.from_pandas(self._frame)
        return self._table

    @property
    def events(self) -> pd.DataFrame:
        if self._frame is None:
            assert self._table is not None
            self._frame = self._table.to_pandas()
        return self._frame

    def __getstate__(self) -> tuple[TraceMeta, Columns]:
        return self.meta, self.table

    def __setstate__(self, state: tuple[TraceMeta, Columns]) -> None:
        self.meta, self._table, self._frame = state[0], state[1], None

    def of_kind(self, kind: str) -> pd.DataFrame:
        return self.events[self.events["kind"] == kind]
