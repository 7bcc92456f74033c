"""What a decoded Kineto chunk becomes, whichever decoder read it: counts, kept rows, columns.

Why a module of its own: the chunk is decoded by the native scanner (kineto_native.py) or by
the Python path (kineto_columns.py); both produce the same :class:`Kept` values and hand them
to :func:`assemble` here, so the rules that decide which events become rows and how columns
are derived exist once, and the two paths cannot drift apart.

One exception, on purpose: the native scanner makes the common chunk's columns itself
(low_level/kept.h: the twin of :func:`kept_rows`, :func:`_kept_names`, :func:`assemble` and
:func:`_narrow`), as these numpy passes cost ~0.2 s of CPU per GB of JSON after a ~0.45 s
scan, and the C twin ~0.03 s. The rules here stay the reference: the scanner's chunks with
irregular values in kept rows or rank marks are assembled here, and
tests/readers/test_kineto_native.py checks the twin against these functions (and the Python
path) on every input it has, test_kineto_native_kept.py at their edges. A change to one of these four rules must be made in kept.h too.
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np

from copyprof.events import COMPACT_COLUMNS, KINDS, narrowest_int
from copyprof.grouping import distinct
from copyprof.taxonomy.copies import HOST_COPY_OPS, is_graph_launch

# Category -> kind index in KINDS (+ on_gpu). Lower-cased; ActivityType.h list + legacy
# spellings (tb_plugin samples 2020-21: Kernel, Memcpy, Memset, Runtime, Operator).
CATEGORIES: dict[str, tuple[int, bool]] = {
    "kernel": (0, True),
    "gpu_memcpy": (1, True),
    "memcpy": (1, True),
    "gpu_memset": (2, True),
    "memset": (2, True),
    "cuda_runtime": (3, False),
    "cuda_driver": (3, False),
    "runtime": (3, False),
    "hip_runtime": (3, False),
    "xpu_runtime": (3, False),
    "privateuse1_runtime": (3, False),
    "user_annotation": (4, False),
    "gpu_user_annotation": (4, True),
    "cpu_op": (5, False),
    "operator": (5, False),
    "python_function": (6, False),  # with_stack frames: the Python code behind each copy
}
CPU_OP = 5
_RUNTIME = 3
MEMCPY = 1
AUX_COLUMNS = ("copy_kind_arg", "memcpy_rows")  # per-chunk extras, not table columns
NARROWED = (*COMPACT_COLUMNS, "rank_key")  # sent in the narrowest type the chunk's values need

# Fields of a complete event whose value can be of a type the reader cannot use (Inductor's
# ``"grid": "grid(100,)"`` on a cpu_op, a bool id, an array ``args``). Such a value is ignored
# — the field reads as absent — and counted per field; the event itself is kept. The order is
# the index both decoders count in (low_level/scan.c's O_* codes follow it).
ODD_FIELDS: tuple[str, ...] = (
    "cat", "name", "pid", "tid", "ts", "dur", "args",
    "args.device", "args.fromDevice", "args.stream", "args.correlation", "args.External id",
    "args.external id", "args.bytes", "args.size", "args.graph id", "args.graph node id", "args.rank",
    "args.kind", "args.grid", "args.block",
)


class CategoryMap:
    """Raw category string -> (kind index, on_gpu) with the lookup cached per spelling."""

    def __init__(self) -> None:
        self._cache: dict[Any, tuple[int, bool]] = {}

    def __call__(self, cat: Any) -> tuple[int, bool]:
        hit = self._cache.get(cat)
        if hit is None:
            hit = CATEGORIES.get(cat.lower(), (-1, False)) if isinstance(cat, str) else (-1, False)
            self._cache[cat] = hit
        return hit


CATMAP = CategoryMap()

_INT64_LIMIT = 2.0**63


def fits_int64(f: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Finite values that an int64 holds once multiplied by ``scale`` (casting others gives
    garbage and a RuntimeWarning; the test divides the limit, as multiplying 1e308 overflows)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(f) & (np.abs(f) < _INT64_LIMIT / scale)


class ChunkResult:
    """Columns of one chunk plus the counts of everything it saw."""

    __slots__ = ("bad", "cols", "counts", "graph_launches", "name_codes", "names", "odd", "other", "rank_counts",
                 "shapes")

    def __init__(self) -> None:
        self.cols: dict[str, np.ndarray] = {}
        self.names: list[str] = []
        self.name_codes = np.zeros(0, dtype=np.int32)
        self.counts = np.zeros(len(KINDS), dtype=np.int64)
        self.other = 0
        self.bad = 0
        self.graph_launches = 0
        self.odd = np.zeros(len(ODD_FIELDS), dtype=np.int64)  # ignored values per ODD_FIELDS entry
        self.rank_counts: dict[int, np.ndarray] = {}  # merged files: per rank key, the counts by kind
        self.shapes: dict[int, str] = {}  # host copy ops' recorded shapes by External id (Python path)


def odd_fields_note(odd: np.ndarray) -> str | None:
    """The warning for values of an unexpected type (None when there were none)."""
    total = int(odd.sum())
    if not total:
        return None
    by_field = ", ".join(f"{name} {int(n):,}" for name, n in zip(ODD_FIELDS, odd.tolist()) if n)
    return (f"{total:,} field value(s) of an unexpected type were ignored and their events kept "
            f"(the field reads as absent): {by_field}")


def kept_rows(kind_all: np.ndarray, codes_all: np.ndarray, names_all: list[str],
              rank_all: np.ndarray | None = None) -> tuple[ChunkResult, np.ndarray]:
    """Counts of a chunk's complete events, and which of them become rows: known categories,
    and of the cpu_ops only the host copy ops. ``rank_all``: each event's rank key (-1 none),
    for the per-rank counts of merged multi-rank files."""
    res = ChunkResult()
    res.other = int((kind_all == -1).sum())
    keep = kind_all >= 0
    res.counts = np.bincount(kind_all[keep], minlength=len(KINDS))
    if rank_all is not None and (rank_all >= 0).any():
        for key in distinct(rank_all[keep]).tolist():
            res.rank_counts[key] = np.bincount(kind_all[keep & (rank_all == key)], minlength=len(KINDS))
    elif rank_all is not None:  # no event of this chunk is marked: all are counted as unmarked (-1), or a
        res.rank_counts[-1] = res.counts  # merged file's first rank would lose them when the marks are elsewhere
    cpu = kind_all == CPU_OP
    if cpu.any():
        host = np.fromiter(map(HOST_COPY_OPS.__contains__, names_all), dtype=bool, count=len(names_all))
        keep &= ~cpu | host[codes_all]
    return res, keep


# A rank label in a string pid: SGLang's merger (python/sglang/srt/utils/profile_merger.py)
# writes "[TP00-DP01-PP00-EP00] 1234"; others write "rank 3" or "Rank3".
_PARALLEL_LABEL = re.compile(r"\[((?:TP|DP|PP|EP)\d+(?:-(?:TP|DP|PP|EP)\d+)*)\]")
_RANK_WORD = re.compile(r"\brank[ _-]?(\d{1,6})\b", re.I)
LABEL_KEY_BASE = 1 << 40  # keys of parallel labels: above any rank number; ordered as SGLang sorts (DP, EP, PP, TP)


def pid_rank_key(pid: Any) -> int:
    """The rank key a string pid names (-1 none): the rank number of "rank N", or for a
    parallel label an order-preserving key of its (DP, EP, PP, TP) ranks."""
    if not isinstance(pid, str):
        return -1
    m = _PARALLEL_LABEL.search(pid)
    if m:
        parts = {p[:2]: int(p[2:]) for p in m.group(1).split("-")}
        key = 0
        for axis in ("DP", "EP", "PP", "TP"):
            key = key * 1024 + min(parts.get(axis, 0), 1023)
        return LABEL_KEY_BASE + key
    m = _RANK_WORD.search(pid)
    return int(m.group(1)) if m else -1


def event_ranks(rank_arg: np.ndarray, pids: Any, at: Any = None) -> np.ndarray:
    """Each event's rank key: ``args.rank`` where it is a rank, else what a string pid names.
    ``pids``: every event's pid; or, with ``at`` (their event indexes), only the pids that may
    be strings (the native scanner notes those apart: one or two per chunk, among thousands)."""
    out = np.where(rank_arg >= 0, rank_arg, -1)
    for row, pid in zip(range(len(out)) if at is None else at, pids):
        if type(pid) is str and out[row] < 0:
            out[row] = pid_rank_key(pid)
    return out


class Kept(NamedTuple):
    """The kept rows' values, as both the Python path and the native scanner produce them."""

    kind: np.ndarray
    on_gpu: np.ndarray
    codes: np.ndarray  # name codes into ``names`` (first-seen order over all complete events)
    names: list[str]
    ts: np.ndarray  # microseconds, float64, NaN unknown
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ints: dict[str, np.ndarray]  # INT_ARGS, -1 unknown
    grid: np.ndarray  # (n, 3), -1 unknown
    block: np.ndarray
    copy_kind: list[str]  # args.kind of the memcpy rows, "" when not a string
    rank: np.ndarray  # rank key of each kept row (-1 none): merged multi-rank files


def _kept_names(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes renumbered in first-seen order over the kept rows, and only their names."""
    if not len(codes):
        return codes.astype(np.int32), []
    uniq, first = np.unique(codes, return_index=True)
    order = uniq[np.argsort(first)]
    if len(order) == len(names) and (order == np.arange(len(names))).all():
        return codes.astype(np.int32, copy=False), names
    remap = np.zeros(len(names), dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    return remap[codes], [names[i] for i in order.tolist()]


def assemble(res: ChunkResult, k: Kept) -> ChunkResult:
    """The chunk's table columns from its kept rows (shared by both paths: same table; the
    native scanner's common chunks take its C twin, low_level/kept.h)."""
    res.name_codes, res.names = _kept_names(k.codes, k.names)
    rt_names = np.bincount(res.name_codes[k.kind == _RUNTIME], minlength=len(res.names))
    res.graph_launches = int(sum(int(c) for nm, c in zip(res.names, rt_names) if c and is_graph_launch(nm)))
    ts_f, dur_f, a = k.ts, k.dur, k.ints
    good = fits_int64(ts_f, 1000.0)  # a timestamp whose ns do not fit int64 is as unreadable as NaN
    res.bad = int((~good).sum())
    dur_f = np.where(~fits_int64(dur_f, 1000.0) | (dur_f < 0), 0.0, dur_f)
    on_gpu = k.on_gpu
    dev = np.where(a["device"] >= 0, a["device"], a["from_device"])
    dev = np.where(dev >= 0, dev, k.pid)
    stream = np.where(on_gpu & (a["stream"] >= 0), a["stream"], k.tid)
    i32 = np.int32  # the table's dtype for these (events.INT_COLUMNS); cast here, once
    grid, block = k.grid, k.block
    cols = {
        "kind_idx": k.kind.astype(np.int8),
        "on_gpu": on_gpu,
        "device": np.where(on_gpu, dev, -1).astype(i32),
        "stream": stream,
        "start_ns": np.rint(np.where(good, ts_f, 0.0) * 1000.0).astype(np.int64),
        "dur_ns": np.rint(dur_f * 1000.0).astype(np.int64),
        "correlation": a["correlation"],
        "external_id": np.where(a["external_id"] != -1, a["external_id"], a["external_id_legacy"]),
        "bytes": np.where(a["bytes"] != -1, a["bytes"], a["size"]),
        "grid_x": grid[:, 0].astype(i32), "grid_y": grid[:, 1].astype(i32), "grid_z": grid[:, 2].astype(i32),
        "block_x": block[:, 0].astype(i32), "block_y": block[:, 1].astype(i32), "block_z": block[:, 2].astype(i32),
        "graph_id": a["graph_id"],
        "graph_node_id": a["graph_node_id"],
        "rank_key": k.rank,
    }
    # roctracer memcpy ops carry the direction in args.kind ("DtoD"); names say it too.
    mk = np.flatnonzero(k.kind == MEMCPY)
    cols["copy_kind_arg"] = np.array(k.copy_kind, dtype=object)
    cols["memcpy_rows"] = mk
    if res.bad:
        res.cols = {key: (v[good] if key not in AUX_COLUMNS else v) for key, v in cols.items()}
        res.name_codes = res.name_codes[good]
        # memcpy rows index the unfiltered chunk; recompute them after dropping bad rows.
        res.cols["memcpy_rows"] = np.flatnonzero(res.cols["kind_idx"] == MEMCPY)
        res.cols["copy_kind_arg"] = cols["copy_kind_arg"][good[mk]]
    else:
        res.cols = cols
    _narrow(res.cols)
    return res


def _narrow(cols: dict[str, np.ndarray]) -> None:
    """Each compact column in the narrowest signed type its values in this chunk need. The
    table keeps these columns that narrow anyway (events.COMPACT_COLUMNS); narrowed here, in the
    decode worker, a chunk's result is less than half the bytes to pickle, send and unpickle
    (~470 -> ~210 KB per 4 MB piece), and the parent that gathers the chunks finds most of them
    already fitting the table's column by their type, without a min and max of its own."""
    for key in NARROWED:
        v = cols.get(key)
        if v is not None and len(v) and v.dtype.kind == "i":
            cols[key] = v.astype(narrowest_int(int(v.min()), int(v.max())), copy=False)


_SHORT_TYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
                "c10::Float8_e4m3fn": "fp8e4m3", "c10::Float8_e5m2": "fp8e5m2"}


def shape_text(dims: Any, types: Any) -> str:
    """``[16,2048] bf16<-bf16``: a copy op's destination dims and dst<-src dtypes, from the torch
    profiler's ``Input Dims`` / ``Input type`` args (record_shapes); "" when not recorded."""
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return ""
    text = "[" + ",".join(str(d) for d in dims[0]) + "]"
    if isinstance(types, list) and len(types) >= 2 and all(isinstance(t, str) for t in types[:2]):
        text += f" {_SHORT_TYPES.get(types[0], types[0])}<-{_SHORT_TYPES.get(types[1], types[1])}"
    return text
