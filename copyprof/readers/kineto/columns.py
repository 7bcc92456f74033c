"""The pure-Python decoder of one chunk of Kineto events: msgspec Structs, then numpy columns.

Why it stays beside the native scanner (kineto_native.py): it reads every chunk the scanner
declines (damaged JSON, escapes, odd shapes: its tolerant rules and error messages are the
readers' contract) and every chunk where the scanner is not built. It is pure (bytes in,
arrays out), so the parallel reader runs it in worker processes (copyprof/readers/kineto/pool.py) and the
serial reader in the parent; what it produces goes through kineto_chunk.assemble, as the
scanner's does.

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain, compress, repeat
from operator import attrgetter, is_
from typing import Any

import msgspec
import numpy as np
from msgspec.structs import astuple

from copyprof.readers.kineto.chunk import (
    CATMAP,
    CPU_OP,
    MEMCPY,
    ODD_FIELDS,
    ChunkResult,
    Kept,
    assemble,
    event_ranks,
    fits_int64,
    kept_rows,
    shape_text,
)

# Concrete field types let msgspec decode ~3x faster than `Any`; unions cover the spellings
# seen in real files (roctracer writes runtime args as strings: "bytes": "9216", "kind": "1").
# An event that fits none of them sends its chunk down the generic path in decode_events.
IntLike = int | float | str | None
TimeLike = float | str | None
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
    rank: IntLike = -1  # TraceLens' TraceFusion writes each event's rank here in merged multi-rank files
    input_dims: Any = msgspec.field(default=None, name="Input Dims")  # record_shapes: the copy ops' shapes
    input_type: Any = msgspec.field(default=None, name="Input type")


EMPTY_ARGS = EventArgs()


class Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete ("X") event: the only phase that becomes rows or counts."""

    cat: str | None = None
    name: str | int | float | None = None
    pid: IntLike = -1
    tid: IntLike = -1
    ts: TimeLike = None
    dur: TimeLike = None
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

_EVENT_TYPES = {f.encode_name: f.type for f in msgspec.structs.fields(Event)}
_ARG_TYPES = {f.encode_name: f.type for f in msgspec.structs.fields(EventArgs)}
ODD_INDEX = {name: i for i, name in enumerate(ODD_FIELDS)}
_FAST = msgspec.json.Decoder(list[AnyEvent])  # type: ignore[valid-type]  # a union built at import time
_GENERIC = msgspec.json.Decoder()
_ARG_FIELDS = EventArgs.__struct_fields__
INT_ARGS = ("device", "from_device", "stream", "correlation", "external_id", "external_id_legacy",
            "bytes", "size", "graph_id", "graph_node_id", "rank")


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


def decode_events(data: bytes | memoryview, odd: np.ndarray | None = None) -> list[Any]:
    """``[ev, ev, ...]`` JSON to Structs (Event for "X"); raises msgspec.DecodeError when it
    is not JSON. Values of an unexpected type are counted into ``odd`` (per ODD_FIELDS)."""
    try:
        return _FAST.decode(data)
    except msgspec.ValidationError:
        # Some event has a field of an unexpected shape (a string grid, args not an object,
        # ...). Decode generically; such a field is dropped and counted, the event kept.
        return [e for e in (convert_event(item, odd) for item in _GENERIC.decode(data)) if e is not None]


def convert_event(item: Any, odd: np.ndarray | None = None) -> Event | None:
    """One generically decoded event as an Event; None for other phases and non-objects.
    A missing or null "ph" counts as "X" (some writers leave it out). A field whose value
    has a type the reader cannot use reads as absent and is counted into ``odd``."""
    if not isinstance(item, dict):
        return None
    if item.get("ph") is None:
        item = {**item, "ph": "X"}
    elif item["ph"] != "X":
        return None
    try:
        return msgspec.convert(item, Event)
    except (msgspec.ValidationError, TypeError):
        pass
    fixed, dropped = _without_odd_values(item)
    try:
        event = msgspec.convert(fixed, Event)
    except (msgspec.ValidationError, TypeError):
        return None
    if odd is not None:
        odd[dropped] += 1
    return event


def _fits(value: Any, kind: Any) -> bool:
    try:
        msgspec.convert(value, kind)
    except (msgspec.ValidationError, TypeError):
        return False
    return True


def _without_odd_values(item: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """``item`` without the values the Event fields cannot take, and their ODD_FIELDS indexes."""
    fixed, dropped = dict(item), []
    for key, kind in _EVENT_TYPES.items():
        if key in fixed and key != "args" and not _fits(fixed[key], kind):
            del fixed[key]
            dropped.append(ODD_INDEX[key])
    args = fixed.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key, kind in _ARG_TYPES.items():
            if key in args and not _fits(args[key], kind):
                del args[key]
                dropped.append(ODD_INDEX["args." + key])
        fixed["args"] = args
    elif "args" in fixed and args is not None:
        del fixed["args"]
        dropped.append(ODD_INDEX["args"])
    return fixed, dropped


def to_float(values: list[Any] | tuple[Any, ...]) -> np.ndarray:
    """Floats from a list of numbers / numeric strings / None (-> NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        import pandas as pd

        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64, copy=True)


def to_int(values: list[Any] | tuple[Any, ...], default: int = -1) -> np.ndarray:
    """Ints from numbers / numeric strings / None (-> ``default``); floats are truncated.

    The common case (all ints) is one C loop; anything else (strings, None, floats) goes through
    ``to_float``, which parses every one of those shapes, and is truncated; a value that no int64
    holds is ``default``.
    """
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        f = to_float(values)
        f[~fits_int64(f)] = default  # NaN, inf, or beyond int64 (2**70, 1e300): unknown, not garbage
        return f.astype(np.int64)


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
    out[~fits_int64(out)] = -1
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


def decode_chunk(data: bytes | memoryview) -> ChunkResult:
    """The Python path for one chunk: decode (GC paused) and columnise, with the counts of
    ignored values. Raises msgspec.DecodeError when the chunk is not JSON."""
    odd = np.zeros(len(ODD_FIELDS), dtype=np.int64)
    with gc_paused():
        return columnize(decode_events(data, odd), odd)


def columnize(events: list[Any], odd: np.ndarray | None = None) -> ChunkResult:
    """Columns for the kept events of a chunk (see copyprof.events for the schema); ``odd``:
    the values of an unexpected type that decoding ignored (per ODD_FIELDS)."""
    complete = list(compress(events, map(is_, map(type, events), repeat(Event))))
    del events
    kind_all, gpu_all = _kinds(_field(complete, "cat"))
    codes_all, names_all = _factorize(_field(complete, "name"))
    pids = _field(complete, "pid")
    args = _field(complete, "args")
    if None in args:
        args = [x if x is not None else EMPTY_ARGS for x in args]
    fields = dict(zip(_ARG_FIELDS, _fields(args, len(_ARG_FIELDS))))
    del args
    rank_all = event_ranks(to_int(fields["rank"]), pids)
    res, keep = kept_rows(kind_all, codes_all, names_all, rank_all)
    if odd is not None:
        res.odd = odd
    ts_f = _kept_field(complete, "ts", keep, np.float64, to_float)
    dur_f = _kept_field(complete, "dur", keep, np.float64, to_float)
    pid_i = _kept(pids, keep, np.int64, to_int)
    tid_i = _kept_field(complete, "tid", keep, np.int64, to_tid)
    del complete, pids
    kind = kind_all[keep]
    memcpy_rows = np.flatnonzero(keep)[kind == MEMCPY].tolist()
    res.shapes = _copy_op_shapes(np.flatnonzero(keep)[kind == CPU_OP].tolist(), fields)
    return assemble(res, Kept(
        kind=kind, on_gpu=gpu_all[keep], codes=codes_all[keep], names=names_all, ts=ts_f, dur=dur_f,
        pid=pid_i, tid=tid_i, ints={f: _kept(fields[f], keep, np.int64, to_int) for f in INT_ARGS if f != "rank"},
        rank=rank_all[keep],
        grid=_dim3(fields["grid"], len(keep))[keep],  # _dim3 is exact value by value: mask afterwards
        block=_dim3(fields["block"], len(keep))[keep],
        copy_kind=[k if isinstance(k, str) else "" for k in map(fields["kind"].__getitem__, memcpy_rows)]))


def _copy_op_shapes(rows: list[int], fields: Mapping[str, Sequence[Any]]) -> dict[int, str]:
    """The recorded shapes of the kept host copy ops, by External id (ops without one, or
    without shapes, are left out)."""
    out: dict[int, str] = {}
    for i in rows:
        text = shape_text(fields["input_dims"][i], fields["input_type"][i])
        ext = to_int([fields["external_id"][i]])[0]
        ext = ext if ext >= 0 else to_int([fields["external_id_legacy"][i]])[0]
        if text and ext >= 0:
            out[int(ext)] = text
    return out
