"""The report as tidy rows — ``(section, name, arm, value, unit)``, one per figure — for ``--format csv``.

Plain values a spreadsheet reads: numbers unformatted (no thousands separators, no "%" signs,
full precision), None as an empty cell, text as text. The A/B (estimates, every measurement
with its interval, resolution and verdict) is in it too, under section ``ab``.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.results import RunReport
from copyprof.vocabulary import CandidateForm

Row = tuple[str, str, str, Any, str]


def _v(x: Any) -> Any:
    """None as an empty cell, booleans as true/false (what spreadsheets and JSON both read)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    return "" if x is None else x


def _run_rows(run: RunReport, arm: str, by_source: bool) -> Iterator[Row]:
    s = run.setup
    for key in ("engine", "model", "tp", "world_size", "concurrency", "tokens_per_step", "graph_mode", "device",
                "dtype_bytes", "vllm_version", "vllm_commit", "torch_version", "cuda_runtime", "hip_runtime",
                "aiter_version", "profiler", "captured", "command", "arm", "copyprof_version", "model_runner",
                "compilation", "compiled_by", "cudagraph_mode"):
        if getattr(s, key) is not None:
            yield "setup", key, arm, getattr(s, key), ""
    yield "setup", "path", arm, run.path, ""
    yield "steps", "decode", arm, run.steps.decode, "steps"
    yield "steps", "excluded", arm, run.steps.excluded, "steps"
    yield "steps", "rule", arm, run.steps.rule, ""
    if not run.steps.decode:  # a median over no steps is no figure: the cells stay empty, never 0
        yield from ((section, name, arm, "", unit) for section, name, _, _, unit in _per_step_rows(run, arm))
    else:
        yield from _per_step_rows(run, arm)
    yield from _site_rows(run, arm, by_source)


def _per_step_rows(run: RunReport, arm: str) -> Iterator[Row]:
    ps = run.per_step
    yield "per_step", "tokens", arm, _v(ps.tokens), "tokens"
    yield "per_step", "period", arm, _v(ps.period_ms), "ms"
    yield "per_step", "gpu_span", arm, _v(ps.gpu_span_ms), "ms"
    yield "per_step", "gpu_busy", arm, _v(ps.gpu_busy_ms), "ms"
    yield "per_step", "gpu_replay_span", arm, _v(ps.gpu_replay_span_ms), "ms"
    yield "per_step", "gpu_busy_fraction", arm, _v(ps.gpu_busy_fraction), "fraction"
    yield "per_step", "copies", arm, ps.copies, "copies"
    for kind, n in ps.post_proj.items():
        yield "per_step", f"post_projection.{kind}", arm, n, "copies"
        yield "per_step", f"post_projection_time.{kind}", arm, _v(ps.post_proj_ms.get(kind)), "ms"
    yield "per_step", "other", arm, ps.other, "copies"
    yield "per_step", "other_time", arm, _v(ps.other_ms), "ms"
    if ps.host_copies is not None:
        yield "per_step", "host_copy_ops", arm, ps.host_copies, "ops"


def _site_rows(run: RunReport, arm: str, by_source: bool) -> Iterator[Row]:
    for site in run.sites:
        name = f"{site.site}@{site.bytes}B" + (f"@{site.source}" if site.source else "")
        yield "site", f"{name}.per_step", arm, site.per_step, "copies"
        yield "site", f"{name}.median", arm, site.median_us, "us"
        yield "site", f"{name}.time", arm, site.ms_per_step, "ms"
        yield "site", f"{name}.achieved_bandwidth", arm, _v(site.achieved_gbps), "GB/s"
        yield "site", f"{name}.bytes_source", arm, site.bytes_src, ""
        if site.shape:
            yield "site", f"{name}.shape", arm, site.shape, ""
    for e in run.estimate:
        yield "estimate", f"{e.scope}.removed", arm, e.removed_per_step, "copies"
        yield "estimate", f"{e.scope}.removable", arm, e.removable_ms, "ms"
        yield "estimate", f"{e.scope}.removable_p10", arm, _v(e.removable_p10_ms), "ms"
        yield "estimate", f"{e.scope}.removable_p90", arm, _v(e.removable_p90_ms), "ms"
        yield "estimate", f"{e.scope}.removable_with_gap", arm, e.removable_with_gap_ms, "ms"
        yield "estimate", f"{e.scope}.share_of_step", arm, _v(e.removable_pct), "percent"
    for c in run.candidates:
        name = f"{c.role}@{c.source or c.producer}@{'/'.join(str(b) for b in c.bytes)}B"
        yield "candidate", f"{name}.per_step", arm, c.per_step, "copies" if c.form == CandidateForm.COPY else "kernels"
        yield "candidate", f"{name}.removable", arm, _v(c.removable_ms), "ms"
        yield "candidate", f"{name}.removable_with_gap", arm, _v(c.removable_with_gap_ms), "ms"
        yield "candidate", f"{name}.share_of_step", arm, _v(c.share_pct), "percent"
        yield "candidate", f"{name}.steps_needed", arm, _v(c.steps_needed), "steps"
        yield "candidate", f"{name}.layers", arm, " ".join(map(str, c.layers)), "layers"
    for b in run.by_source if by_source else []:
        yield "source", f"{b.source or '(none)'}.per_step", arm, b.per_step, "copies"
        yield "source", f"{b.source or '(none)'}.time", arm, b.ms_per_step, "ms"
    yield "attribution", "status", arm, run.attribution.status, ""
    yield "attribution", "message", arm, run.attribution.message, ""
    yield from _trace_health_rows(run, arm)
    for w in run.warnings:
        yield "warning", "warning", arm, w, ""
    for n in run.notes:
        yield "note", "note", arm, n, ""


def _trace_health_rows(run: RunReport, arm: str) -> Iterator[Row]:
    """Completeness under graph launches, launch overhead and graph-node identity."""
    c = run.completeness
    if c is not None:
        yield "completeness", "status", arm, c.status, ""
        yield "completeness", "graph_launches", arm, c.graph_launches, "launches"
        yield "completeness", "launches_without_gpu_work", arm, c.launches_without_gpu_work, "launches"
        yield "completeness", "launches_short", arm, c.launches_short, "launches"
        yield "completeness", "gpu_ops_per_launch", arm, _v(c.gpu_ops_per_launch), "ops"
        yield "completeness", "missing_gpu_ops", arm, c.missing_gpu_ops, "ops"
        yield "completeness", "steps_flagged", arm, c.steps_flagged, "steps"
        yield "completeness", "counts_are_lower_bound", arm, _v(run.lower_bound), ""
    o = run.launch_overhead
    if o is not None:
        yield "launch_overhead", "launches_per_step", arm, _v(o.launches_per_step), "launches"
        yield "launch_overhead", "call_median", arm, _v(o.call_median_ms), "ms"
        yield "launch_overhead", "call_p90", arm, _v(o.call_p90_ms), "ms"
        yield "launch_overhead", "call_max", arm, _v(o.call_max_ms), "ms"
        yield "launch_overhead", "per_step", arm, _v(o.per_step_ms), "ms"
        yield "launch_overhead", "gpu_idle_in_launch", arm, _v(o.gpu_idle_in_launch_ms), "ms"
        yield "launch_overhead", "share_of_step", arm, _v(None if o.share_of_step is None else 100 * o.share_of_step), \
            "percent"
        yield "launch_overhead", "gpu_busy", arm, _v(None if o.gpu_busy_share is None else 100 * o.gpu_busy_share), \
            "percent"
        yield "launch_overhead", "launch_bound", arm, _v(o.launch_bound), ""
    g = run.graph_nodes
    if g is not None:
        yield "graph_nodes", "copies_with_node", arm, g.with_node_per_step, "copies"
        yield "graph_nodes", "stable_sites", arm, g.stable_sites, "sites"
        yield "graph_nodes", "sites", arm, g.sites, "sites"


def _ab_rows(cmp: Comparison) -> Iterator[Row]:
    yield "ab", "comparable", "", _v(cmp.comparable), ""
    for m in cmp.mismatch:
        yield "ab", "mismatch", "", m, ""
    yield "ab", "scope", "", _v(cmp.scope), ""
    yield "ab", "scope_text", "", cmp.scope_text, ""
    yield "ab", "estimate.kernel", "", cmp.estimate_ms.kernel, "ms"
    yield "ab", "estimate.kernel_plus_gap", "", cmp.estimate_ms.kernel_plus_gap, "ms"
    for measure in cmp.measures:
        key = measure.name.replace(" ", "_")
        yield "ab", f"{key}.saving", "", measure.measured_ms, "ms"
        yield "ab", f"{key}.ci95_low", "", _v(measure.ci95_ms[0]), "ms"
        yield "ab", f"{key}.ci95_high", "", _v(measure.ci95_ms[1]), "ms"
        yield "ab", f"{key}.mde", "", _v(measure.mde_ms), "ms"
        yield "ab", f"{key}.observations_baseline", "", measure.n_baseline, measure.unit
        yield "ab", f"{key}.observations_candidate", "", measure.n_candidate, measure.unit
        yield "ab", f"{key}.resolved", "", _v(measure.resolved), ""
        yield "ab", f"{key}.verdict", "", measure.verdict, ""
    yield "ab", "best_measure", "", _v(cmp.best_measure), ""
    if cmp.best_measure_note:
        yield "ab", "best_measure_note", "", cmp.best_measure_note, ""
    for i in cmp.lower_bound_runs:
        yield "ab", "lower_bound_run", "", i, "run"
    yield "ab", "verdict", "", cmp.verdict, ""
    yield "ab", "runs.baseline", "", cmp.runs_per_arm.baseline or 1, "runs"
    yield "ab", "runs.candidate", "", cmp.runs_per_arm.candidate or 1, "runs"
    yield "ab", "replication", "", cmp.replication, ""
    for g in cmp.group_changes:
        name = f"group.{g.role}@{g.source or g.producer}"
        yield "ab", f"{name}.baseline", "", g.baseline_per_step, "copies"
        yield "ab", f"{name}.candidate", "", g.candidate_per_step, "copies"
        yield "ab", f"{name}.status", "", g.status, ""
        yield "ab", f"{name}.estimate", "", g.estimate_ms, "ms"
    for c in cmp.site_changes:
        yield "ab", f"site_change.{c.site}@{c.bytes}B.baseline", "", c.baseline_per_step, "copies"
        yield "ab", f"site_change.{c.site}@{c.bytes}B.candidate", "", c.candidate_per_step, "copies"
        yield "ab", f"site_change.{c.site}@{c.bytes}B.status", "", c.status, ""


def tidy_rows(runs: list[RunReport], cmp: Comparison | None, labels: list[str], headline: str,
              by_source: bool = False) -> list[Row]:
    """Every figure of the report as a row; ``by_source`` adds the census by issuing function."""
    rows: list[Row] = [("headline", "headline", "", headline, "")]
    for label, run in zip(labels, runs):
        rows.extend(_run_rows(run, label, by_source))
    if cmp is not None:
        rows.extend(_ab_rows(cmp))
    return rows
