"""``copyprof annotate``: the census on the timeline, as a Chrome / Perfetto trace to open in a viewer.

What it holds (Kineto's JSON shape, so that Perfetto UI, chrome://tracing and copyprof's own
readers all open it): the counted decode steps' GPU ops as they were (kernels, memcpys,
memsets on their device and stream), every copy with ``copyprof.*`` args — its layer, layer
kind, site, role, bytes (and where the size came from) and issuing source — and three tracks
of the same device named in the viewer: ``copyprof: steps`` (one slice per step),
``copyprof: layers`` (one slice per decoder layer, from the layer map) and
``copyprof: copy sites`` (one slice per copy, named by its site). Times are relative to
``baseTimeNanoseconds`` (the first op), as Kineto writes them.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Any

import numpy as np

from copyprof import __version__
from copyprof.analysis.rank_figures import RankAnalysis
from copyprof.columns import Categorical, Columns
from copyprof.events import name_array
from copyprof.models.layout import kind_label
from copyprof.vocabulary import Role

STEP_TID, LAYER_TID, SITE_TID = 1_000_001, 1_000_002, 1_000_003
_CATS = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


def _us(ns: int | float, t0: int) -> float:
    return round((float(ns) - t0) / 1000.0, 3)


def annotated_events(ra: RankAnalysis) -> tuple[list[dict[str, Any]], int]:
    """Trace events of the counted steps (and the time origin in ns)."""
    ev = ra.trace.table
    census = ra.census
    steps = census.per_step["step"].tolist() if not census.per_step.empty else []
    mask = np.isin(ra.steps.step_of, steps) & ev["on_gpu"] & ev["kind"].isin(set(_CATS))
    rows = np.flatnonzero(mask)
    if not len(rows):
        return [], 0
    start = ev["start_ns"]
    t0 = int(start[rows].min())
    names = name_array(ev)
    cols = {c: ev.strings(c, None) if c == "kind" else ev[c]
            for c in ("kind", "device", "stream", "dur_ns", "correlation", "bytes", "grid_x",
                      "grid_y", "grid_z", "block_x", "block_y", "block_z")}
    copies = census.copies
    copy_at = {int(r): i for i, r in enumerate(copies["row"].tolist())}
    out: list[dict[str, Any]] = []
    device = int(cols["device"][rows[0]])
    for r in rows.tolist():
        args: dict[str, Any] = {"device": int(cols["device"][r]), "stream": int(cols["stream"][r]),
                                "correlation": int(cols["correlation"][r])}
        if cols["bytes"][r] >= 0:
            args["bytes"] = int(cols["bytes"][r])
        if cols["grid_x"][r] > 0:
            args["grid"] = [int(cols["grid_x"][r]), int(cols["grid_y"][r]), int(cols["grid_z"][r])]
            args["block"] = [int(cols["block_x"][r]), int(cols["block_y"][r]), int(cols["block_z"][r])]
        i = copy_at.get(r)
        if i is not None:
            args.update(_copy_args(copies, i))
        out.append({"ph": "X", "cat": _CATS[str(cols["kind"][r])], "name": str(names[r]), "pid": int(cols["device"][r]),
                    "tid": int(cols["stream"][r]), "ts": _us(start[r], t0), "dur": round(cols["dur_ns"][r] / 1000, 3),
                    "args": args})
    out += _tracks(ra, device, t0)
    return out, t0


def _copy_args(copies: Columns, i: int) -> dict[str, Any]:
    """The ``copyprof.*`` args of copy ``i`` (a row of the census' copies)."""
    def at(name: str) -> Any:  # None for a column the table lacks, as Series.get gave
        col = copies.get(name)
        if isinstance(col, Categorical):
            code = int(col.codes[i])
            return col.categories[code] if code >= 0 else None
        return None if col is None else col[i]

    out = {"copyprof.step": int(at("step")), "copyprof.site": str(at("site")), "copyprof.role": str(at("role")),
           "copyprof.layer": int(at("layer")), "copyprof.kind": str(at("kind")), "copyprof.bytes": int(at("bytes")),
           "copyprof.bytes_src": str(at("bytes_src")), "copyprof.source": at("source")}
    stack = at("stack")
    if stack:
        out["copyprof.stack"] = list(stack)
    return out


def _tracks(ra: RankAnalysis, device: int, t0: int) -> list[dict[str, Any]]:
    """The three named tracks: steps, layers, copy sites (annotations on the GPU timeline)."""
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": device, "tid": tid, "args": {"name": name}}
        for tid, name in ((STEP_TID, "copyprof: steps"), (LAYER_TID, "copyprof: layers"),
                          (SITE_TID, "copyprof: copy sites"))]
    table = ra.steps.table
    at_step = {s: i for i, s in enumerate(table["step"].tolist())}
    labels, starts, ends = table.strings("label", None), table["start_ns"], table["end_ns"]
    for step in ra.census.per_step["step"].tolist():
        i = at_step[step]
        out.append(_slice(str(labels[i]), STEP_TID, device, int(starts[i]), int(ends[i]), t0,
                          {"copyprof.step": int(step)}))
    layers = ra.census.layers
    if layers is not None and len(layers):
        for step, layer, kind, start, end in layers.rows("step", "layer", "kind", "start_ns", "end_ns"):
            out.append(_slice(f"layer {layer} ({kind_label(str(kind))})", LAYER_TID, device, int(start),
                              int(end), t0, {"copyprof.step": int(step), "copyprof.layer": int(layer),
                                             "copyprof.kind": str(kind)}))
    copies = ra.census.copies
    copy_rows = copies.rows("step", "layer", "site", "role", "bytes", "start_ns", "dur_ns", "source") \
        if len(copies) else iter(())
    for step, layer, site, role, nbytes, start, dur, source in copy_rows:
        label = str(site) if role != Role.POST else f"post-projection ({site})"
        out.append(_slice(label, SITE_TID, device, int(start), int(start) + int(dur), t0,
                          {"copyprof.step": int(step), "copyprof.layer": int(layer),
                           "copyprof.bytes": int(nbytes), "copyprof.source": source}))
    return out


def _slice(name: str, tid: int, pid: int, start: int, end: int, t0: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": pid, "tid": tid, "ts": _us(start, t0),
            "dur": round(max(end - start, 0) / 1000, 3), "args": args}


def write_annotated(path: str, ra: RankAnalysis, source_path: str, model: str | None) -> int:
    """Write the annotated trace to ``path`` (gzip when it ends in .gz); returns events written.
    The file is written beside itself and moved into place, so a failed write leaves nothing."""
    events, t0 = annotated_events(ra)
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": t0, "displayTimeUnit": "ms",
           "deviceProperties": [{"id": i, "name": str(d.get("name", ""))} for i, d in enumerate(ra.trace.meta.devices)],
           "copyprof": {"version": __version__, "annotates": os.path.abspath(source_path), "model": model,
                        "rank": ra.rank, "steps": int(len(ra.census.per_step))},
           "traceEvents": events}
    data = json.dumps(doc, separators=(",", ":")).encode()
    tmp = f"{path}.tmp-{os.getpid()}"
    with (gzip.open(tmp, "wb", compresslevel=6) if path.endswith(".gz") else open(tmp, "wb")) as fh:
        fh.write(data)
    os.replace(tmp, path)
    return len(events)
