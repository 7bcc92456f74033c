"""After a capture: does the trace hold the GPU work its graph launches ran? Written to run.json.

Why here and not only in ``report``: a capture that lost graph kernels (ROCm/ROCm#6102 and the
torch wheels that vendor the broken roctracer) should say so where it was made, before anyone
computes a census from it, and ``run.json`` is what a later reader opens first. The check is
the report's: each rank trace goes through the analysis facade's ``analyze_rank`` (steps, graph
launches, analysis/health/completeness.py), so a capture and its report can never disagree. It
never fails the capture: a trace it cannot read is recorded as ``unchecked`` with the reason.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from copyprof.analysis.rank_figures import analyze_rank
from copyprof.errors import CopyprofError
from copyprof.reading import read_runs

_ORDER = ("lower-bound", "complete", "no-graph-launches", "no-gpu-work")


def check_capture(trace_dir: Path) -> dict[str, Any]:
    """run.json's ``completeness``: the worst status over the rank traces, each rank's record,
    and the first warning (``message``)."""
    try:
        analyses = [analyze_rank(t, None) for t in read_runs([str(trace_dir)]) if t.meta.role == "rank"]
    except (CopyprofError, OSError, ValueError, MemoryError) as exc:
        return {"status": "unchecked", "error": str(exc)[:400]}
    ranks: dict[str, dict[str, Any]] = {}
    for a in analyses:
        c = a.completeness  # None: the trace has no GPU work to check
        ranks[str(a.rank)] = {"status": "no-gpu-work"} if c is None else {
            "status": c.status, "graph_launches": c.graph_launches,
            "launches_without_gpu_work": c.launches_without_gpu_work, "launches_short": c.launches_short,
            "missing_gpu_ops": c.missing_gpu_ops, "message": c.message}
    if not ranks:
        return {"status": "unchecked", "error": "no rank trace to check"}
    status = min((r["status"] for r in ranks.values()), key=_ORDER.index)
    message = next((r["message"] for r in ranks.values() if r.get("message")), "")
    return {"status": status, "message": message, "ranks": ranks}
