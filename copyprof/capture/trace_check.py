"""After a capture: does the trace hold the GPU work its graph launches ran? Written to run.json.

Why here and not only in ``report``: a capture that lost graph kernels (ROCm/ROCm#6102 and the
torch wheels that vendor the broken roctracer) should say so where it was made, before anyone
computes a census from it, and ``run.json`` is what a later reader opens first. The check is
the report's (analysis/health/completeness.py), run on every rank trace; it never fails the capture:
a trace it cannot read is recorded as ``unchecked`` with the reason.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from copyprof.analysis.health.completeness import check_completeness, is_rocm_trace
from copyprof.analysis.health.graph_launches import graph_launches
from copyprof.analysis.steps.segment import segment
from copyprof.errors import CopyprofError
from copyprof.reading import read_runs

_ORDER = ("lower-bound", "complete", "no-graph-launches", "no-gpu-work")


def check_capture(trace_dir: Path) -> dict[str, Any]:
    """run.json's ``completeness``: the worst status over the rank traces, each rank's record,
    and the first warning (``message``)."""
    try:
        traces = [t for t in read_runs([str(trace_dir)]) if t.meta.role == "rank"]
    except (CopyprofError, OSError, ValueError, MemoryError) as exc:
        return {"status": "unchecked", "error": str(exc)[:400]}
    ranks: dict[str, dict[str, Any]] = {}
    for t in traces:
        rank = str(t.meta.ranks[0] if t.meta.ranks else 0)
        steps = segment(t.events)
        if steps.device < 0:
            ranks[rank] = {"status": "no-gpu-work"}
            continue
        launches = graph_launches(t.events, steps)
        c = check_completeness(t.events, steps, launches, rocm=is_rocm_trace(t.meta.format, t.meta.flavour, launches))
        ranks[rank] = {"status": c.status, "graph_launches": c.graph_launches,
                       "launches_without_gpu_work": c.launches_without_gpu_work, "launches_short": c.launches_short,
                       "missing_gpu_ops": c.missing_gpu_ops, "message": c.message}
    if not ranks:
        return {"status": "unchecked", "error": "no rank trace to check"}
    status = min((r["status"] for r in ranks.values()), key=_ORDER.index)
    message = next((r["message"] for r in ranks.values() if r.get("message")), "")
    return {"status": status, "message": message, "ranks": ranks}
