"""Decode one chunk of Kineto events: the native scanner first, the Python path when it declines.

Why two paths: the Python path (kineto_columns.py: msgspec Structs, then numpy columns) costs
~3.3 s of CPU per GB of JSON, most of it building and reading back a Python object per event;
the native scanner (low_level/scan.c) reads the same fields straight into packed rows. It is an
optional C extension: a build without a compiler, or ``COPYPROF_NATIVE=0`` in the
environment, leaves the Python path, which gives the same tables.

The scanner accepts only the common, unambiguous shapes of a chunk and declines the rest
(escapes in the strings the reader keys on, duplicate keys, bools, malformed JSON, ...);
the Python path then decodes that chunk with its own tolerant rules and error reporting. Ids
and times in other shapes than plain numbers come back with their byte offsets, and their
columns are reconverted here by that path's own tolerant functions (_redo_irregular). Both feed :func:`kineto_chunk.assemble`, so everything after the decode is
shared code, with one exception: the scanner's common chunks (no such value in a kept row,
no rank marks) take its C twin of chunk.py's rules (low_level/kept.h, via _kept_columns),
~0.03 s of CPU per GB where those numpy passes cost ~0.2 s; the tests hold the twin to them.
"""
from __future__ import annotations

import os
from typing import Any

import msgspec
import numpy as np

from copyprof.grouping import distinct
from copyprof.readers.kineto.chunk import (
    CATMAP,
    CPU_OP,
    MEMCPY,
    ODD_FIELDS,
    ChunkResult,
    Kept,
    assemble,
    event_ranks,
    kept_rows,
    pid_rank_key,
    shape_text,
)
from copyprof.readers.kineto.columns import INT_ARGS, IntLike, TimeLike, decode_chunk, to_float, to_int, to_tid
from copyprof.taxonomy.copies import HOST_COPY_OPS, is_graph_launch

try:  # built by setup.py when a C compiler is there; optional
    from copyprof.readers.kineto.low_level import scanner as native_scanner  # type: ignore[attr-defined]  # C, from scan.c, only if built; no stub
except ImportError:  # pragma: no cover - depends on the build
    native_scanner = None

# One packed row and one side-table entry of low_level/scan.c (struct Row, struct Side);
# native_available() checks them against the C side's sizeof.
ROW = np.dtype({
    "names": ["cat", "name", "pid", "tid", "ts", "dur", "ints", "grid", "block", "kind_off", "kind_len"],
    "formats": ["<i4", "<i4", "<i8", "<i8", "<f8", "<f8", ("<i8", (len(INT_ARGS),)), ("<i8", (3,)), ("<i8", (3,)),
                "<i8", "<i8"],
    "offsets": [0, 4, 8, 16, 24, 32, 40, 40 + 8 * len(INT_ARGS), 64 + 8 * len(INT_ARGS), 88 + 8 * len(INT_ARGS),
                96 + 8 * len(INT_ARGS)],
    "itemsize": 104 + 8 * len(INT_ARGS),
})
SIDE = np.dtype({"names": ["row", "field", "len", "off"], "formats": ["<i8", "<i4", "<i4", "<i8"],
                 "offsets": [0, 8, 12, 16], "itemsize": 24})
SIDE_FIELDS = (*INT_ARGS, "pid", "tid", "ts", "dur", "input_dims", "input_type")
"""Side.field codes (A_*, S_PID, S_TID, S_TS, S_DUR, S_DIMS, S_TYPES). The last two are not
irregular values but the raw text of record_shapes' args, which only the copy ops need."""
# The Python path's field types (kineto_columns.EventArgs / Event) and tolerant conversions.
_ID_VALUE = msgspec.json.Decoder(IntLike)
_TIME_VALUE = msgspec.json.Decoder(TimeLike)


def native_available() -> bool:
    """Whether chunks go to the native scanner (built, matching layout, not switched off)."""
    return (native_scanner is not None and native_scanner.row_size() == (ROW.itemsize, SIDE.itemsize, len(ODD_FIELDS))
            and os.environ.get("COPYPROF_NATIVE", "1") != "0")


_NATIVE = native_available()  # decided once per process (workers inherit it through fork)


def scan_columns(data: bytes | memoryview, finish_in_c: bool = True) -> ChunkResult | str:
    """The chunk's columns from the native scanner, or its one-line reason for declining.
    ``finish_in_c``: the kept rows' columns from the scanner's twin of chunk.py's rules
    (low_level/kept.h) where it takes the chunk; False: always from those rules in numpy
    (tests compare the two)."""
    out = native_scanner.scan(data)
    if isinstance(out, str):
        return out
    facts = [CATMAP(c) for c in out[3]] + [(-1, False)]  # code -1 (no category) is the last entry
    res = _kept_columns(data, out, facts) if finish_in_c else None
    return res if res is not None else _assembled(data, out, facts)


# kept_columns' columns in its order (kept.h's C_* codes), and their types by item size.
FINISHED = ("kind_idx", "on_gpu", "device", "stream", "start_ns", "dur_ns", "correlation", "external_id", "bytes",
            "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "graph_id", "graph_node_id", "rank_key")
_BY_SIZE = {np.dtype(t).itemsize: np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)}


def _kept_columns(data: bytes | memoryview, scanned: tuple[Any, ...], facts: list[tuple[int, bool]]) -> ChunkResult | None:
    """The chunk from the scanner's own twin of chunk.py's rules (low_level/kept.h: the same
    columns, counts and names, in two passes over the rows instead of ~300 numpy calls), or
    None where the chunk needs the numpy assembly: an id or time of another shape than a plain
    number in a kept row, an args.rank, a string pid that names a rank."""
    _, buf, side, _, names, odd = scanned
    side_rows = np.frombuffer(side, dtype=SIDE) if side else None
    if side_rows is not None and _pid_names_a_rank(side_rows, data):
        return None
    host = bytes(map(HOST_COPY_OPS.__contains__, names))
    cats = facts[:-1]
    out = native_scanner.kept_columns(data, buf, side, bytes(k + 1 for k, _ in cats), bytes(g for _, g in cats),
                                      host, names)
    if out is None:
        return None
    counts, res_other, res_bad, (kept_names, runtime), (columns, sizes, codes, memcpy_rows, copy_kinds) = out
    res = ChunkResult()
    res.counts = np.frombuffer(counts, dtype=np.int64)
    res.rank_counts[-1] = res.counts  # as kept_rows gives a chunk without rank marks
    res.other, res.bad = res_other, res_bad
    res.odd = np.frombuffer(odd, dtype=np.int64).copy()
    res.names, res.name_codes = kept_names, np.frombuffer(codes, dtype=np.int32)
    res.graph_launches = sum(c for name, c in runtime if is_graph_launch(name))
    res.cols = {key: np.frombuffer(b, dtype=bool if key == "on_gpu" else _BY_SIZE[size])
                for key, b, size in zip(FINISHED, columns, sizes)}
    res.cols["copy_kind_arg"] = np.array(copy_kinds, dtype=object)
    res.cols["memcpy_rows"] = np.frombuffer(memcpy_rows, dtype=np.intp)
    if side_rows is not None:
        shapes = side_rows[(side_rows["field"] == _DIMS_FIELD) | (side_rows["field"] == _TYPES_FIELD)]
        if len(shapes):
            at = np.frombuffer(buf, dtype=ROW)[shapes["row"]]
            kind = np.array([k for k, _ in facts], dtype=np.int64)[at["cat"]]
            mine = (kind == CPU_OP) & np.frombuffer(host, dtype=bool)[at["name"]]  # the kept host copy ops
            res.shapes = _shapes(shapes[mine], at["ints"][mine, _EXT_FIELD], at["ints"][mine, _LEGACY_FIELD], data)
    return res


def _pid_names_a_rank(side: np.ndarray, data: bytes | memoryview) -> bool:
    """Whether a string pid of the chunk names a rank (chunk.event_ranks reads it)."""
    pids = side[side["field"] == _PID_FIELD]
    view = memoryview(data)
    for off, n in zip(pids["off"].tolist(), pids["len"].tolist()):
        pid = _ID_VALUE.decode(view[off:off + n])
        if type(pid) is str and pid_rank_key(pid) >= 0:
            return True
    return False


def _assembled(data: bytes | memoryview, scanned: tuple[Any, ...], facts: list[tuple[int, bool]]) -> ChunkResult:
    """The chunk from chunk.py's rules in numpy, on the scanner's packed rows: every chunk
    the scanner reads (the irregular values of kept rows reconverted by the Python path's
    own functions), where kept.h's twin takes only the common ones."""
    n, buf, side, _, names, odd = scanned
    rows = np.frombuffer(buf, dtype=ROW, count=n)
    kind_all = np.array([k for k, _ in facts], dtype=np.int64)[rows["cat"]]
    gpu_all = np.array([g for _, g in facts], dtype=bool)[rows["cat"]]
    side_rows = np.frombuffer(side, dtype=SIDE)
    rank_all = _ranks(rows, side_rows, data)
    res, keep = kept_rows(kind_all, rows["name"], names, rank_all)
    res.odd = np.frombuffer(odd, dtype=np.int64).copy()
    kept = rows[keep]
    kind = kind_all[keep]
    cols = {f: np.ascontiguousarray(kept["ints"][:, i]) for i, f in enumerate(INT_ARGS) if f != "rank"}
    cols.update(pid=kept["pid"], tid=kept["tid"], ts=kept["ts"], dur=kept["dur"])
    shapes = (side_rows["field"] == _DIMS_FIELD) | (side_rows["field"] == _TYPES_FIELD)
    _redo_irregular(cols, side_rows[(side_rows["field"] != _RANK_FIELD) & ~shapes], keep, data)
    if shapes.any():
        res.shapes = _copy_op_shapes(side_rows[shapes], keep, kind_all == CPU_OP, cols, data)
    return assemble(res, Kept(
        kind=kind, on_gpu=gpu_all[keep], codes=kept["name"], names=names, ts=cols.pop("ts"), dur=cols.pop("dur"),
        pid=cols.pop("pid"), tid=cols.pop("tid"), ints=cols,
        grid=kept["grid"], block=kept["block"], copy_kind=_copy_kinds(data, kept[kind == MEMCPY]), rank=rank_all[keep]))


_RANK_FIELD = INT_ARGS.index("rank")
_EXT_FIELD = INT_ARGS.index("external_id")
_LEGACY_FIELD = INT_ARGS.index("external_id_legacy")
_DIMS_FIELD = SIDE_FIELDS.index("input_dims")
_TYPES_FIELD = SIDE_FIELDS.index("input_type")
_ANY_VALUE = msgspec.json.Decoder()


def _copy_op_shapes(side: np.ndarray, keep: np.ndarray, cpu_op: np.ndarray, cols: dict[str, np.ndarray],
                    data: bytes | memoryview) -> dict[int, str]:
    """The recorded shapes of the kept host copy ops by External id, from the raw args text the
    scanner noted (as the Python path's ``columns._copy_op_shapes`` reads them)."""
    mine = side[keep[side["row"]] & cpu_op[side["row"]]]
    if not len(mine):
        return {}
    position = (np.cumsum(keep) - 1)[mine["row"]]
    return _shapes(mine, cols["external_id"][position], cols["external_id_legacy"][position], data)


def _shapes(mine: np.ndarray, ext: np.ndarray, legacy: np.ndarray, data: bytes | memoryview) -> dict[int, str]:
    """:func:`_copy_op_shapes` of side entries ``mine``, the kept host copy ops' shapes texts,
    with the External id and legacy external id of each entry's row."""
    view = memoryview(data)
    raw: dict[int, dict[int, Any]] = {}
    ids: dict[int, tuple[int, int]] = {}
    for row, field, off, n, e, e_legacy in zip(mine["row"].tolist(), mine["field"].tolist(), mine["off"].tolist(),
                                               mine["len"].tolist(), ext.tolist(), legacy.tolist()):
        raw.setdefault(row, {})[field] = _ANY_VALUE.decode(view[off:off + n])
        ids[row] = (e, e_legacy)
    out: dict[int, str] = {}
    for row, values in raw.items():
        text = shape_text(values.get(_DIMS_FIELD), values.get(_TYPES_FIELD))
        e, e_legacy = ids[row]
        e = e if e >= 0 else e_legacy
        if text and e >= 0:
            out[e] = text
    return out


_PID_FIELD = SIDE_FIELDS.index("pid")


def _ranks(rows: np.ndarray, side: np.ndarray, data: bytes | memoryview) -> np.ndarray:
    """Every complete event's rank key, as the Python path gives it (kineto_chunk.event_ranks):
    args.rank, with the side table's other shapes of it converted by that path's to_int, and
    the string pids' labels. Only merged multi-rank files have either."""
    rank_arg = np.ascontiguousarray(rows["ints"][:, _RANK_FIELD])
    odd = side[(side["field"] == _RANK_FIELD) | (side["field"] == _PID_FIELD)]
    if not len(odd):
        return np.where(rank_arg >= 0, rank_arg, -1)
    view = memoryview(data)
    pid_rows: list[int] = []
    pids: list[Any] = []
    ranks: list[Any] | None = None
    for at, field, off, n in zip(odd["row"].tolist(), odd["field"].tolist(), odd["off"].tolist(), odd["len"].tolist()):
        value = _ID_VALUE.decode(view[off:off + n])
        if field == _RANK_FIELD:
            ranks = rank_arg.tolist() if ranks is None else ranks
            ranks[at] = value
        else:
            pid_rows.append(at)
            pids.append(value)
    if ranks is not None:  # the whole column through that path's to_int, as it converts it
        rank_arg = to_int(ranks)
    return event_ranks(rank_arg, pids, at=pid_rows)


def _redo_irregular(cols: dict[str, np.ndarray], side: np.ndarray, keep: np.ndarray, data: bytes | memoryview) -> None:
    """Columns where a kept row held an id or time in another shape than a plain number
    (roctracer's "bytes": "9216" and "stream": "0x0", nulls, floats, huge integers) are
    converted again by the Python path's own tolerant function, from the kept values with
    those texts decoded as that path's msgspec types would decode them: the same column on
    any numpy and pandas, with no second copy of those rules here."""
    if not len(side):
        return
    hit = side[keep[side["row"]]]
    if not len(hit):
        return
    position = np.cumsum(keep) - 1  # row among the kept ones
    view = memoryview(data)
    for code in distinct(hit["field"]).tolist():
        name = SIDE_FIELDS[code]
        mine = hit[hit["field"] == code]
        decode = (_TIME_VALUE if name in ("ts", "dur") else _ID_VALUE).decode
        values: list[Any] = cols[name].tolist()
        for at, off, n in zip(position[mine["row"]].tolist(), mine["off"].tolist(), mine["len"].tolist()):
            values[at] = decode(view[off:off + n])
        convert = to_float if name in ("ts", "dur") else to_tid if name == "tid" else to_int
        cols[name] = convert(values)


def _copy_kinds(data: bytes | memoryview, memcpy: np.ndarray) -> list[str]:
    """args.kind of the memcpy rows (the scanner checked them: UTF-8, no escapes)."""
    view = memoryview(data)
    return [bytes(view[o:o + n]).decode() if o >= 0 else ""
            for o, n in zip(memcpy["kind_off"].tolist(), memcpy["kind_len"].tolist())]


def decode_columns(data: bytes | memoryview) -> ChunkResult:
    """Decode + columnise one chunk (the unit of work of the serial and parallel readers).

    Raises msgspec.DecodeError when the chunk is not JSON (from the Python path, whose
    messages and salvage rules the readers rely on)."""
    if _NATIVE:
        res = scan_columns(data)  # declines chunks with recorded shapes: only the Python path reads them
        if not isinstance(res, str):
            return res
    return decode_chunk(data)

