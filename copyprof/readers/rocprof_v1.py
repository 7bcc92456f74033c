"""Legacy rocprof (v1) ``results.csv`` -> the event table (kernels only).

Why a separate reader: older ROCm installs (and many published results) only have rocprof v1,
whose ``results.csv`` lists one row per kernel dispatch:
``"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr",...,
"DispatchNs","BeginNs","EndNs","CompleteNs"[,"DurationNs"]`` (+ counter columns). The columns
are built dynamically by rocprof's ``tblextr.py``, so they are looked up by name, never position.

* ``grd`` is the grid in work-items and ``wgr`` the workgroup size in work-items (both are
  totals over x*y*z); the table stores blocks, so ``grid_x = ceil(grd / wgr)``, ``block_x = wgr``
  and y/z = 1 (their split is not in the file), and ``meta.grid_unit`` says "work-items".
* Kernel names stay exactly as written (``"foo(int) [clone .kd]"``, ``__amd_rocclr_copyBuffer.kd``):
  classifying copies is the taxonomy module's job, and it needs the original spelling.
* The file has no API rows, so there is no correlation and no byte count (bytes stay -1).
* ``results.json`` from the same run is a Chrome trace; the Kineto reader handles it.

A file cut short (interrupted run, partial copy) keeps the rows before the cut and sets
``meta.partial``; an empty file or one without the needed columns is a CopyprofError.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from copyprof.errors import CopyprofError
from copyprof.events import Trace, TraceMeta, make_table
from copyprof.readers.files import DECOMPRESS_ERRORS, open_binary

_REQUIRED = ("KernelName", "BeginNs", "EndNs")
_INT_FIELDS = {"device": "gpu-id", "stream": "queue-id", "grd": "grd", "wgr": "wgr", "pid": "pid"}
# What reading the rows can raise: the csv module's errors and a damaged gzip stream's.
_READ_ERRORS: tuple[type[BaseException], ...] = (csv.Error, *DECOMPRESS_ERRORS)


def is_rocprof_v1_csv(head: bytes) -> bool:
    """True when the first line is a rocprof v1 kernel-trace header (``"Index","KernelName"``)."""
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].replace(b'"', b"").strip()
    cols = [c.strip() for c in first.split(b",")]
    # BeginNs is not required here: a file made with --timestamp off is still rocprof v1, and the
    # reader then explains what is missing instead of the CLI calling the format unknown.
    return cols[:2] == [b"Index", b"KernelName"]


def read_rocprof_v1_csv(path: str) -> list[Trace]:
    """Read a rocprof v1 ``results.csv`` (plain or gzip) into one kernel-only Trace."""
    with open_binary(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        lines = _LastLine(text)
        reader = csv.reader(lines)
        try:
            header = next(reader, None)
        except _READ_ERRORS as exc:
            raise CopyprofError(f"cannot read the CSV header ({exc})", path=path) from exc
        if not header or not any(h.strip() for h in header):
            raise CopyprofError("empty file: no rocprof results.csv header", path=path)
        col = {name.strip(): i for i, name in enumerate(header)}
        if "KernelName" in col and ("BeginNs" not in col or "EndNs" not in col):
            raise CopyprofError("no BeginNs/EndNs columns: rerun rocprof with --timestamp on", path=path)
        missing = [c for c in _REQUIRED if c not in col]
        if missing:
            raise CopyprofError(f"not a rocprof v1 results.csv: header lacks {', '.join(missing)}", path=path)
        return [_read_rows(reader, lines, col, len(header), path)]


class _LastLine:
    """Line iterator that remembers the last line, to tell a cut-off last row from a whole one."""

    def __init__(self, fh: io.TextIOWrapper) -> None:
        self.fh, self.last = fh, ""

    def __iter__(self) -> Iterator[str]:
        for line in self.fh:
            self.last = line
            yield line


def _read_rows(reader: Any, lines: _LastLine, col: dict[str, int], width: int, path: str) -> Trace:
    """The data rows after the header -> one kernel-only Trace (or a CopyprofError with no row)."""
    rows = _parse_rows(reader, col, width)
    warnings, stop = _ending_notes(rows, lines)
    if not rows.codes:
        raise CopyprofError(stop or ("no kernel rows (only a header)" if not rows.bad else "no readable kernel rows"),
                            path=path)
    a = {k: np.asarray(v, dtype=np.int64) for k, v in rows.ints.items()}
    n = len(rows.codes)
    table = make_table(np.asarray(rows.codes, dtype=np.int32), list(rows.names), _kernel_columns(a, n))
    pids = sorted(set(a["pid"][a["pid"] >= 0].tolist()))
    if len(pids) > 1:
        warnings.append(f"rows from {len(pids)} processes ({', '.join(map(str, pids[:8]))}) kept in one trace, rank 0")
    meta = TraceMeta(
        path=path, format="rocprof-v1", flavour="rocprofiler-v1", ranks=[0],
        metadata={"pids": pids, "columns": list(col)}, kind_counts={"kernel": n}, grid_unit="work-items",
        warnings=warnings, partial=f"read {n} kernel rows; {stop}" if stop else None)
    return Trace(meta, table)


@dataclass
class _Rows:
    """What the row loop collected: the kernel names' codes, the integer columns, and where it failed."""

    names: dict[str, int]  # kernel name -> code, in order of first appearance
    codes: list[int]
    ints: dict[str, list[int]]  # start_ns, end_ns and the _INT_FIELDS keys, one value per kept row
    bad: list[int]  # line numbers (1-based rows after the header) that did not parse
    stop: str | None  # why reading stopped before the end of the file, if it did
    row_no: int  # the last row reached


def _parse_rows(reader: Any, col: dict[str, int], width: int) -> _Rows:
    """Parse every data row into Python lists; a malformed row is skipped and its number kept,
    a CSV or decompression error ends the loop with the rows so far."""
    i_name, i_begin, i_end = (col[c] for c in _REQUIRED)
    extra = {key: col.get(name) for key, name in _INT_FIELDS.items()}
    names: dict[str, int] = {}
    codes: list[int] = []
    ints: dict[str, list[int]] = {k: [] for k in ("start_ns", "end_ns", *extra)}
    bad: list[int] = []
    stop: str | None = None
    row_no = 0
    try:
        for row_no, row in enumerate(reader, start=1):
            if not row:
                continue
            try:
                if len(row) < width:
                    raise ValueError("short row")
                begin, end = _i64(row[i_begin]), _i64(row[i_end])
                vals = [_int(row, extra[k]) for k in extra]
            except ValueError:
                bad.append(row_no)
                continue
            name = row[i_name]
            code = names.get(name)
            if code is None:
                code = names[name] = len(names)
            codes.append(code)
            ints["start_ns"].append(begin)
            ints["end_ns"].append(end)
            for k, v in zip(extra, vals):
                ints[k].append(v)
    except _READ_ERRORS as exc:  # NUL bytes, broken gzip stream
        stop = f"reading stopped at row {row_no + 1} ({type(exc).__name__}: {exc})"
    return _Rows(names, codes, ints, bad, stop, row_no)


def _ending_notes(rows: _Rows, lines: _LastLine) -> tuple[list[str], str | None]:
    """(warnings, stop note) about how the file ends and the rows skipped; a malformed last row
    without a newline is a cut, not a malformed row, and is dropped from ``rows.bad``."""
    bad, stop = rows.bad, rows.stop
    warnings: list[str] = []
    cut_last = bool(bad) and bad[-1] == rows.row_no and not lines.last.endswith(("\n", "\r"))
    if cut_last:
        bad.pop()
        stop = stop or f"the last row ({rows.row_no}) is cut off: the file ends mid-row"
    elif rows.codes and not lines.last.endswith(("\n", "\r")) and stop is None:
        # A row can be cut inside its last number and still parse; no newline says so.
        warnings.append("the file does not end with a newline: the last row may be cut short")
    if bad:
        warnings.append(f"skipped {len(bad)} malformed rows (first: data row {bad[0]})")
    return warnings, stop


def _kernel_columns(a: dict[str, np.ndarray], n: int) -> dict[str, Any]:
    """The event-table columns of ``n`` kernel rows; ``grd``/``wgr`` (work-items) become blocks."""
    wgr, grd = a["wgr"], a["grd"]
    ok = (wgr > 0) & (grd >= 0)
    blocks = np.where(ok, -(-grd // np.where(ok, wgr, 1)), -1)  # ceil: partial workgroups allowed
    ones = np.where(ok, 1, -1)
    return {
        "kind": ["kernel"] * n, "on_gpu": np.ones(n, dtype=bool), "device": a["device"], "stream": a["stream"],
        "start_ns": a["start_ns"], "dur_ns": np.maximum(a["end_ns"] - a["start_ns"], 0),
        "grid_x": blocks, "grid_y": ones, "grid_z": ones,
        "block_x": np.where(ok, wgr, -1), "block_y": ones, "block_z": ones,
    }


def _int(row: list[str], i: int | None) -> int:
    """An integer cell; a missing column or an empty cell is -1, anything else must parse."""
    if i is None or i >= len(row) or not row[i].strip():
        return -1
    return _i64(row[i])


_I64 = (-(2**63), 2**63 - 1)


def _i64(text: str) -> int:
    """An int64 cell; anything else (junk, or a number no int64 holds) raises ValueError."""
    value = int(text)
    if not _I64[0] <= value <= _I64[1]:
        raise ValueError(f"{text[:30]} does not fit in 64 bits")
    return value
