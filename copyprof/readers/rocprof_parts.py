"""Event-table assembly shared by the rocprofv3 CSV, rocprofv3 JSON and rocpd readers.

Each reader turns its domains (kernels, memory copies, API calls, markers) into *parts* —
full-length columns with the table's defaults filled — and :func:`assemble` concatenates them,
interning names once. One module, so the three readers agree on every convention: copy
directions, HSA grids in work-items turned into blocks, negative durations clipped and counted.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from copyprof.columns import load_pandas
from copyprof.events import BYTES_SOURCES, COLUMNS, KINDS, Trace, TraceMeta, empty_table, make_table

load_pandas()  # the string storage this command asked for (columns.prefer_python_strings)

_COPY_DIRS = {"HOST_TO_HOST": "HtoH", "HOST_TO_DEVICE": "HtoD",
              "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}


def copy_dir_of(direction: str) -> str:
    """``MEMORY_COPY_DEVICE_TO_DEVICE`` -> ``DtoD`` ("" for NONE / unknown spellings)."""
    return _COPY_DIRS.get(direction.strip().upper().removeprefix("MEMORY_COPY_"), "")


def memcpy_name(direction: str) -> str:
    d = copy_dir_of(direction)
    return f"Memcpy {d}" if d else f"Memcpy {direction.strip() or 'unknown'}"


def grid_blocks(grid: np.ndarray, wg: np.ndarray) -> np.ndarray:
    """HSA grid (work-items) -> blocks, rounded up; -1 where either size is unknown."""
    g, w = np.asarray(grid, np.int64), np.asarray(wg, np.int64)
    out = np.full(len(g), -1, np.int64)
    ok = (g >= 0) & (w > 0)
    out[ok] = -(-g[ok] // w[ok])
    return out


def part(kind: str | np.ndarray, names: Any, start: np.ndarray, end: np.ndarray,
         **cols: Any) -> dict[str, Any]:
    """One domain's rows as full-length columns (defaults filled), ready for ``assemble``."""
    n = len(start)
    start = np.asarray(start, np.int64)
    out: dict[str, Any] = {"name": np.asarray(names, dtype=object), "start_ns": start,
                           "dur_ns": np.maximum(np.asarray(end, np.int64) - start, 0),
                           "negative_dur": int((np.asarray(end, np.int64) < start).sum())}
    out["kind"] = kind  # string columns stay scalars when uniform: cheap categorical codes later
    for c in COLUMNS:
        if c in ("kind", "name", "start_ns", "dur_ns"):
            continue
        v = cols.get(c)
        if v is None:
            v = {"on_gpu": False, "bytes_src": "none", "copy_dir": "", "rank": 0}.get(c, -1)
        out[c] = np.full(n, v) if np.isscalar(v) and not isinstance(v, str) else v
    if "bytes" in cols:
        out["bytes_src"] = np.where(np.asarray(out["bytes"], np.int64) >= 0, "event", "none").astype(object)
    return out


def assemble(parts: list[dict[str, Any]]) -> pd.DataFrame:
    """Concatenate domain parts into the event table; names interned once via factorize."""
    parts = [p for p in parts if len(p["start_ns"])]
    if not parts:
        return empty_table().to_pandas()
    names = np.concatenate([p["name"] for p in parts])
    codes, uniques = pd.factorize(names)
    if (codes < 0).any():  # a missing name: give it the empty string
        codes, uniques = pd.factorize(np.where(codes < 0, "", names).astype(object))
    strings = {"kind": KINDS, "bytes_src": BYTES_SOURCES, "copy_dir": None}
    cols: dict[str, Any] = {c: _categorical(parts, c, strings[c]) for c in strings}
    cols.update({c: np.concatenate([np.asarray(p[c]) for p in parts])
                 for c in COLUMNS if c != "name" and c not in strings})
    return make_table(codes.astype(np.int32), [str(u) for u in uniques], cols).to_pandas()


def _categorical(parts: list[dict[str, Any]], col: str, categories: tuple[str, ...] | None) -> pd.Categorical:
    """One string column as a Categorical, built from per-part scalars or arrays without
    hashing a million identical strings."""
    values = [p[col] for p in parts]
    if categories is None:
        seen: set[str] = set()
        for v in values:
            seen |= {v} if isinstance(v, str) else set(pd.unique(np.asarray(v, dtype=object)))
        categories = tuple(sorted(seen))
    index = {c: i for i, c in enumerate(categories)}
    codes = [np.full(len(p["start_ns"]), index[v], np.int16) if isinstance(v, str)
             else pd.Categorical(np.asarray(v, dtype=object), categories=categories).codes.astype(np.int16)
             for p, v in zip(parts, values)]
    return pd.Categorical.from_codes(np.concatenate(codes), categories=list(categories))


def finish_meta(meta: TraceMeta, events: pd.DataFrame, parts: list[dict[str, Any]]) -> Trace:
    """Fill kind counts, graph launches and the negative-duration warning; wrap up a Trace."""
    meta.kind_counts = {k: int(v) for k, v in events["kind"].value_counts().items() if v}
    rt = events["kind"] == "runtime"
    meta.graph_launches = int(events.loc[rt, "name"].astype(str).str.startswith("hipGraphLaunch").sum())
    neg = sum(p.get("negative_dur", 0) for p in parts)
    if neg:
        meta.warnings.append(f"{neg} events end before they start; their duration was set to 0")
    meta.grid_unit = "work-items"
    return Trace(meta, events)
