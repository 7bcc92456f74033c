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

from copyprof.analysis.steps.idle_gaps import cut_at_idle_gaps
from copyprof.analysis.steps.projection import other_thread_note, project_through_correlations
from copyprof.analysis.steps.rows import ROWS_PER_PASS, no_steps, positions, step_dtype, step_extents
from copyprof.columns import Columns, objects
from copyprof.grouping import distinct
from copyprof.taxonomy.annotations import GRAMMARS, parse_step
from copyprof.taxonomy.copies import d2d_mask, is_graph_launch

__all__ = ["GPU_KINDS", "ROWS_PER_PASS", "Steps", "positions", "segment", "step_extents", "step_warnings"]

GPU_KINDS = ("kernel", "memcpy", "memset")
# The columns an annotation range is read by (the step rules take these rows, not whole events).
_ANN_COLUMNS = ("name", "start_ns", "dur_ns", "stream", "device")


@dataclass
class Steps:
    """Steps of one trace. ``table`` has one row per step, in time order: step (int64), label
    (str), tokens (int or None), is_decode (True/False/None), start_ns, end_ns, n_events,
    span_ns (int64), period_ns (float64, NaN unless this step and the next are decode steps).
    ``step_of`` maps each event row (positional) to its step or -1."""

    rule: str
    table: Columns
    step_of: np.ndarray
    device: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # low-confidence results: shown in every output format

    @property
    def decode(self) -> Columns:
        return self.table[_is_true(self.table["is_decode"])]


def segment(events: Columns) -> Steps:
    gpu_mask = events["on_gpu"] & events["kind"].isin(GPU_KINDS)
    if not gpu_mask.any():
        return _cpu_annotation_steps(events)
    device = _busiest(events["device"][gpu_mask])
    gpu_mask &= events["device"] == device
    for rule in (_annotation_steps, _graph_launch_steps):
        found = rule(events, gpu_mask, device)
        if found is not None:
            return found
    found, why = _idle_gap_steps(events, gpu_mask, device)
    if found is not None:
        return found
    return _no_steps(events, device, why)


def _busiest(devices: np.ndarray) -> int:
    """The commonest device; a tie goes to the one seen first (as pandas' value_counts orders them)."""
    lo, hi = int(devices.min()), int(devices.max())
    if hi - lo < 1 << 16:  # GPU indexes: a count per value
        counts = np.bincount(devices.astype(np.int64) - lo)
        tied = np.flatnonzero(counts == counts.max()) + lo
    else:
        values, counts = np.unique(devices, return_counts=True)
        tied = values[counts == counts.max()]
    if len(tied) == 1:
        return int(tied[0])
    return int(min(tied.tolist(), key=lambda d: int(np.argmax(devices == d))))


def _no_steps(events: Columns, device: int, why: str) -> Steps:
    """No rule found steps: say so plainly, and where the trace's copies can still be seen."""
    copies = int(d2d_mask(events).sum())
    warning = ("no steps were found: the trace has no step annotations and no graph launches, "
               f"and its idle gaps show no step structure ({why}); per-step figures are empty, not zero")
    if copies:
        warning += f". The trace has {copies:,} device-to-device copies in all: `copyprof inspect` lists them"
    return Steps("none", _empty_table(), no_steps(len(events), 0), device,
                 ["no steps could be found"], [warning])


def _empty_table() -> Columns:
    ints, objects = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    return Columns({"step": ints, "label": objects, "tokens": objects, "is_decode": objects, "start_ns": ints,
                    "end_ns": ints, "span_ns": ints, "period_ns": np.zeros(0, dtype=np.float64), "n_events": ints}, 0)




def _is_true(values: np.ndarray) -> np.ndarray:
    """Where a True/False/None column is True (None and False are not)."""
    return np.fromiter((v is not None and bool(v) for v in values.tolist()), dtype=bool, count=len(values))


def _sorted_by_start(events: Columns, rows: np.ndarray) -> np.ndarray:
    """``rows`` in order of start; ties as pandas' default (quicksort) ``sort_values`` leaves them."""
    return rows[np.argsort(events["start_ns"][rows], kind="quicksort")]


def _step_annotations(events: Columns, on_gpu: bool) -> tuple[Columns, str] | tuple[None, None]:
    rows = np.flatnonzero((events["kind"] == "annotation") & (events["on_gpu"] == on_gpu))
    if not len(rows):
        return None, None
    names = events["name"]
    codes = names.codes[rows]
    present = distinct(codes[codes >= 0]).tolist()
    parsed = {c: parse_step(str(names.categories[c])) for c in present}
    grammars = {p.grammar for p in parsed.values() if p is not None}
    if not grammars:
        return None, None
    best = min(grammars, key=lambda g: (GRAMMARS[g], g))
    family = {"vllm", "vllm-detailed"} if best.startswith("vllm") else {best}
    keep = np.zeros(len(names.categories) + 1, dtype=bool)  # per code; the last, for code -1, stays False
    keep[[c for c, p in parsed.items() if p is not None and p.grammar in family]] = True
    sel = _sorted_by_start(events, rows[keep[codes]])
    return events[list(_ANN_COLUMNS)].take(sel), best


def _annotation_steps(events: Columns, gpu_mask: np.ndarray, device: int) -> Steps | None:
    cpu_ann, grammar = _step_annotations(events, on_gpu=False)
    notes: list[str] = []
    if cpu_ann is not None:
        step_of = no_steps(len(events), len(cpu_ann))
        from_other = project_through_correlations(events, cpu_ann, gpu_mask, step_of)
        if (step_of >= 0).any():
            if len(from_other):
                notes.append(other_thread_note(events, from_other, step_of))
            return _finish("annotation", grammar, cpu_ann, events, step_of, device, notes)
    gpu_ann, grammar = _step_annotations(events, on_gpu=True)
    if gpu_ann is None:
        return None
    if (gpu_ann["device"] >= 0).any():
        gpu_ann = gpu_ann[np.isin(gpu_ann["device"], [device, -1])]
    step_of = no_steps(len(events), len(gpu_ann))
    starts = events["start_ns"]
    for i, (s, d) in enumerate(zip(gpu_ann["start_ns"].tolist(), gpu_ann["dur_ns"].tolist())):
        inside = gpu_mask & (starts >= s) & (starts < s + d) & (step_of < 0)
        step_of[inside] = i
    if not (step_of >= 0).any():
        return None
    notes.append("GPU work assigned by gpu_user_annotation ranges (no launch correlations in the trace)")
    return _finish("annotation", grammar, gpu_ann, events, step_of, device, notes)


def _finish(rule: str, grammar: str | None, ann: Columns, events: Columns, step_of: np.ndarray,
            device: int, notes: list[str]) -> Steps:
    labels = [str(n) for n in ann.strings("name").tolist()]
    infos = [parse_step(n) for n in labels]
    decode = [i.is_decode if i else None for i in infos]
    if grammar == "profiler-step":
        notes.append("ProfilerStep ranges say nothing about what a step holds: every step is counted, tokens per "
                     "step are inferred where the copies allow")
        decode = [True if d is None else d for d in decode]
    table = _build_table(events, step_of, labels, [i.tokens if i else None for i in infos], decode)
    return Steps(f"{rule} ({grammar})", table, step_of, device, notes)


def _graph_launch_steps(events: Columns, gpu_mask: np.ndarray, device: int) -> Steps | None:
    names, corr = events["name"], events["correlation"]
    launch = names.flags(is_graph_launch)[names.codes]
    rows = np.flatnonzero((events["kind"] == "runtime") & (corr >= 0) & launch)
    del launch
    if not len(rows):
        return None
    rows = _sorted_by_start(events, rows)
    n = len(rows)
    # a correlation id launched twice belongs to its later launch (in time order)
    keys, last = np.unique(corr[rows][::-1], return_index=True)
    step_by_key = (n - 1 - last).astype(step_dtype(n))
    step_of = no_steps(len(events), n)
    for lo in range(0, len(events), ROWS_PER_PASS):  # blockwise: the lookups' temporaries stay small
        gpu = lo + np.flatnonzero(gpu_mask[lo : lo + ROWS_PER_PASS])
        mine = corr[gpu]
        at = np.minimum(np.searchsorted(keys, mine), len(keys) - 1)
        hit = keys[at] == mine
        step_of[gpu[hit]] = step_by_key[at[hit]]
    if not (step_of >= 0).any():
        return None
    labels = [str(x) for x in names.categories[names.codes[rows]].tolist()]
    table = _build_table(events, step_of, labels, [None] * n, [True] * n)
    # one message, not a note repeating the warning
    notes: list[str] = []
    warnings = [f"steps are inferred, not marked: each of the {n:,} graph launches is taken as one step (the "
                "trace has no step annotations); an engine that replays several graphs per step (piecewise CUDA "
                "graphs) gives figures per graph, not per step; tokens per step are inferred"]
    return Steps("graph-launch", table, step_of, device, notes, warnings)


def _idle_gap_steps(events: Columns, gpu_mask: np.ndarray, device: int) -> tuple[Steps | None, str]:
    """Steps from idle gaps (analysis/steps/idle_gaps.py), or None and why none were taken."""
    idx = np.flatnonzero(gpu_mask)
    order = idx[np.argsort(events["start_ns"][idx], kind="stable")]
    starts = events["start_ns"][order]
    ends = starts + events["dur_ns"][order]
    found, why = cut_at_idle_gaps(starts, ends, (events["kind"] == "kernel")[order])
    if found is None:
        return None, why
    n = found.n_steps
    step_of = no_steps(len(events), n)
    step_of[order] = found.step_of
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


def _build_table(events: Columns, step_of: np.ndarray, labels: list[str], tokens: list[int | None],
                 is_decode: Sequence[bool | None]) -> Columns:
    """The steps that hold events, in order of their first start (ties as a quicksort leaves them)."""
    first, last, count = step_extents(step_of, events["start_ns"], events["dur_ns"], len(labels))
    held = np.flatnonzero(count > 0)
    order = held[np.argsort(first[held], kind="quicksort")]
    return _step_table(order, labels, tokens, is_decode, first[order], last[order], count[order])


def _step_table(order: np.ndarray, labels: Sequence[str], tokens: Sequence[int | None],
                is_decode: Sequence[bool | None], start: np.ndarray, end: np.ndarray, count: np.ndarray) -> Columns:
    """The step table of the steps ``order`` (ids into labels, tokens, is_decode)."""
    pick = order.tolist()
    decode = [None if is_decode[k] is None else bool(is_decode[k]) for k in pick]
    start, end = start.astype(np.int64), end.astype(np.int64)
    table = Columns({
        "step": order.astype(np.int64),
        "label": objects([str(labels[k]) for k in pick]),
        "tokens": objects([None if tokens[k] is None else int(tokens[k]) for k in pick]),
        "is_decode": objects(decode),
        "start_ns": start,
        "end_ns": end,
        "n_events": count.astype(np.int64),
    }, len(pick))
    table["span_ns"] = end - start
    # to the next step's start where both are decode steps; float arithmetic, as the frame's
    # shifted (NaN-holding) column computed it
    period = np.full(len(pick), np.nan)
    dec = np.array([d is True for d in decode], dtype=bool)
    both = np.flatnonzero(dec[:-1] & dec[1:])
    period[both] = start[both + 1].astype(np.float64) - start[both]
    table["period_ns"] = period
    return table


def _cpu_annotation_steps(events: Columns) -> Steps:
    ann, grammar = _step_annotations(events, on_gpu=False)
    step_of = no_steps(len(events), len(ann) if ann is not None else 0)
    if ann is None:
        return Steps("none", _empty_table(), step_of, -1, ["no GPU events and no step annotations"],
                     ["no steps were found: the trace has no GPU events and no step annotations; per-step figures "
                      "are empty, not zero"])
    starts = events["start_ns"]
    host = events["kind"] == "cpu_op"
    stream = events["stream"]
    for i, (s, d, tid) in enumerate(zip(ann["start_ns"].tolist(), ann["dur_ns"].tolist(), ann["stream"].tolist())):
        inside = host & (starts >= s) & (starts < s + d) & (stream == tid)
        step_of[inside] = i
    labels = [str(n) for n in ann.strings("name").tolist()]
    infos = [parse_step(n) for n in labels]
    n = len(labels)
    start = ann["start_ns"].astype(np.int64)
    table = _step_table(np.arange(n, dtype=np.int64), labels, [i.tokens if i else None for i in infos],
                        [i.is_decode if i else None for i in infos], start, start + ann["dur_ns"],
                        np.bincount(step_of[step_of >= 0], minlength=n))
    notes = ["CPU-only trace: steps are the CPU annotation ranges; no device copies can exist here, "
             "host-side copy ops (aten::copy_ …) are listed instead"]
    return Steps(f"cpu-annotation ({grammar})", table, step_of, -1, notes)
