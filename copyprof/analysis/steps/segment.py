"""Split a trace into engine steps on the GPU timeline.

Rules, tried in order; the one used is named in every report:

1. ``annotation``: step ranges (vLLM ``execute_context_…``, SGLang ``step[…]``,
   ``ProfilerStep#N``; grammars in taxonomy/annotations.py) projected onto GPU work through the
   correlation ids of the runtime calls the CPU range issued (kernel launches, memcpys, the
   graph launch). CPU times are never used as GPU boundaries: on ROCm, graph kernels may run
   as a burst after the CPU marker (sglang #31545). When no correlations exist, the
   ``gpu_user_annotation`` projection of the same range is used.
2. ``graph-launch``: each ``cudaGraphLaunch``/``hipGraphLaunch`` correlation group is a step.
3. ``idle-gap``: no markers and no correlations (rocprofv3 CSV without markers): GPU work is cut
   at the idle gaps that stand out (the largest jump in the sorted gap sizes), and the
   segments whose event count is the modal one are the repeating decode steps.
A trace with no GPU events (vLLM on the CPU) uses ``cpu-annotation``: the annotation ranges
themselves, with the host-side copy ops inside them.
"""
from __future__ import annotations

from collections.abc import Sequence

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from copyprof.analysis.steps.idle_gaps import cut_at_idle_gaps
from copyprof.analysis.steps.projection import other_thread_note, project_through_correlations
from copyprof.analysis.steps.rows import ROWS_PER_PASS, STEP_DTYPE, positions, step_extents
from copyprof.taxonomy.annotations import GRAMMARS, parse_step
from copyprof.taxonomy.copies import d2d_mask, is_graph_launch

__all__ = ["GPU_KINDS", "ROWS_PER_PASS", "STEP_DTYPE", "Steps", "positions", "segment", "step_extents", "step_warnings"]

GPU_KINDS = ("kernel", "memcpy", "memset")


@dataclass
class Steps:
    """Steps of one trace. ``table`` has one row per step, in time order:
    step, label, tokens, is_decode (True/False/None), start_ns, end_ns, span_ns, period_ns,
    n_events. ``step_of`` maps each event row (positional) to its step or -1."""

    rule: str
    table: pd.DataFrame
    step_of: np.ndarray
    device: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # low-confidence results: shown in every output format

    @property
    def decode(self) -> pd.DataFrame:
        return self.table[self.table["is_decode"].eq(True)]


def segment(events: pd.DataFrame) -> Steps:
    gpu_mask = events["on_gpu"].to_numpy() & events["kind"].isin(GPU_KINDS).to_numpy()
    if not gpu_mask.any():
        return _cpu_annotation_steps(events)
    # the busiest device; a Series over the numpy values: .loc[mask] would build an index of
    # every selected row (8 bytes each) only to be dropped
    device = int(pd.Series(events["device"].to_numpy()[gpu_mask]).value_counts().idxmax())
    gpu_mask &= events["device"].to_numpy() == device
    for rule in (_annotation_steps, _graph_launch_steps):
        found = rule(events, gpu_mask, device)
        if found is not None:
            return found
    found, why = _idle_gap_steps(events, gpu_mask, device)
    if found is not None:
        return found
    return _no_steps(events, device, why)


def _no_steps(events: pd.DataFrame, device: int, why: str) -> Steps:
    """No rule found steps: say so plainly, and where the trace's copies can still be seen."""
    copies = int(d2d_mask(events).sum())
    warning = ("no steps were found: the trace has no step annotations and no graph launches, "
               f"and its idle gaps show no step structure ({why}); per-step figures are empty, not zero")
    if copies:
        warning += f". The trace has {copies:,} device-to-device copies in all: `copyprof inspect` lists them"
    return Steps("none", _empty_table(), np.full(len(events), -1, dtype=STEP_DTYPE), device, ["no steps could be found"],
                 [warning])


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=["step", "label", "tokens", "is_decode", "start_ns", "end_ns", "span_ns", "period_ns", "n_events"])


def _step_annotations(events: pd.DataFrame, on_gpu: bool) -> tuple[pd.DataFrame, str] | tuple[None, None]:
    ann = events[(events["kind"] == "annotation") & (events["on_gpu"] == on_gpu)]
    if ann.empty:
        return None, None
    names = ann["name"].cat.remove_unused_categories() if hasattr(ann["name"], "cat") else ann["name"]
    parsed = {str(n): parse_step(str(n)) for n in names.unique()}
    grammars = {p.grammar for p in parsed.values() if p is not None}
    if not grammars:
        return None, None
    best = min(grammars, key=lambda g: (GRAMMARS[g], g))
    family = {"vllm", "vllm-detailed"} if best.startswith("vllm") else {best}
    keep = [n for n, p in parsed.items() if p is not None and p.grammar in family]
    sel = ann[ann["name"].astype(str).isin(keep)].sort_values("start_ns")
    return sel, best


def _annotation_steps(events: pd.DataFrame, gpu_mask: np.ndarray, device: int) -> Steps | None:
    cpu_ann, grammar = _step_annotations(events, on_gpu=False)
    step_of = np.full(len(events), -1, dtype=STEP_DTYPE)
    notes: list[str] = []
    if cpu_ann is not None:
        from_other = project_through_correlations(events, cpu_ann, gpu_mask, step_of)
        if (step_of >= 0).any():
            if len(from_other):
                notes.append(other_thread_note(events, from_other, step_of))
            return _finish("annotation", grammar, cpu_ann, events, step_of, device, notes)
    gpu_ann, grammar = _step_annotations(events, on_gpu=True)
    if gpu_ann is None:
        return None
    gpu_ann = gpu_ann[gpu_ann["device"].isin([device, -1])] if (gpu_ann["device"] >= 0).any() else gpu_ann
    starts = events["start_ns"].to_numpy()
    for i, (s, d) in enumerate(zip(gpu_ann["start_ns"].to_numpy(), gpu_ann["dur_ns"].to_numpy())):
        inside = gpu_mask & (starts >= s) & (starts < s + d) & (step_of < 0)
        step_of[inside] = i
    if not (step_of >= 0).any():
        return None
    notes.append("GPU work assigned by gpu_user_annotation ranges (no launch correlations in the trace)")
    return _finish("annotation", grammar, gpu_ann, events, step_of, device, notes)


def _finish(rule: str, grammar: str | None, ann: pd.DataFrame, events: pd.DataFrame, step_of: np.ndarray,
            device: int, notes: list[str]) -> Steps:
    labels = ann["name"].astype(str).tolist()
    infos = [parse_step(n) for n in labels]
    decode = [i.is_decode if i else None for i in infos]
    if grammar == "profiler-step":
        notes.append("ProfilerStep ranges say nothing about what a step holds: every step is counted, tokens per "
                     "step are inferred where the copies allow")
        decode = [True if d is None else d for d in decode]
    table = _build_table(events, step_of, labels, [i.tokens if i else None for i in infos], decode)
    return Steps(f"{rule} ({grammar})", table, step_of, device, notes)


def _graph_launch_steps(events: pd.DataFrame, gpu_mask: np.ndarray, device: int) -> Steps | None:
    rt = events[(events["kind"] == "runtime") & (events["correlation"] >= 0)]
    launches = rt[[is_graph_launch(str(n)) for n in rt["name"]]] if len(rt) else rt
    if launches.empty:
        return None
    launches = launches.sort_values("start_ns")
    corr_step = {int(c): i for i, c in enumerate(launches["correlation"])}
    mapped = events["correlation"].map(corr_step).to_numpy()
    step_of = np.full(len(events), -1, dtype=STEP_DTYPE)
    ok = gpu_mask & ~np.isnan(mapped.astype(float))
    if not ok.any():
        return None
    step_of[ok] = mapped[ok].astype(STEP_DTYPE)
    n = len(launches)
    table = _build_table(events, step_of, [str(x) for x in launches["name"]], [None] * n, [True] * n)
    # one message, not a note repeating the warning
    notes: list[str] = []
    warnings = [f"steps are inferred, not marked: each of the {n:,} graph launches is taken as one step (the "
                "trace has no step annotations); an engine that replays several graphs per step (piecewise CUDA "
                "graphs) gives figures per graph, not per step; tokens per step are inferred"]
    return Steps("graph-launch", table, step_of, device, notes, warnings)


def _idle_gap_steps(events: pd.DataFrame, gpu_mask: np.ndarray, device: int) -> tuple[Steps | None, str]:
    """Steps from idle gaps (analysis/steps/idle_gaps.py), or None and why none were taken."""
    idx = np.flatnonzero(gpu_mask)
    order = idx[np.argsort(events["start_ns"].to_numpy()[idx], kind="stable")]
    starts = events["start_ns"].to_numpy()[order]
    ends = starts + events["dur_ns"].to_numpy()[order]
    found, why = cut_at_idle_gaps(starts, ends, (events["kind"] == "kernel").to_numpy()[order])
    if found is None:
        return None, why
    step_of = np.full(len(events), -1, dtype=STEP_DTYPE)
    step_of[order] = found.step_of
    n = found.n_steps
    table = _build_table(events, step_of, [f"segment {i}" for i in range(n)], [None] * n, found.is_decode)
    return Steps("idle-gap", table, step_of, device, found.notes, found.warnings), ""


def step_warnings(analyses: list[tuple[int, Steps]]) -> list[str]:
    """The low-confidence warnings of every rank's steps, for a run's ``warnings``: a warning
    every rank has is said once; others name their rank."""
    return rank_warnings([(rank, s.warnings) for rank, s in analyses])


def rank_warnings(per_rank: list[tuple[int, list[str]]]) -> list[str]:
    """Warnings of several ranks as one list: a warning every rank has is said once; others name their rank."""
    if not per_rank:
        return []
    common = set.intersection(*(set(w) for _, w in per_rank))
    out = [w for w in per_rank[0][1] if w in common]
    for rank, warnings in per_rank:
        out += [f"rank {rank}: {w}" for w in warnings if w not in common]
    return out


def _build_table(events: pd.DataFrame, step_of: np.ndarray, labels: list[str], tokens: list[int | None],
                 is_decode: Sequence[bool | None]) -> pd.DataFrame:
    n = len(labels)
    first, last, count = step_extents(step_of, events["start_ns"].to_numpy(), events["dur_ns"].to_numpy(), n)
    table = pd.DataFrame({
        "step": np.arange(n), "label": labels, "tokens": pd.array(tokens, dtype="Int64"),
        "is_decode": pd.array(is_decode, dtype="boolean"), "start_ns": first, "end_ns": last, "n_events": count,
    })
    table = table[table["n_events"] > 0].sort_values("start_ns").reset_index(drop=True)
    table["span_ns"] = table["end_ns"] - table["start_ns"]
    nxt_start = table["start_ns"].shift(-1)
    nxt_decode = table["is_decode"].shift(-1).fillna(False).astype(bool)
    table["period_ns"] = (nxt_start - table["start_ns"]).where(nxt_decode & table["is_decode"].fillna(False).astype(bool))
    return table


def _cpu_annotation_steps(events: pd.DataFrame) -> Steps:
    ann, grammar = _step_annotations(events, on_gpu=False)
    step_of = np.full(len(events), -1, dtype=STEP_DTYPE)
    if ann is None:
        return Steps("none", _empty_table(), step_of, -1, ["no GPU events and no step annotations"],
                     ["no steps were found: the trace has no GPU events and no step annotations; per-step figures "
                      "are empty, not zero"])
    starts = events["start_ns"].to_numpy()
    host = (events["kind"] == "cpu_op").to_numpy()
    for i, (s, d, tid) in enumerate(zip(ann["start_ns"], ann["dur_ns"], ann["stream"])):
        inside = host & (starts >= s) & (starts < s + d) & (events["stream"].to_numpy() == tid)
        step_of[inside] = i
    labels = ann["name"].astype(str).tolist()
    infos = [parse_step(n) for n in labels]
    table = pd.DataFrame({
        "step": np.arange(len(ann)), "label": labels,
        "tokens": pd.array([i.tokens if i else None for i in infos], dtype="Int64"),
        "is_decode": pd.array([i.is_decode if i else None for i in infos], dtype="boolean"),
        "start_ns": ann["start_ns"].to_numpy(), "end_ns": (ann["start_ns"] + ann["dur_ns"]).to_numpy(),
        "n_events": np.bincount(step_of[step_of >= 0], minlength=len(ann)),
    })
    table["span_ns"] = table["end_ns"] - table["start_ns"]
    nxt = table["start_ns"].shift(-1)
    both = table["is_decode"].fillna(False).astype(bool) & table["is_decode"].shift(-1).fillna(False).astype(bool)
    table["period_ns"] = (nxt - table["start_ns"]).where(both)
    notes = ["CPU-only trace: steps are the CPU annotation ranges; no device copies can exist here, "
             "host-side copy ops (aten::copy_ …) are listed instead"]
    return Steps(f"cpu-annotation ({grammar})", table, step_of, -1, notes)
