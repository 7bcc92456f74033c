"""One rank's figures: per-step medians, per-step series, the plot timeline, rank agreement.

Pure functions of a ``RankAnalysis`` (its trace, steps and census) returning the typed
pieces of a ``RunReport`` (analysis/results.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from copyprof.analysis.aside import Aside
from copyprof.analysis.census.count import Census, take_census
from copyprof.analysis.health.completeness import check_completeness, is_rocm_trace
from copyprof.analysis.health.graph_launches import graph_launches
from copyprof.analysis.health.launch_overhead import StepBusy, launch_overhead
from copyprof.analysis.results import BySource, Completeness, LaunchOverhead, PerStep, RankAgreement, Timeline, known
from copyprof.analysis.sources.frames import copy_sources
from copyprof.analysis.steps.segment import Steps, segment
from copyprof.columns import Columns
from copyprof.grouping import float_values, group_ids, group_rows, median, median_of
from copyprof.events import Trace
from copyprof.models import ModelLayout
from copyprof.taxonomy.devices import device_cus
from copyprof.vocabulary import CompletenessStatus


Health = tuple[Completeness | None, LaunchOverhead | None]  # rank_health's answer


@dataclass
class RankAnalysis:
    rank: int
    trace: Trace
    steps: Steps
    census: Census
    completeness: Completeness | None = None
    overhead: LaunchOverhead | None = None
    health_due: bool = False  # check_health has yet to run (analyze_rank was asked to leave it)
    health_aside: Aside[Health] | None = None  # where it runs meanwhile (analysis/aside.py)


def analyze_rank(trace: Trace, layout: ModelLayout | None, all_steps: bool = False,
                 keep_layers: bool = False, *, health: bool = True, fork: bool = False) -> RankAnalysis:
    """The rank's steps and census, and its health unless ``health`` is False: then
    ``health_due`` is set and the caller runs :func:`check_health` (the report runs it while a
    forked child works out the copies' figures). With ``fork`` too, the health is worked out in
    a forked child from the moment the census knows its per-op arrays, while the census goes
    on (analysis/aside.py; one job or another thread: here, when check_health asks)."""
    steps = segment(trace.table)
    asides: list[Aside[Health]] = []

    def health_aside(op_rows: np.ndarray, op_steps: np.ndarray, op_first: np.ndarray) -> None:
        asides.append(Aside(functools.partial(rank_health, trace, steps, op_rows, op_steps, op_first, all_steps),
                            fork=fork))

    census = take_census(trace.table, steps, layout, cus=device_cus(trace.meta.devices), all_steps=all_steps,
                         keep_layers=keep_layers, op_shapes=trace.meta.op_shapes,
                         ops_ready=health_aside if not health and fork and steps.device >= 0 else None)
    ra = RankAnalysis(trace.meta.ranks[0] if trace.meta.ranks else 0, trace, steps, census, health_due=True,
                      health_aside=asides[0] if asides else None)
    if health:
        check_health(ra, all_steps)
    return ra


def check_health(ra: RankAnalysis, all_steps: bool = False) -> None:
    """Set the rank's health (:func:`rank_health`): from its aside where one was started, else
    worked out here from the census' per-op arrays, so before anything lets them go."""
    aside, ra.health_aside, ra.health_due = ra.health_aside, None, False
    census = ra.census
    ra.completeness, ra.overhead = aside.result() if aside is not None else rank_health(
        ra.trace, ra.steps, census.op_rows, census.op_steps, census.op_first, all_steps)


def rank_health(trace: Trace, steps: Steps, op_rows: np.ndarray | None, op_steps: np.ndarray | None,
                op_first: np.ndarray | None, all_steps: bool = False) -> Health:
    """A trace with GPU work: does it hold what its graph launches ran (completeness), and what
    do the launches cost the GPU (launch overhead, from the counted steps' ops)? (None, None)
    for a trace without GPU work."""
    if steps.device < 0:
        return None, None
    ev = trace.table
    launches = graph_launches(ev, steps)
    completeness = check_completeness(ev, steps, launches, rocm=is_rocm_trace(trace.meta.format,
                                                                                trace.meta.flavour, launches))
    overhead = None
    if len(launches) and op_rows is not None and op_steps is not None and op_first is not None:
        busy = StepBusy(ev["start_ns"], ev["dur_ns"], op_rows, op_steps, op_first)
        overhead = launch_overhead(launches, steps.table if all_steps else steps.decode, busy,
                                   kineto_on_rocprofiler_sdk=trace.meta.format == "kineto"
                                   and trace.meta.flavour == "rocprofiler-sdk")
    return completeness, overhead


def _intmedian_of(values: np.ndarray) -> int:
    m = median_of(values)
    return int(round(m)) if m is not None else 0


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def per_step_medians(ra: RankAnalysis) -> PerStep:
    """Medians over the counted steps; ``post_proj`` / ``post_proj_ms`` have one key per kind
    of the layout (none without one) plus ``total``; ``lower_bound`` when the trace lost GPU
    work under graph launches (the counts are floors)."""
    figures = _per_step_medians(ra)
    figures.lower_bound = ra.completeness is not None and ra.completeness.status == CompletenessStatus.LOWER_BOUND
    return figures


def _per_step_medians(ra: RankAnalysis) -> PerStep:
    ps = ra.census.per_step
    kinds = ra.census.kinds
    decode = ra.steps.decode
    host = _host_copies_by_name(ra)
    host_copies = None if host is None else host.get("aten::copy_", 0)
    if ps.empty:
        tokens = median_of(decode["tokens"]) if len(decode) else None
        return PerStep(
            tokens=int(tokens) if tokens is not None else None,
            period_ms=_ms(median_of(decode["period_ns"])) if len(decode) else None,
            gpu_span_ms=_ms(median_of(decode["span_ns"])) if len(decode) else None,
            copies=0, other=0, post_proj={**{k: 0 for k in kinds}, "total": 0},
            post_proj_ms={**{k: 0.0 for k in kinds}, "total": 0.0}, other_ms=0.0, host_copies=host_copies,
            host_copies_by_name=host)
    tokens = median_of(ps["tokens"])
    busy, replay, fraction = _gpu_time(ps)
    return PerStep(
        tokens=int(tokens) if tokens is not None else None,
        period_ms=_ms(median_of(ps["period_ns"])),
        gpu_span_ms=_ms(median_of(ps["span_ns"])),
        copies=_intmedian_of(ps["copies"]),
        other=_intmedian_of(ps["other"]),
        post_proj={**{k: _intmedian_of(ps[f"post_{k}"]) for k in kinds}, "total": _intmedian_of(ps["post_total"])},
        post_proj_ms={**{k: median_of(ps[f"post_{k}_ms"]) for k in kinds}, "total": median_of(ps["post_total_ms"])},
        other_ms=median_of(ps["other_ms"]),
        post_proj_gap_ms={k: median_of(ps[f"post_{k}_gap_ms"]) for k in kinds},
        host_copies=host_copies,
        gpu_busy_ms=busy, gpu_replay_span_ms=replay, gpu_busy_fraction=fraction,
    )


def _gpu_time(ps: Columns) -> tuple[float | None, float | None, float | None]:
    """The GPU's busy time, graph-replay span (ms) and busy fraction: medians over the counted steps."""
    if "busy_ns" not in ps:
        return None, None, None
    period = float_values(ps["period_ns"])
    busy = float_values(ps["busy_ns"])
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(period > 0, busy / period, np.nan)  # NaN where the step has no period
    return _ms(median_of(busy)), _ms(median_of(ps["replay_ns"])), median_of(fraction)


def _host_copies_by_name(ra: RankAnalysis) -> dict[str, int] | None:
    """Median host-side copy ops per counted step, by name (CPU-only traces; None when there is
    a GPU). ``aten::copy_`` is the count: ``aten::to`` / ``_to_copy`` / ``clone`` nest a
    ``copy_`` inside, so counting them too would count one copy several times."""
    if ra.steps.device >= 0:
        return None
    ev = ra.trace.table
    steps = ra.steps.decode["step"].tolist()
    if not steps:
        return {}
    mask = (ev["kind"] == "cpu_op") & np.isin(ra.steps.step_of, steps)
    rows = np.flatnonzero(mask)
    if not len(rows):
        return {}
    names = ev["name"].take(rows).strings()
    step = ra.steps.step_of[rows]
    by_name, first = group_ids(names, sort=True)  # names in sorted order
    col = np.searchsorted(np.sort(np.asarray(steps)), step)  # decode steps are distinct
    counts = np.zeros((len(first), len(steps)), dtype=np.int64)
    np.add.at(counts, (by_name, col), 1)  # a name's count per decode step, 0 where it has none
    return {str(names[f]): int(median(counts[g])) for g, f in enumerate(first.tolist())}


def host_by_source(ra: RankAnalysis) -> list[BySource]:
    """CPU-only traces: the host ``aten::copy_`` ops of the counted steps by issuing function
    (per step; ms are host time, the trace has no device)."""
    ev = ra.trace.table
    steps = ra.steps.decode["step"].tolist()
    rows = np.flatnonzero((ev["kind"] == "cpu_op") & (ev["name"] == "aten::copy_") & np.isin(ra.steps.step_of, steps))
    if not steps or not len(rows) or not (ev["kind"] == "python").any():
        return []
    found = copy_sources(ev, rows)
    source = np.empty(len(rows), dtype=object)
    source[:] = [s if s is not None else "" for s in found.source]
    dur = ev["dur_ns"][rows]
    gid, first = group_ids(source)  # issuing functions in order of first appearance
    out = []
    for f, members in zip(first.tolist(), group_rows(gid, len(first))):
        src = source[f]
        out.append(BySource(source=src or None, stack=list(found.stack[f]), per_step=len(members) / len(steps),
                            ms_per_step=float(dur[members].sum()) / 1e6 / len(steps), sites=["host aten::copy_"],
                            layer_kinds=[], layers=0, bytes=[], note="" if src else str(found.why[f])))
    return sorted(out, key=lambda b: (b.source is None, -b.per_step))


def step_series(ra: RankAnalysis) -> dict[str, list[float | None]]:
    """Per-step values of the headline rank (A/B statistics, plots; not in the JSON contract)."""
    def col(values: np.ndarray, scale: float = 1.0) -> list[float | None]:
        return [known(v / scale) for v in float_values(values).tolist()]

    ps = ra.census.per_step
    if ps.empty:
        dec = ra.steps.decode
        return {"period_ms": col(dec["period_ns"], 1e6), "span_ms": col(dec["span_ns"], 1e6)}
    out = {"period_ms": col(ps["period_ns"], 1e6), "span_ms": col(ps["span_ns"], 1e6),
           "post_proj_ms": col(ps["post_total_ms"])}
    if "busy_ns" in ps:
        out["busy_ms"] = col(ps["busy_ns"], 1e6)
        out["replay_ms"] = col(ps["replay_ns"], 1e6)
    for k in ra.census.kinds:  # per-kind series: estimates for any set of kinds an A/B removed
        out[f"post_{k}_ms"] = col(ps[f"post_{k}_ms"])
        out[f"post_{k}_gap_ms"] = col(ps[f"post_{k}_gap_ms"])
    return out


def timeline(ra: RankAnalysis) -> Timeline | None:
    """GPU ops of the first counted step, each copy with its site (the plot's panel c)."""
    if ra.census.per_step.empty:
        return None
    step = int(ra.census.per_step["step"][0])
    ev = ra.trace.table
    rows = np.flatnonzero((ra.steps.step_of == step) & ev["on_gpu"])
    rows = rows[np.argsort(ev["start_ns"][rows], kind="stable")]
    start = ev["start_ns"][rows].tolist()
    copies = ra.census.copies
    kinds = set(ra.census.kinds)
    site: dict[int, str] = {}  # a copy's site by its start (the later copy where two start together)
    if len(copies):
        for t, s in copies[copies["step"] == step].rows("start_ns", "site"):
            site[t] = s if s in kinds else "other-copy"
    return Timeline(start_ns=[int(x) for x in start], dur_ns=[int(x) for x in ev["dur_ns"][rows].tolist()],
                    name=[str(x) for x in ev["name"].take(rows).strings().tolist()],
                    site=[site.get(t, "") for t in start])


def rank_agreement(analyses: list[RankAnalysis]) -> RankAgreement:
    if len(analyses) < 2:
        return RankAgreement(agree=True, message="one rank")
    keys = ("copies", "post_total", *(f"post_{k}" for k in analyses[0].census.kinds))
    sig = {}
    for a in analyses:
        ps = a.census.per_step
        sig[a.rank] = tuple(_intmedian_of(ps[k]) if not ps.empty and k in ps else 0 for k in keys)
    if len(set(sig.values())) == 1:
        return RankAgreement(agree=True, message=f"per-step copy counts agree on all {len(analyses)} ranks")
    detail = "; ".join(f"rank {r}: {dict(zip(keys, s))}" for r, s in sorted(sig.items()))
    return RankAgreement(agree=False, message=f"per-step copy counts differ between ranks — {detail}")
