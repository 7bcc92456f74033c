"""Per-trace summary behind ``copyprof inspect``: what is in the file, copies first.

Pure function of a Trace; renderers turn the dict into a table, JSON or text. It reads the
event table as ``Columns`` (numpy, no pandas). Each listing's order, ties included, is stated
where it is made: ``inspect``'s output (docs/contracts.md) is compared byte for byte.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from copyprof.columns import Categorical, Columns
from copyprof.grouping import descending_order
from copyprof.events import BYTES_SOURCES, KINDS, Trace
from copyprof.taxonomy.copies import copy_class, resolve_bytes_at
from copyprof.taxonomy.devices import device_cus


def summarize(trace: Trace) -> dict[str, Any]:
    ev = trace.table
    meta = trace.meta
    cls = np.asarray(copy_class(ev))
    rows = np.flatnonzero(cls == "d2d")  # only the copies get their bytes resolved
    nbytes, src = resolve_bytes_at(ev, rows, cus=device_cus(meta.devices))
    dur = ev["dur_ns"]
    elem = np.flatnonzero(cls == "elementwise_copy")
    counts = {k: int(meta.kind_counts.get(k, int((ev["kind"] == k).sum()))) for k in KINDS}
    return {
        "path": meta.path,
        "format": meta.format,
        "flavour": meta.flavour,
        "role": meta.role,
        "ranks": list(meta.ranks),
        "devices": meta.devices,
        "counts": counts,
        "d2d_copies": int(len(rows)),
        "d2d_by_name": _count_by(ev["name"].take(rows)),
        "d2d_by_bytes": _bytes_table(nbytes, src, dur[rows]),
        "d2d_total_ms": float(int(dur[rows].sum())) / 1e6,
        "elementwise_copies_by_name": _count_by(ev["name"].take(elem)),
        "annotations": annotation_counts(ev),
        "graph_launches": int(meta.graph_launches),
        "span_ms": _span_ms(ev),
        "metadata": meta.metadata,
        "partial": meta.partial,
        "warnings": list(meta.warnings),
    }


def _count_by(col: Categorical) -> dict[str, int]:
    """Rows per value, most first, ties in order of first appearance (a missing value is not counted)."""
    counts: dict[str, int] = {}
    for v in col.strings(None).tolist():
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    return {str(k): n for k, n in sorted(counts.items(), key=lambda kv: -kv[1])}


def _bytes_table(nbytes: np.ndarray, src: np.ndarray, dur: np.ndarray) -> list[dict[str, Any]]:
    """Per (bytes, bytes source): copies and their median duration, most copies first, then by
    bytes (then by source name). A source that is not one of BYTES_SOURCES is not counted."""
    groups: dict[tuple[int, str], list[int]] = {}
    known = set(BYTES_SOURCES)
    for b, s, d in zip(nbytes.tolist(), src.tolist(), dur.tolist()):
        if s in known:
            groups.setdefault((int(b), str(s)), []).append(d)
    rows = [{"bytes": b, "bytes_src": s, "count": len(ds), "median_us": float(np.median(np.asarray(ds))) / 1e3}
            for (b, s), ds in sorted(groups.items())]
    return sorted(rows, key=lambda r: (-r["count"], r["bytes"]))


def annotation_counts(ev: Columns) -> dict[str, int]:
    """Annotation names and how many ranges each has.

    A ``record_function`` range appears once on the CPU and again projected on the GPU
    (``gpu_user_annotation``); a name counts the larger of the two, not their sum. Most ranges
    first; names with as many ranges come in the order pandas' default descending sort
    (``sort_values(ascending=False)``) leaves the name-sorted counts in.
    """
    ann = np.flatnonzero(ev["kind"] == "annotation")
    if not len(ann):
        return {}
    per: dict[str, list[int]] = {}
    for name, on_gpu in zip(ev["name"].take(ann).strings(None).tolist(), ev["on_gpu"][ann].tolist()):
        if name is not None:
            per.setdefault(name, [0, 0])[1 if on_gpu else 0] += 1
    names = sorted(per)
    best = np.array([max(per[n]) for n in names], dtype=np.int64)
    return {names[i]: int(best[i]) for i in descending_order(best).tolist()}




def _span_ms(ev: Columns) -> float:
    on_gpu = ev["on_gpu"]
    sub = np.flatnonzero(on_gpu) if on_gpu.any() else np.arange(len(ev))
    if not len(sub):
        return 0.0
    start = ev["start_ns"][sub].astype(float)  # float: extreme ns values of a damaged file must not wrap
    return float((start + ev["dur_ns"][sub].astype(float)).max() - start.min()) / 1e6
