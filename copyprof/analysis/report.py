"""The report facade: one run (a run directory or trace files) → the ``RunReport`` every renderer shows.

Stateless analyzers (steps → layer map → census → estimate) run per rank; the headline comes
from one rank (rank 0 unless asked), and per-rank counts are compared so disagreement is
said aloud. The result is typed (analysis/results.py); its JSON form is the ``runs[i]``
object of the ``report --format json`` contract (README).
"""
from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import msgspec

from copyprof.analysis.cost.estimate import copy_speed, estimate, graph_node_match
from copyprof.analysis.aside import Aside
from copyprof.analysis.census.count import Census
from copyprof.analysis.rank_figures import (
    RankAnalysis,
    analyze_rank,
    check_health,
    host_by_source,
    per_step_medians,
    rank_agreement,
    step_series,
    timeline,
)
from copyprof.analysis.cost.candidates import copy_candidates, kernel_candidates
from copyprof.analysis.rank_pool import Meanwhile, analyze_ranks
from copyprof.analysis.ab.client_metrics import load_tpots
from copyprof.analysis.ab.replica_timing import load_timing, timing_summary
from copyprof.analysis.results import BySource, Candidate, Completeness, Layout, RunReport, SourceEntry, StepsInfo
from copyprof.analysis.setup import run_setup
from copyprof.analysis.sources.across_captures import apply_sources, by_source, source_entries
from copyprof.analysis.steps.segment import rank_warnings, step_warnings
from copyprof.errors import CopyprofError
from copyprof.events import Trace
from copyprof.models import ModelLayout
from copyprof.rundir.record import RUN_JSON, RunRecord, given, load_run_record
from copyprof.taxonomy.devices import device_label, peak_gbps
from copyprof.vocabulary import CompletenessStatus

__all__ = ["RankAnalysis", "analyze_rank", "analyze_run"]


def analyze_run(traces: list[Trace], path: str, layout: ModelLayout | None, *, rank: int | None = None,
                all_steps: bool = False, sources: list[SourceEntry] | None = None,
                sources_origin: str = "", jobs: int = 1, meanwhile: Meanwhile | None = None) -> RunReport:
    """The run's report. ``sources``: an eager capture's copy sources (its ``source_entries``)
    to carry onto this run's copies that have none (a graph replay), from ``sources_origin``.
    ``jobs``: processes the ranks are analysed in (analysis/rank_pool.py, which says when it
    forks and what ``meanwhile`` is for)."""
    rank_traces = _countable(traces, path)
    analyses = sorted(analyze_ranks(rank_traces, layout, all_steps, jobs=jobs, meanwhile=meanwhile, health=False),
                      key=lambda a: a.rank)
    ranks = sorted({a.rank for a in analyses})
    head = _headline(analyses, ranks, rank, path)
    head_rank = head.rank
    meta = head.trace.meta
    graph = meta.graph_launches > 0
    match = apply_sources(head.census.copies, sources, sources_origin) if sources is not None else None
    peak = peak_gbps(meta.devices)
    figures = Aside(functools.partial(_copy_figures, head, graph), fork=jobs > 1,
                    in_child=functools.partial(_release_op_arrays, head.census))
    for a in analyses:
        if a.health_due:
            check_health(a, all_steps)
    kernels = _kernel_candidates_then_release(head, graph)
    sites = copy_speed(head.census, peak)  # here: the child's share and this one's take about as long
    # What needs no copy figures is worked out before waiting for them.
    per_step, estimates = per_step_medians(head), estimate(head.census) if layout is not None else []
    by_rank, series, steps_timeline = {str(a.rank): per_step_medians(a) for a in analyses}, step_series(head), timeline(head)
    copy_figures = figures.result()
    decode_n = len(head.census.per_step) if not head.census.per_step.empty else len(head.steps.decode)
    report = RunReport(
        path=path, format=meta.format, flavour=meta.flavour, ranks=ranks,
        layout=Layout(**layout.to_json()) if layout is not None else None,
        steps=StepsInfo(decode=int(decode_n), excluded=int(len(head.steps.table) - decode_n), rule=head.steps.rule),
        per_step=per_step,
        estimate=estimates,
        headline_rank=head_rank, device=device_label(meta.devices), peak_gbps=peak,
        sites=sites,
        attribution=head.census.attribution,
        # launch-bound step periods: how to read them (the A/B takes its measure elsewhere), not a defect of the data
        notes=head.steps.notes + head.census.notes + rank_warnings(
            [(a.rank, [a.overhead.message] if a.overhead and a.overhead.message else []) for a in analyses]),
        rank_agreement=rank_agreement(analyses),
        by_rank=by_rank,
        warnings=_warnings(analyses, rank_traces),
        metadata=_run_metadata(path, meta.metadata),
        step_series=series,
        timeline=steps_timeline,
        by_source=copy_figures.by_source,
        source_entries=copy_figures.source_entries, source_match=match,
        completeness=_run_completeness(head, analyses), launch_overhead=head.overhead,
        graph_nodes=graph_node_match(head.census.copies),
    )
    report.candidates = copy_figures.candidates + kernels
    if decode_n == 0 and len(head.steps.table):  # steps exist, none pure decode: --all-steps can count them
        report.notes.append("no pure-decode steps found: figures are empty (--all-steps counts the "
                            f"{len(head.steps.table)} other step(s))")
    _add_run_files(report, path)
    _add_setup(report, meta.graph_launches, layout)
    return report


def _add_setup(report: RunReport, graph_launches: int, layout: ModelLayout | None) -> None:
    report.setup = run_setup(report.metadata, device=report.device, tokens=report.per_step.tokens,
                             graph_launches=graph_launches, layout_name=layout.name if layout else None,
                             dtype_bytes=layout.dtype_bytes if layout else None)


class CopyFigures(NamedTuple):
    """What the headline rank's copies and per-step table alone give (its census' per-op arrays
    and its health are not read): the part of the report a forked child can work out."""

    by_source: list[BySource]
    source_entries: list[SourceEntry]
    candidates: list[Candidate]


def _copy_figures(head: RankAnalysis, graph: bool) -> CopyFigures:
    copies = head.census.copies
    return CopyFigures(
        by_source=by_source(copies) if head.steps.device >= 0 else host_by_source(head),
        source_entries=source_entries(copies),
        candidates=copy_candidates(copies, head.census.per_step, graph=graph),
    )


def _release_op_arrays(census: Census) -> None:
    """The census' per-op arrays (4 bytes per GPU op), which the copies' figures never read."""
    census.op_rows = census.op_steps = census.op_first = None


def _headline(analyses: list[RankAnalysis], ranks: list[int], rank: int | None, path: str) -> RankAnalysis:
    """The rank the report's figures come from: ``rank``, else the first."""
    head_rank = rank if rank is not None else ranks[0]
    heads = [a for a in analyses if a.rank == head_rank]
    if not heads:
        raise CopyprofError(f"rank {head_rank} is not in this run (ranks: {ranks})", path=path)
    return heads[0]


def _kernel_candidates_then_release(head: RankAnalysis, graph: bool) -> list[Candidate]:
    """The elementwise copy kernels' candidates, the last reader of the census' per-op arrays
    (the counted ops' positions, 4 bytes per GPU op), which are let go here: the copies'
    groupings that follow are where the analysis' memory peaks."""
    census = head.census
    kernels = kernel_candidates(head.trace.table, census.op_rows, census.op_first, census.op_steps,
                                census.per_step, graph=graph)
    _release_op_arrays(census)
    return kernels


def _countable(traces: list[Trace], path: str) -> list[Trace]:
    """The rank traces, each with something to count: a cut file is partly read, never a CPU-only
    trace, and a cut that left no GPU event is an error naming the file (and the failed capture)."""
    rank_traces = [t for t in traces if t.meta.role == "rank"]
    if not rank_traces:
        raise CopyprofError("no per-rank trace found (only the vLLM API-process trace?)", path=path)
    for t in rank_traces:
        if t.meta.partial and not t.table["on_gpu"].any():
            status = _failed_status(path)
            failed = f"; the capture did not complete ({status[:200]})" if status else ""
            raise CopyprofError(f"partly read ({t.meta.partial}), and the part read holds no GPU event: nothing to "
                                f"count{failed}", path=t.meta.path)
    return rank_traces


def _run_record(path: str) -> RunRecord | None:
    """run.json where the path is a copyprof run directory with a readable one (its problems are
    the run directory's own matter: the traces still read)."""
    if not os.path.isfile(os.path.join(path, RUN_JSON)):
        return None
    try:
        return load_run_record(path)
    except CopyprofError:
        return None


def _incomplete(record: RunRecord | None) -> str | None:
    """The record's status where the capture did not complete."""
    status = record.status if record is not None else None
    return status if isinstance(status, str) and status != "complete" else None


def _failed_status(path: str) -> str | None:
    """run.json's status where the run is a copyprof run directory that did not complete."""
    return _incomplete(_run_record(path))


def _warnings(analyses: list[RankAnalysis], rank_traces: list[Trace]) -> list[str]:
    """Each rank's completeness warning, each export's warning once, every cut file, the steps' warnings."""
    return (rank_warnings([(a.rank, [a.completeness.message] if a.completeness and a.completeness.message else [])
                           for a in analyses])
            + list(dict.fromkeys(w for t in rank_traces for w in t.meta.warnings))  # one export's warning, once
            + [f"{t.meta.path}: partly read: {t.meta.partial}" for t in rank_traces if t.meta.partial]
            + step_warnings([(a.rank, a.steps) for a in analyses]))


def _add_run_files(report: RunReport, path: str) -> None:
    """What a run directory holds besides its traces: a failed capture's status, the replica's
    timing, the client's TPOT per request."""
    record = _run_record(path) if os.path.isdir(path) else None
    status = _incomplete(record)
    if status:  # a crashed or interrupted capture: say so first
        report.warnings.insert(0, f"run.json: this capture did not complete ({status[:300]})")
    window = given(record.window) if record is not None else None
    report.warnings.extend(f"run.json: {w}" for w in (window.stall_warnings() if window is not None else []))
    timing = load_timing(path)
    if timing is not None:
        report.timing = timing_summary(timing)
        report.timing_blocks = {arm: [float(x) for x in v] for arm, v in timing["_arms"].items()}
        report.timing_arm = timing.get("_arm")
    tpots = load_tpots(path)
    if tpots is not None:
        report.tpot_ms = [float(x) for x in tpots]


def _run_completeness(head: RankAnalysis, analyses: list[RankAnalysis]) -> Completeness | None:
    """The headline rank's record; a run whose other ranks lost work is a lower bound too."""
    record = head.completeness
    if record is None or record.status == CompletenessStatus.LOWER_BOUND:
        return record
    lost = [(a.rank, a.completeness) for a in analyses
            if a.completeness is not None and a.completeness.status == CompletenessStatus.LOWER_BOUND]
    if not lost:
        return record
    rank, first = lost[0]
    return msgspec.structs.replace(first, checks=[f"rank {rank}: {c}" for c in first.checks])


def _run_metadata(path: str, trace_meta: dict[str, Any]) -> dict[str, Any]:
    """run.json (when the run is a copyprof run directory) merged over the trace's metadata.

    The run record is kept as JSON (``record_json``), so that a cached report holds it as written."""
    from copyprof.rundir.record import record_json

    out = {k: v for k, v in trace_meta.items() if isinstance(v, (str, int, float, bool)) or k == "distributedInfo"}
    record: RunRecord | None = None
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_JSON)):
        try:
            record = load_run_record(path)
            out["run"] = record_json(record)
        except CopyprofError as exc:
            out["run_json_error"] = str(exc)
    log = os.path.join(path, "server.log") if os.path.isdir(path) else None
    if log and os.path.isfile(log) and not (record is not None and isinstance(record.vllm_engine, dict)):
        from copyprof.capture.vllm.server_log import engine_facts

        out["vllm_engine"] = engine_facts(log)
    return out
