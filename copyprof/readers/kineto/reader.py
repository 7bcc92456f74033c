"""PyTorch profiler / Kineto Chrome-trace JSON reader (CUPTI, roctracer, rocprofiler-sdk, legacy).

Layout facts (../shared/docs/trace-formats.md §1, verified against pytorch/kineto
``libkineto/src/output_json.cpp``): ``ts``/``dur`` are float microseconds; GPU ops carry
``args.device``/``args.stream``/``args.correlation``; memcpy/memset carry ``args.bytes``;
CUPTI kernels carry ``grid``/``block`` in blocks/threads and (2026 kineto) ``graph id`` /
``graph node id``; ROCm runtime rows are ``cat: cuda_runtime``; legacy (2020-21) files use a
bare list, capitalised categories and ``"external id"``; ``pid`` may be a string.

Speed: see kineto_native (the decode hot path: the native scanner, with kineto_columns' Python
path for the chunks it declines; shared by the serial path here and the worker processes of
copyprof/readers/kineto/pool.py). Events of other categories (python_function,
flows, counters) are counted and dropped; cpu_ops are kept only when they are copy ops. The
per-chunk columns are joined column by column (each chunk's copy freed as it is used) and the
frame is built without pandas' consolidation copy, so peak memory is about one table.
"""
from __future__ import annotations

import mmap
import os
import re
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from copyprof.columns import Categorical, Columns
from copyprof.errors import CopyprofError
from copyprof.events import (
    BYTES_SOURCES,
    COLUMNS,
    COMPACT_COLUMNS,
    INT_COLUMNS,
    KINDS,
    Trace,
    TraceMeta,
    narrowest_int,
    rank_column,
)
from copyprof.readers.files import DECOMPRESS_ERRORS, BlockStream, json_size, open_binary, piece_size
from copyprof.readers.kineto.chunk import ODD_FIELDS, ChunkResult, odd_fields_note
from copyprof.readers.kineto.columns import Event, columnize, convert_event, gc_paused
from copyprof.readers.kineto.merged import split_ranks
from copyprof.readers.kineto.native import decode_columns
from copyprof.readers.kineto.state import StreamState
from copyprof.readers.kineto.stream import MalformedChunk, NotStreamable, stream_event_chunks

if TYPE_CHECKING:
    from copyprof.readers.kineto.pool import ChunkPool

_RANK_IN_NAME = re.compile(r"(?:^|[_.\-])rank[_\-]?(\d+)(?:[_.\-]|$)")


class ColumnBuffer:
    """Table columns filled chunk by chunk, in place.

    Why: keeping per-chunk arrays and concatenating at the end holds the table twice at the
    peak (and the freed chunk arrays stay in the heap). Here each chunk is copied into
    columns allocated once with room for the rows the file size suggests (untouched pages
    cost no memory) and doubled in the rare case the guess was short. The room is an anonymous
    mapping of our own, not a numpy allocation: numpy advises huge pages for arrays over 4 MB,
    and then the partly filled 2 MB page at each column's end costs up to 2 MB per column
    (~10 MB over a 1 GB trace's table, measured). Compact columns
    (events.COMPACT_COLUMNS) are kept in the narrowest dtype their values so far need and widened
    when a chunk needs more: the finished column has the dtype events.compact_ints would give.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1024, capacity)
        self.n = 0
        self.cols: dict[str, np.ndarray] = {}

    def append(self, cols: dict[str, np.ndarray], n: int) -> None:
        if not self.cols:
            self.cols = {k: _room(self.capacity, self._dtype(k, v)) for k, v in cols.items()}
        if self.n + n > self.capacity:
            self.capacity = max(2 * self.capacity, self.n + n)
            for k, old in self.cols.items():
                self._reallocate(k, old.dtype)
        for k, v in cols.items():
            need = self._dtype(k, v, self.cols[k].dtype)
            if need != self.cols[k].dtype:
                self._reallocate(k, need)
            self.cols[k][self.n : self.n + n] = v
        self.n += n

    @staticmethod
    def _dtype(key: str, values: np.ndarray, current: Any = np.int8) -> np.dtype:
        if key not in COMPACT_COLUMNS and key not in ("name_code", "rank_key"):  # name codes: few distinct names
            return values.dtype
        if not len(values) or (values.dtype.kind == "i" and values.dtype.itemsize <= np.dtype(current).itemsize):
            return np.dtype(current)  # a signed type no wider than the column's: every value fits
        return narrowest_int(int(values.min()), int(values.max()), at_least=current)

    def _reallocate(self, key: str, dtype: np.dtype) -> None:
        new = _room(self.capacity, dtype)
        new[: self.n] = self.cols[key][: self.n]
        self.cols[key] = new

    def take(self) -> dict[str, np.ndarray]:
        cols, self.cols = self.cols, {}
        return {k: v[: self.n] for k, v in cols.items()}


def _room(n: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``n`` items in its own anonymous mapping (pages cost memory
    only once written; the mapping is unmapped when the last view of it goes)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mmap.mmap(-1, max(1, n * dtype.itemsize)), dtype=dtype, count=n)


class _Accumulator:
    """Merges per-chunk columns; names are re-coded against one global list."""

    def __init__(self, capacity: int = 0) -> None:
        self.names: dict[str, int] = {}
        self.table = ColumnBuffer(capacity)
        self.counts = np.zeros(len(KINDS), dtype=np.int64)
        self.other = self.bad = self.graph_launches = 0
        self.odd = np.zeros(len(ODD_FIELDS), dtype=np.int64)
        self.rank_counts: dict[int, np.ndarray] = {}  # merged multi-rank files: kind counts per rank key
        self.shapes: dict[int, str] = {}  # host copy ops' recorded shapes by External id
        self.rows = 0
        self._dir_rows: list[np.ndarray] = []  # memcpy rows (table positions) and their directions
        self._dirs: list[np.ndarray] = []

    def take(self, res: ChunkResult) -> None:
        n = len(res.name_codes)
        mk = res.cols.pop("memcpy_rows")
        kind_arg = res.cols.pop("copy_kind_arg")
        if len(mk):  # each memcpy row's direction from its own name: a few rows a chunk, not every name of it
            names = res.names
            d = np.array([_dir_from_name(names[c]) for c in res.name_codes[mk].tolist()], dtype=object)
            self._dirs.append(np.where(d == "", kind_arg, d))
            self._dir_rows.append(mk + self.rows)
        remap = np.array([self.names.setdefault(nm, len(self.names)) for nm in res.names], dtype=np.int32)
        remap = remap.astype(narrowest_int(0, len(self.names)), copy=False)  # fits the column by its type
        res.cols["name_code"] = remap[res.name_codes] if len(remap) else res.name_codes.astype(np.int32)
        self.table.append(res.cols, n)
        self.counts += res.counts
        self.other += res.other
        self.bad += res.bad
        self.graph_launches += res.graph_launches
        self.odd += res.odd
        for key, counts in res.rank_counts.items():
            self.rank_counts[key] = self.rank_counts.get(key, 0) + counts
        self.shapes.update(res.shapes)
        self.rows += n

    def kind_counts(self) -> dict[str, int]:
        return {k: int(c) for k, c in zip(KINDS, self.counts)}

    def build(self, rank: int) -> tuple[Columns, np.ndarray]:
        """The table (every row of rank ``rank``) and each row's rank key (-1 none)."""
        names = list(self.names)
        if not self.rows:
            from copyprof.events import make_table

            return make_table(np.zeros(0, np.int32), names, {"rank": np.zeros(0, np.int32)}), np.zeros(0, np.int8)
        cols = self.table.take()
        rank_key = cols.pop("rank_key")
        return table_frame(cols.pop("name_code"), names, cols, rank, self._copy_dirs()), rank_key

    def _copy_dirs(self) -> tuple[np.ndarray, list[str]]:
        """Codes into sorted distinct directions ("" for non-memcpy rows), as Categorical infers."""
        if not self._dirs:
            return np.zeros(self.rows, dtype=np.int8), [""]
        values = np.concatenate(self._dirs).tolist()
        at = np.concatenate(self._dir_rows)
        cats = sorted(set(values) | ({""} if len(at) < self.rows else set()))
        index = {c: i for i, c in enumerate(cats)}
        codes = np.full(self.rows, index.get("", -1), dtype=narrowest_int(-1, len(cats)))
        codes[at] = [index[v] for v in values]
        return codes, cats


def table_frame(codes: np.ndarray, names: list[str], cols: dict[str, np.ndarray], rank: int,
                copy_dir: tuple[np.ndarray, list[str]]) -> Columns:
    """The table events.make_table would build from these columns, without its copies
    (make_table goes through object arrays for the categoricals). Same dtypes, same
    categories, same values (tests/readers/test_parallel.py checks it against make_table)."""
    n = len(codes)
    data: dict[str, Any] = {
        "kind": Categorical(cols.pop("kind_idx"), KINDS),
        "name": Categorical(codes, names),
        "on_gpu": cols.pop("on_gpu").astype(bool, copy=False),
    }
    nbytes = cols["bytes"]
    for col, dtype in INT_COLUMNS.items():
        if col == "rank":
            data[col] = rank_column(n, rank)
        elif col in COMPACT_COLUMNS:
            data[col] = cols.pop(col)  # ColumnBuffer kept it in the narrowest dtype its values need
        else:
            data[col] = cols.pop(col).astype(dtype, copy=False)
    data["bytes_src"] = Categorical((nbytes >= 0).view(np.int8), BYTES_SOURCES)
    data["copy_dir"] = Categorical(copy_dir[0], copy_dir[1])
    return Columns({c: data[c] for c in COLUMNS}, n)


def _dir_from_name(name: str) -> str:
    parts = name.split()
    return parts[1] if len(parts) > 1 and parts[0].lower() == "memcpy" else ""


def read_kineto(path: str, pool: ChunkPool | None = None) -> list[Trace]:
    """Read one Kineto Chrome-trace file (plain or gzip) into a Trace.

    With ``pool`` the chunks are decoded in its worker processes; the table is the same.
    """
    size = json_size(path)
    stream = BlockStream(path, piece_size(size))
    state = StreamState()
    cols = _Accumulator(size // 256)  # room for ~1 row per 256 B (measured: 1 per 590-910)
    partial: str | None = None
    try:
        chunks = (pool.read_chunks(stream, state) if pool is not None
                  else stream_event_chunks(stream, decode_columns, state, stream.block_size))
        for res in chunks:
            cols.take(res)
    except NotStreamable:
        header, events, odd = _decode_whole(path)
        state.header = header
        with gc_paused():
            cols.take(columnize(events, odd))
    except MalformedChunk as exc:
        partial = f"invalid JSON after byte {exc.offset:,} ({exc.reason}); kept {cols.rows:,} events before it"
    if stream.truncated:
        partial = f"{stream.describe_partial()}; kept {cols.rows:,} whole event{'' if cols.rows == 1 else 's'}"
    elif state.truncated and partial is None:
        partial = f"{state.truncated}; kept {cols.rows:,} whole event{'' if cols.rows == 1 else 's'}"
    if state.skipped:  # damaged events cut out of the array (json_stream.repair); the rest was read
        first, total = min(state.skipped)[0], sum(n for _, n in state.skipped)
        note = f"skipped {total:,} bytes of damaged JSON in {len(state.skipped)} place(s), the first at byte {first:,}"
        partial = f"{partial}; {note}" if partial else f"{note}; kept {cols.rows:,} events"
    if partial and cols.rows == 0 and cols.counts.sum() == 0:
        raise CopyprofError(f"no events could be read ({partial})", path=path)
    header = {**state.header, **state.tail}
    meta = _meta(path, header, cols)
    meta.partial = partial
    table, rank_key = cols.build(meta.ranks[0])
    return split_ranks(Trace(meta=meta, events=table), rank_key, cols.rank_counts)


def _decode_whole(path: str) -> tuple[dict[str, Any], list[Event], np.ndarray]:
    """Small or unusual documents (traceEvents as a dict keyed "pid,tid"): decode at once."""
    with open_binary(path) as fh:
        try:
            data = fh.read()
        except DECOMPRESS_ERRORS as exc:  # isal's IsalError is not an OSError
            raise CopyprofError(f"compressed stream is damaged ({exc})", path=path) from exc
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise CopyprofError(f"not valid JSON ({exc})", path=path) from exc
    if isinstance(doc, list):
        raw, header = doc, {}
    elif isinstance(doc, dict) and "traceEvents" in doc:
        raw = doc.pop("traceEvents")
        header = doc
        if isinstance(raw, dict):  # {"pid,tid": [events]} (third-party writers)
            raw = [e for group in raw.values() if isinstance(group, list) for e in group]
    else:
        raise CopyprofError("JSON has no traceEvents: not a Chrome trace", path=path)
    odd = np.zeros(len(ODD_FIELDS), dtype=np.int64)
    events = [e for e in (convert_event(item, odd) for item in (raw if isinstance(raw, list) else [])) if e is not None]
    return header, events, odd


def _flavour(header: dict[str, Any], has_gpu: bool) -> str:
    if "rocprofiler-sdk_version" in header:
        return "rocprofiler-sdk"
    if "roctracer_version" in header or "hip_runtime_version" in header:
        return "roctracer"
    if "cupti_version" in header or "cuda_runtime_version" in header:
        return "cupti"
    props = _device_props(header)
    if any(isinstance(p, dict) and p.get("warpSize") == 64 for p in props):
        return "roctracer"  # ROCm traces before version keys (HTA MI250 ROCm 6.2 sample)
    if not has_gpu:
        return "cpu"
    return "cupti"


def _meta(path: str, header: dict[str, Any], cols: _Accumulator) -> TraceMeta:
    counts = cols.kind_counts()
    has_gpu = any(counts[k] for k in ("kernel", "memcpy", "memset"))
    flavour = _flavour(header, has_gpu)
    if flavour != "cpu" and not has_gpu:
        flavour = f"{flavour} (no GPU events)"
    meta = TraceMeta(path=path, format="kineto", flavour=flavour)
    dist_raw = header.get("distributedInfo")
    dist: dict[str, Any] = dist_raw if isinstance(dist_raw, dict) else {}
    rank = dist.get("rank") if type(dist.get("rank")) is int and 0 <= dist["rank"] < 2**31 else None  # int32 column
    if rank is None:
        m = _RANK_IN_NAME.search(os.path.basename(path))
        rank = int(m.group(1)) if m else 0
    meta.ranks = [rank]
    for p in _device_props(header):
        if isinstance(p, dict):
            meta.devices.append(_device(p))
    keep = {k: v for k, v in header.items() if k not in ("deviceProperties", "traceEvents") and not isinstance(v, (list, dict))}
    if dist:
        keep["distributedInfo"] = {k: dist.get(k) for k in ("backend", "rank", "world_size", "nccl_version") if k in dist}
    meta.metadata = keep
    meta.kind_counts = counts
    meta.graph_launches = cols.graph_launches
    meta.op_shapes = {str(ext): text for ext, text in sorted(cols.shapes.items())}
    if cols.bad:
        meta.warnings.append(f"{cols.bad} events had unreadable timestamps and were skipped")
    odd = odd_fields_note(cols.odd)
    if odd:
        meta.warnings.append(odd)
    return meta


def _device_props(header: dict[str, Any]) -> list[Any]:
    """``deviceProperties`` when it is a list (a damaged or hand-made header may hold anything)."""
    props = header.get("deviceProperties")
    return props if isinstance(props, list) else []


def _device(p: dict[str, Any]) -> dict[str, Any]:
    major, minor = p.get("computeMajor"), p.get("computeMinor")
    amd = p.get("warpSize") == 64
    return {
        "id": p.get("id"),
        "name": p.get("name") or "",
        "arch": (f"gfx{major}{minor}x" if amd else f"sm_{major}{minor}") if major is not None else "",
        "cus" if amd else "sms": p.get("numSms"),
        "memory_bytes": p.get("totalGlobalMem"),
    }
