"""Decode one chunk of Kineto events and turn it into numpy columns — the reader's hot path.

Why a separate module: this is where the time goes, and it is pure (bytes in, arrays out), so
the parallel reader runs it in worker processes (copyprof/parallel.py) and the serial reader in
the parent; both paths share every line, which is what keeps their tables identical.

What makes it fast (measured on a 78 MB H200 replica trace, one core):

* the Structs are ``gc=False`` and decoding runs with the cyclic GC paused: with the GC on,
  every few hundred allocations trigger a collection that walks all surviving events, and
  msgspec decodes at ~120 MB/s; paused, ~550 MB/s;
* events are a union tagged by "ph": only complete ("X") events get fields; flows, counters
  and metadata decode to empty Structs (msgspec skips their bodies);
* the Structs declare only the fields we use (msgspec skips the other keys without
  allocating) and default missing integers to -1, so most columns are plain ints that numpy
  converts in one C loop;
* no per-event bytecode: an Event's numeric fields go straight into ``np.fromiter`` through
  ``attrgetter`` (no list of the values), its strings and args are listed the same way, and
  the 13 args fields are transposed at once with ``msgspec.structs.astuple`` + ``zip`` (for
  that many fields, faster than 13 passes; for Event's few, the transpose was ~1.5x slower:
  columnising 145 -> 136 ms per 64 MB); only when a column holds something else (numeric
  strings, nulls, floats in an int field, ragged ``grid``) does it take the tolerant path,
  which gives the values the original reader gave;
* names are factorised per chunk with a dict (first-seen order) so only distinct strings
  outlive the chunk; per-name facts (graph launch, host copy op) are looked up per distinct
  name, not per event.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain, compress, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple

import msgspec
import numpy as np
from msgspec.structs import astuple

from copyprof.events import KINDS
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
}
_CPU_OP = 5
_RUNTIME = 3
_MEMCPY = 1
AUX_COLUMNS = ("copy_kind_arg", "memcpy_rows")  # per-chunk extras, not table columns

# Concrete field types let msgspec decode ~3x faster than `Any`; unions cover the spellings
# seen in real files (roctracer writes runtime args as strings: "bytes": "9216", "kind": "1").
# An event that fits none of them sends its chunk down the generic path in decode_events.
IntLike = int | float | str | None
_NO_DIM = (-1, -1, -1)


class EventArgs(msgspec.Struct, gc=False, frozen=True):  # frozen: EMPTY_ARGS is a shared default
    device: IntLike = -1
    stream: IntLike = -1
    correlation: IntLike = -1
    external_id: IntLike = msgspec.field(default=-1, name="External id")
    external_id_legacy: IntLike = msgspec.field(default=-1, name="external id")
    bytes: IntLike = -1
    size: IntLike = -1  # ROCm 6.2 runtime copy rows carry `size` instead of `bytes`
    kind: IntLike = None
    grid: tuple[int, ...] | None = _NO_DIM
    block: tuple[int, ...] | None = _NO_DIM
    graph_id: IntLike = msgspec.field(default=-1, name="graph id")
    graph_node_id: IntLike = msgspec.field(default=-1, name="graph node id")
    from_device: IntLike = msgspec.field(default=-1, name="fromDevice")  # CUPTI PtoP has no `device`


EMPTY_ARGS = EventArgs()


class Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete ("X") event: the only phase that becomes rows or counts."""

    cat: str | None = None
    name: str | int | float | None = None
    pid: IntLike = -1
    tid: IntLike = -1
    ts: float | str | None = None
    dur: float | str | None = None
    args: EventArgs | None = EMPTY_ARGS  # only an explicit "args": null is None


# Every other Chrome-trace phase decodes to an empty Struct: msgspec reads the "ph" tag and
# skips the rest of the object, so flows (half the events of a CUDA-graph trace) cost a scan,
# not seven fields (decode 32% faster on the H200 trace). An unknown or missing "ph" fails
# validation and sends the chunk down the generic path (decode_events).
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"Phase_{i}", [], tag_field="ph", tag=ph, gc=False)
    for i, ph in enumerate(("B", "E", "i", "I", "b", "n", "e", "C", "s", "t", "f", "P", "O", "N", "D", "M",
                            "V", "v", "R", "c", "(", ")", "S", "T", "p", "F")))
AnyEvent = Event | _OTHER_PHASES[0]
for _cls in _OTHER_PHASES[1:]:
    AnyEvent = AnyEvent | _cls  # type: ignore[assignment]

_FAST = msgspec.json.Decoder(list[AnyEvent])
_GENERIC = msgspec.json.Decoder()
_ARG_FIELDS = EventArgs.__struct_fields__
INT_ARGS = ("device", "from_device", "stream", "correlation", "external_id", "external_id_legacy",
            "bytes", "size", "graph_id", "graph_node_id")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: decoded events hold no cycles, and collections cost ~4x (see top)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode_events(data: bytes | memoryview) -> list[Any]:
    """``[ev, ev, ...]`` JSON to Structs (Event for "X"); raises msgspec.DecodeError when it
    is not JSON."""
    try:
        return _FAST.decode(data)
    except msgspec.ValidationError:
        # Some event has a field of an unexpected shape (args not an object, ...). Decode
        # generically and keep the events that fit; the rest are skipped.
        return [e for e in map(convert_event, _GENERIC.decode(data)) if e is not None]


def convert_event(item: Any) -> Event | None:
    """One generically decoded event as an Event; None for other phases and misfits.
    A missing or null "ph" counts as "X" (some writers leave it out)."""
    if not isinstance(item, dict):
        return None
    if item.get("ph") is None:
        item = {**item, "ph": "X"}
    elif item["ph"] != "X":
        return None
    try:
        return msgspec.convert(item, Event)
    except (msgspec.ValidationError, TypeError):
        return None


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


def to_float(values: list[Any] | tuple[Any, ...]) -> np.ndarray:
    """Floats from a list of numbers / numeric strings / None (-> NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        import pandas as pd

        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64, copy=True)


def to_int(values: list[Any] | tuple[Any, ...], default: int = -1) -> np.ndarray:
    """Ints from numbers / numeric strings / None (-> ``default``); floats are truncated.

    The common case (all ints) is one C loop; anything else goes through floats, as before.
    """
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        f = to_float(values)
        f[~_fits_int64(f)] = default  # NaN, inf, or beyond int64 (2**70, 1e300): unknown, not garbage
        return f.astype(np.int64)


_INT64_LIMIT = 2.0**63


def _fits_int64(f: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Finite values that an int64 holds once multiplied by ``scale`` (casting others gives
    garbage and a RuntimeWarning; the test divides the limit, as multiplying 1e308 overflows)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(f) & (np.abs(f) < _INT64_LIMIT / scale)


def to_tid(values: list[Any]) -> np.ndarray:
    """Thread/stream ids: ints, or strings like "stream 7" (legacy)."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    out = to_float(values)
    for i in np.flatnonzero(np.isnan(out)):
        v = values[i]
        if isinstance(v, str):
            digits = "".join(ch if ch.isdigit() else " " for ch in v).split()
            out[i] = float(digits[0]) if digits else -1
        else:
            out[i] = -1
    out[~_fits_int64(out)] = -1
    return out.astype(np.int64)


def _dim3(values: tuple[Any, ...], n: int) -> np.ndarray:
    """(n, 3) launch dims; anything that is not three ints is (-1, -1, -1)."""
    if n and None not in values and set(map(len, values)) == {3}:
        try:
            return np.fromiter(chain.from_iterable(values), dtype=np.int64, count=3 * n).reshape(n, 3)
        except OverflowError:  # a dimension beyond int64 (msgspec decodes up to 2**64 - 1)
            pass
    out = np.full((n, 3), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if v is not None and len(v) == 3 and all(-(2**63) <= d < 2**63 for d in v):
            out[i] = v
    return out


class ChunkResult:
    """Columns of one chunk plus the counts of everything it saw."""

    __slots__ = ("bad", "cols", "counts", "graph_launches", "name_codes", "names", "other")

    def __init__(self) -> None:
        self.cols: dict[str, np.ndarray] = {}
        self.names: list[str] = []
        self.name_codes = np.zeros(0, dtype=np.int32)
        self.counts = np.zeros(len(KINDS), dtype=np.int64)
        self.other = 0
        self.bad = 0
        self.graph_launches = 0


def _kinds(cats: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Kind index per event (-1 unknown category) and on_gpu, looked up per distinct category."""
    n = len(cats)
    kind_of = {c: CATMAP(c)[0] for c in set(cats)}
    gpu_of = {c: CATMAP(c)[1] for c in kind_of}
    kind = np.fromiter(map(kind_of.__getitem__, cats), dtype=np.int64, count=n)
    return kind, np.fromiter(map(gpu_of.__getitem__, cats), dtype=bool, count=n)


def _fields(structs: list[Any], count: int) -> tuple[tuple[Any, ...], ...]:
    """Transpose Structs into one tuple per field: one C pass, no per-field attribute lookups
    (for EventArgs' 13 fields, faster than 13 attrgetter passes)."""
    if not structs:
        return ((),) * count
    return tuple(zip(*map(astuple, structs)))


def _field(structs: list[Any], name: str) -> list[Any]:
    """One field of every Struct (for Event's few fields, ~1.5x faster than the transpose)."""
    return list(map(attrgetter(name), structs))


def _factorize(names: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Codes in first-seen order, and the distinct names as strings."""
    uniq = dict.fromkeys(names)
    if not all(type(k) is str for k in uniq):  # numeric / null names: compare as strings
        names = [n if isinstance(n, str) else ("" if n is None else str(n)) for n in names]
        uniq = dict.fromkeys(names)
    index = {k: i for i, k in enumerate(uniq)}
    codes = np.fromiter(map(index.__getitem__, names), dtype=np.int32, count=len(names))
    return codes, list(uniq)


def _kept(values: Sequence[Any], keep: np.ndarray, dtype: type, tolerant: Any) -> np.ndarray:
    """``tolerant(kept values)`` (to_int / to_float / to_tid), computed for the common case —
    every value a plain number — as one C conversion of all values and a boolean mask, with no
    per-event Python list. Anything else takes the tolerant path on the kept values only, so
    the result is the same either way."""
    try:
        if dtype is np.float64:
            return np.array(values, dtype=np.float64)[keep]
        return np.fromiter(values, dtype=np.int64, count=len(values))[keep]
    except (TypeError, ValueError, OverflowError):
        return tolerant(list(compress(values, keep)))


def _kept_field(structs: list[Any], name: str, keep: np.ndarray, dtype: type, tolerant: Any) -> np.ndarray:
    """:func:`_kept` of one Event field, read straight into the array in the common case (no
    list of the values); the values are listed only for the tolerant path."""
    try:
        return np.fromiter(map(attrgetter(name), structs), dtype=dtype, count=len(structs))[keep]
    except (TypeError, ValueError, OverflowError):
        return _kept(_field(structs, name), keep, dtype, tolerant)


def columnize(events: list[Any]) -> ChunkResult:
    """Columns for the kept events of a chunk (see copyprof.events for the schema)."""
    complete = list(compress(events, map(is_, map(type, events), repeat(Event))))
    del events
    kind_all, gpu_all = _kinds(_field(complete, "cat"))
    codes_all, names_all = _factorize(_field(complete, "name"))
    res, keep = kept_rows(kind_all, codes_all, names_all)
    ts_f = _kept_field(complete, "ts", keep, np.float64, to_float)
    dur_f = _kept_field(complete, "dur", keep, np.float64, to_float)
    pid_i = _kept_field(complete, "pid", keep, np.int64, to_int)
    tid_i = _kept_field(complete, "tid", keep, np.int64, to_tid)
    args = _field(complete, "args")
    del complete
    if None in args:
        args = [x if x is not None else EMPTY_ARGS for x in args]
    fields = dict(zip(_ARG_FIELDS, _fields(args, len(_ARG_FIELDS))))
    del args
    kind = kind_all[keep]
    memcpy_rows = np.flatnonzero(keep)[kind == _MEMCPY].tolist()
    return assemble(res, Kept(
        kind=kind, on_gpu=gpu_all[keep], codes=codes_all[keep], names=names_all, ts=ts_f, dur=dur_f,
        pid=pid_i, tid=tid_i, ints={f: _kept(fields[f], keep, np.int64, to_int) for f in INT_ARGS},
        grid=_dim3(fields["grid"], len(keep))[keep],  # _dim3 is exact value by value: mask afterwards
        block=_dim3(fields["block"], len(keep))[keep],
        copy_kind=[k if isinstance(k, str) else "" for k in map(fields["kind"].__getitem__, memcpy_rows)]))


def kept_rows(kind_all: np.ndarray, codes_all: np.ndarray, names_all: list[str]) -> tuple[ChunkResult, np.ndarray]:
    """Counts of a chunk's complete events, and which of them become rows: known categories,
    and of the cpu_ops only the host copy ops."""
    res = ChunkResult()
    res.other = int((kind_all == -1).sum())
    keep = kind_all >= 0
    res.counts = np.bincount(kind_all[keep], minlength=len(KINDS))
    cpu = kind_all == _CPU_OP
    if cpu.any():
        host = np.fromiter(map(HOST_COPY_OPS.__contains__, names_all), dtype=bool, count=len(names_all))
        keep &= ~cpu | host[codes_all]
    return res, keep


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
    """The chunk's table columns from its kept rows (shared by both paths: same table)."""
    res.name_codes, res.names = _kept_names(k.codes, k.names)
    rt_names = np.bincount(res.name_codes[k.kind == _RUNTIME], minlength=len(res.names))
    res.graph_launches = int(sum(int(c) for nm, c in zip(res.names, rt_names) if c and is_graph_launch(nm)))
    ts_f, dur_f, a = k.ts, k.dur, k.ints
    good = _fits_int64(ts_f, 1000.0)  # a timestamp whose ns do not fit int64 is as unreadable as NaN
    res.bad = int((~good).sum())
    dur_f = np.where(~_fits_int64(dur_f, 1000.0) | (dur_f < 0), 0.0, dur_f)
    on_gpu = k.on_gpu
    dev = np.where(a["device"] >= 0, a["device"], a["from_device"])
    dev = np.where(dev >= 0, dev, k.pid)
    stream = np.where(on_gpu & (a["stream"] >= 0), a["stream"], k.tid)
    i32 = np.int32  # the table's dtype for these (events._INT_COLUMNS); cast here, once
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
    }
    # roctracer memcpy ops carry the direction in args.kind ("DtoD"); names say it too.
    mk = np.flatnonzero(k.kind == _MEMCPY)
    cols["copy_kind_arg"] = np.array(k.copy_kind, dtype=object)
    cols["memcpy_rows"] = mk
    if res.bad:
        res.cols = {key: (v[good] if key not in AUX_COLUMNS else v) for key, v in cols.items()}
        res.name_codes = res.name_codes[good]
        # memcpy rows index the unfiltered chunk; recompute them after dropping bad rows.
        res.cols["memcpy_rows"] = np.flatnonzero(res.cols["kind_idx"] == _MEMCPY)
        res.cols["copy_kind_arg"] = cols["copy_kind_arg"][good[mk]]
    else:
        res.cols = cols
    return res
