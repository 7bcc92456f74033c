"""Turn a decoded chunk of Kineto events into numpy columns, without per-event Python objects.

Why a separate module: this is the hot path. Each column is one list comprehension over the
chunk (tens of ns per event) converted to numpy at once; names are factorised per chunk so
only the distinct strings outlive the chunk. The function is pure, so chunks can be
columnised in worker processes.
"""
from __future__ import annotations

from itertools import compress
from typing import Any

import numpy as np
import pandas as pd

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


def to_float(values: list[Any]) -> np.ndarray:
    """Floats from a list of numbers / numeric strings / None (-> NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64, copy=True)


def to_int(values: list[Any], default: int = -1) -> np.ndarray:
    f = to_float(values)
    f[~np.isfinite(f)] = default
    return f.astype(np.int64)


def _tid(values: list[Any]) -> np.ndarray:
    """Thread/stream ids: ints, or strings like "stream 7" (legacy)."""
    out = to_float(values)
    bad = np.flatnonzero(np.isnan(out))
    for i in bad:
        v = values[i]
        if isinstance(v, str):
            digits = "".join(ch if ch.isdigit() else " " for ch in v).split()
            out[i] = float(digits[0]) if digits else -1
        else:
            out[i] = -1
    return out.astype(np.int64)


def _dim3(values: list[Any]) -> np.ndarray:
    out = np.full((len(values), 3), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if v is not None and len(v) == 3:
            out[i] = v
    return out


class ChunkResult:
    """Columns of one chunk plus the counts of everything it saw."""

    __slots__ = ("cols", "names", "name_codes", "counts", "other", "bad", "graph_launches")

    def __init__(self) -> None:
        self.cols: dict[str, np.ndarray] = {}
        self.names: list[str] = []
        self.name_codes = np.zeros(0, dtype=np.int32)
        self.counts = np.zeros(len(KINDS), dtype=np.int64)
        self.other = 0
        self.bad = 0
        self.graph_launches = 0


def columnize(events: list[Any], catmap: CategoryMap, empty_args: Any) -> ChunkResult:
    """Columns for the kept events of a chunk (see copyprof.events for the schema)."""
    res = ChunkResult()
    kc = [catmap(e.cat) if (e.ph == "X" or e.ph is None) else (-2, False) for e in events]
    kind_idx = np.fromiter((k for k, _ in kc), dtype=np.int64, count=len(kc))
    res.other = int((kind_idx == -1).sum())
    seen = kind_idx >= 0
    res.counts = np.bincount(kind_idx[seen], minlength=len(KINDS))
    keep = seen.copy()
    names_all = [e.name for e in events]
    cpu_ops = np.flatnonzero(kind_idx == _CPU_OP)
    for i in cpu_ops:
        if names_all[i] not in HOST_COPY_OPS:
            keep[i] = False
    kept = list(compress(events, keep))
    kind = kind_idx[keep]
    on_gpu = np.fromiter((g for (k, g), m in zip(kc, keep) if m), dtype=bool, count=len(kept))
    names = [n if isinstance(n, str) else ("" if n is None else str(n)) for n in compress(names_all, keep)]
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    res.names = [str(u) for u in uniques]
    res.name_codes = codes.astype(np.int32)
    rt = np.flatnonzero(kind == _RUNTIME)
    res.graph_launches = sum(1 for i in rt if is_graph_launch(names[i]))

    ts = to_float([e.ts for e in kept])
    dur = to_float([e.dur for e in kept])
    good = np.isfinite(ts)
    res.bad = int((~good).sum())
    dur[~np.isfinite(dur) | (dur < 0)] = 0.0
    args = [e.args or empty_args for e in kept]
    pid = [e.pid for e in kept]
    tid = _tid([e.tid for e in kept])
    pid_int = to_int(pid)
    dev = to_int([a.device for a in args])
    dev = np.where(dev >= 0, dev, to_int([a.from_device for a in args]))
    dev = np.where(dev >= 0, dev, pid_int)
    stream = to_int([a.stream for a in args])
    stream = np.where(on_gpu & (stream >= 0), stream, tid)
    ext = to_int([a.external_id if a.external_id is not None else a.external_id_legacy for a in args])
    nbytes = to_int([a.bytes if a.bytes is not None else a.size for a in args])
    grid = _dim3([a.grid for a in args])
    block = _dim3([a.block for a in args])
    cols = {
        "kind_idx": kind,
        "on_gpu": on_gpu,
        "device": np.where(on_gpu, dev, -1),
        "stream": stream,
        "start_ns": np.rint(np.where(good, ts, 0.0) * 1000.0).astype(np.int64),
        "dur_ns": np.rint(dur * 1000.0).astype(np.int64),
        "correlation": to_int([a.correlation for a in args]),
        "external_id": ext,
        "bytes": nbytes,
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "graph_id": to_int([a.graph_id for a in args]),
        "graph_node_id": to_int([a.graph_node_id for a in args]),
    }
    # roctracer memcpy ops carry the direction in args.kind ("DtoD"); names say it too.
    mk = np.flatnonzero(kind == _MEMCPY)
    cols["copy_kind_arg"] = np.array([args[i].kind if isinstance(args[i].kind, str) else "" for i in mk], dtype=object)
    cols["memcpy_rows"] = mk
    if res.bad:
        res.cols = {k: (v[good] if k not in ("copy_kind_arg", "memcpy_rows") else v) for k, v in cols.items()}
        res.name_codes = res.name_codes[good]
        # memcpy rows index the unfiltered chunk; recompute them after dropping bad rows.
        res.cols["memcpy_rows"] = np.flatnonzero(res.cols["kind_idx"] == _MEMCPY)
        res.cols["copy_kind_arg"] = cols["copy_kind_arg"][good[mk]]
    else:
        res.cols = cols
    return res
