"""Per-trace summary behind ``copyprof inspect``: what is in the file, copies first.

Pure function of a Trace; renderers turn the dict into a table, JSON or text.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from copyprof.events import BYTES_SOURCES, KINDS, Trace
from copyprof.taxonomy.copies import copy_class, resolve_bytes_at
from copyprof.taxonomy.devices import device_cus


def summarize(trace: Trace) -> dict[str, Any]:
    ev = trace.events
    meta = trace.meta
    cls = copy_class(ev)
    rows = np.flatnonzero((cls == "d2d").to_numpy())
    d2d = ev.iloc[rows].copy()  # only the copies get their bytes resolved: no copy of the whole table
    nbytes, src = resolve_bytes_at(ev, rows, cus=device_cus(meta.devices))
    d2d["bytes"], d2d["bytes_src"] = nbytes, pd.Categorical(src, categories=BYTES_SOURCES)
    elem = ev[(cls == "elementwise_copy").to_numpy()]
    counts = {k: int(meta.kind_counts.get(k, int((ev["kind"] == k).sum()))) for k in KINDS}
    return {
        "path": meta.path,
        "format": meta.format,
        "flavour": meta.flavour,
        "role": meta.role,
        "ranks": list(meta.ranks),
        "devices": meta.devices,
        "counts": counts,
        "d2d_copies": int(len(d2d)),
        "d2d_by_name": _count_by(d2d["name"]),
        "d2d_by_bytes": _bytes_table(d2d),
        "d2d_total_ms": float(d2d["dur_ns"].sum()) / 1e6,
        "elementwise_copies_by_name": _count_by(elem["name"]),
        "annotations": annotation_counts(ev),
        "graph_launches": int(meta.graph_launches),
        "span_ms": _span_ms(ev),
        "metadata": meta.metadata,
        "partial": meta.partial,
        "warnings": list(meta.warnings),
    }


def _count_by(col: pd.Series) -> dict[str, int]:
    vc = col.astype(str).value_counts()
    return {str(k): int(v) for k, v in vc.items()}


def _bytes_table(d2d: pd.DataFrame) -> list[dict[str, Any]]:
    if d2d.empty:
        return []
    g = d2d.groupby([d2d["bytes"], d2d["bytes_src"].astype(str)], observed=True)["dur_ns"]
    rows = [
        {"bytes": int(b), "bytes_src": str(src), "count": int(s.size), "median_us": float(s.median()) / 1e3}
        for (b, src), s in g
    ]
    return sorted(rows, key=lambda r: (-r["count"], r["bytes"]))


def annotation_counts(ev: pd.DataFrame) -> dict[str, int]:
    """Annotation names and how many ranges each has.

    A ``record_function`` range appears once on the CPU and again projected on the GPU
    (``gpu_user_annotation``); a name counts the larger of the two, not their sum.
    """
    ann = ev[ev["kind"] == "annotation"]
    if ann.empty:
        return {}
    by = ann.groupby([ann["name"].astype(str), ann["on_gpu"]]).size().unstack(fill_value=0)
    best = by.max(axis=1).sort_values(ascending=False)
    return {str(k): int(v) for k, v in best.items()}


def _span_ms(ev: pd.DataFrame) -> float:
    sub = ev[ev["on_gpu"]] if ev["on_gpu"].any() else ev
    if sub.empty:
        return 0.0
    start = sub["start_ns"].to_numpy(dtype=float)  # float: extreme ns values of a damaged file must not wrap
    return float((start + sub["dur_ns"].to_numpy(dtype=float)).max() - start.min()) / 1e6
