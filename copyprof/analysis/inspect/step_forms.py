"""Copies per annotated step, by the form they take in the trace (``copyprof inspect --steps``).

Why: before counting copies by layer, a reader of a trace wants to see what each step holds as
the trace shows it — ``Memcpy DtoD`` records with their bytes, driver memcpy kernels (CUDA-graph
replay, bytes from the launch geometry), elementwise copy kernels, the runtime calls that issue
them and the host ``aten::copy_`` ops — counted per step. traces/README.md's tables of the
shipped captures are these counts; they come from copyprof's readers (the one event table),
so any format with step annotations gives them.

Steps are the annotation ranges whose name matches a pattern (default: vLLM's pure-decode
``execute_context_…_generation_…``; ``copies_`` for the copy micro-capture). Host rows belong
to the step whose CPU range holds their start; GPU rows follow the runtime call that launched
them (correlation id), so the work of a graph replay that runs after the CPU range closed still
counts in its step. A form whose count differs between steps of one name shows min/max and the
series.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from copyprof.columns import Columns, filled
from copyprof.events import Trace, name_array
from copyprof.taxonomy.copies import copy_class, is_graph_launch, resolve_bytes_at

DECODE_STEP = r"^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$"
COPIES_STEP = r"^copies_"


def default_pattern(path: str) -> str:
    """The step pattern for a trace: ``copies_`` ranges in a copy micro-capture's run directory."""
    return COPIES_STEP if re.search(r"(^|/)copies-[^/]*/", path) else DECODE_STEP


def copy_forms(events: Columns, op_shapes: dict[str, str] | None = None) -> np.ndarray:
    """Each row's form ("" when it is not a copy-related row); a host ``aten::copy_`` names the
    dims and dtypes it recorded, where the trace has them (``op_shapes``, by External id)."""
    kind = events["kind"].strings(None)
    names = name_array(events)
    cls = np.asarray(copy_class(events))
    out = filled(len(events), "")
    rows = np.flatnonzero((kind == "memcpy") | ((kind == "kernel") & (cls == "d2d")))
    nbytes, _ = resolve_bytes_at(events, rows)
    directions = events["copy_dir"].strings(np.nan)  # a missing direction (NaN) is printed "nan"
    for i, b in zip(rows.tolist(), nbytes.tolist()):
        size = str(b) if b >= 0 else "?"
        what = (directions[i] or names[i]) if kind[i] == "memcpy" else names[i]
        out[i] = f"{kind[i]} {what} {size}"
    out[(kind == "kernel") & (cls == "elementwise_copy")] = "kernel elementwise copy"
    runtime = kind == "runtime"
    copy_call = np.array([("Memcpy" in n or is_graph_launch(n)) for n in names[runtime]], dtype=bool)
    out[np.flatnonzero(runtime)[copy_call]] = [f"runtime {n}" for n in names[runtime][copy_call]]
    host = np.flatnonzero((kind == "cpu_op") & (names == "aten::copy_"))
    ext = events["external_id"]
    shapes = op_shapes or {}
    out[host] = [f"cpu aten::copy_ {shapes[str(int(e))]}" if str(int(e)) in shapes else "cpu aten::copy_"
                 for e in ext[host].tolist()]
    return out


def step_forms(trace: Trace, pattern: str | None = None) -> dict[str, Any]:
    """Per annotation name: its number of steps and, per copy form, the count in each step;
    the forms outside every step; the GPU rows of the trace."""
    ev = trace.table
    rx = re.compile(pattern or default_pattern(trace.meta.path))
    kind = ev["kind"].strings(None)
    names = name_array(ev)
    on_gpu = ev["on_gpu"]
    is_step = (kind == "annotation") & ~on_gpu & np.array([bool(rx.search(str(n))) for n in names], dtype=bool)
    step_rows = np.flatnonzero(is_step)
    step_rows = step_rows[np.argsort(ev["start_ns"][step_rows], kind="stable")]
    starts = ev["start_ns"][step_rows]
    ends = starts + ev["dur_ns"][step_rows]

    def step_of(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right") - 1
        inside = (i >= 0) & (t <= ends[np.clip(i, 0, None)]) if len(starts) else np.zeros(len(t), dtype=bool)
        return np.where(inside, i, -1)

    forms = copy_forms(ev, trace.meta.op_shapes)
    host = ~on_gpu
    corr = ev["correlation"]
    host_step = step_of(ev["start_ns"])
    launch = host & (kind == "runtime") & (corr >= 0)
    by_corr = dict(zip(corr[launch].tolist(), host_step[launch].tolist()))
    idx = np.where(on_gpu, [by_corr.get(c, -1) for c in corr.tolist()], host_step)
    counts: list[Counter[str]] = [Counter() for _ in range(len(step_rows))]
    outside: Counter[str] = Counter()
    for form, i in zip(forms[forms != ""].tolist(), idx[forms != ""].tolist()):
        (outside if i < 0 else counts[i])[form] += 1
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names[step_rows].tolist()):
        by_name[str(name)].append(i)
    annotations: dict[str, Any] = {}
    for name, idxs in by_name.items():
        per_form: dict[str, Any] = {}
        for f in sorted({f for i in idxs for f in counts[i]}, key=_form_order):
            series = [counts[i][f] for i in idxs]
            per_form[f] = series[0] if len(set(series)) == 1 else {"min": min(series), "max": max(series),
                                                                   "per_step": series}
        annotations[name] = {"steps": len(idxs), "copies_per_step": per_form}
    return {"pattern": rx.pattern, "annotations": annotations,
            "outside_steps": dict(sorted(outside.items(), key=lambda kv: _form_order(kv[0]))),
            "gpu_events": int((on_gpu & np.isin(kind, ("kernel", "memcpy", "memset"))).sum())}


def _form_order(form: str) -> tuple[str, int]:
    """Forms by name, then by size as a number (``memcpy DtoD 4608`` before ``… 14336``)."""
    head, _, size = form.rpartition(" ")
    return (head, int(size)) if size.isdigit() else (form, -1)
