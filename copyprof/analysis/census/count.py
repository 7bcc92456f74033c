"""Per-step census of device-to-device copies: each copy's layer, kind and site.

A post-attention-projection copy is the copy each decoder layer makes when an attention
module writes its projection into a caller-owned buffer (`output[:] = o_proj(x)`). Which
copies those are is read from the step's structure: the layer map (analysis/census/layer_map.py)
splits each step into the layout's layers from the kernels themselves, and copy_sites.py
places every copy in its layer (post-projection, placement, all-reduce staging, other).
So a candidate that removed only some kinds' copies still shows the others, with or without
copy sizes. The copy's size cross-checks the structure (``[N, hidden] × dtype`` for a
post-projection copy); where structure cannot place a copy the size decides, and where
neither can, nothing is attributed and the report says why (census_order.py).

Speed: steps that launch the same op sequence (every step of a graph replay) share one
layer map, computed once; the per-step work is vectorised over each step's copies.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from copyprof.analysis.census.attribution import StepVerdict, anchor_agreement, summarise_attribution
from copyprof.analysis.census.by_order import order_attribution
from copyprof.analysis.census.graph_ops import graph_replayed
from copyprof.analysis.census.copy_sites import OTHER, POST, UNPLACED, NameRoles, place_copies
from copyprof.analysis.census.copy_table import add_evidence, add_sources, copies_table, copy_sites, evidence_notes
from copyprof.analysis.census.layer_map import LayerMap, map_layers
from copyprof.analysis.results import Attribution
from copyprof.analysis.census.role_evidence import weigh_stacks
from copyprof.analysis.sources.frames import CopySources, copy_sources
from copyprof.analysis.steps.gpu_time import gpu_time_per_step
from copyprof.analysis.steps.ops import StepOps, step_ops
from copyprof.analysis.steps.segment import Steps
from copyprof.columns import Columns, filled, objects
from copyprof.grouping import descending_order
from copyprof.models import PRESETS, ModelLayout
from copyprof.taxonomy.copies import bytes_match
from copyprof.vocabulary import UNATTRIBUTED_SITE

LAYER_COLUMNS = ["step", "layer", "kind", "start_ns", "end_ns"]


@dataclass
class Census:
    """Copies of the counted steps (one row per copy) and per-step figures, as ``Columns``.

    copies: COPY_COLUMNS, graph_id, graph_node, in_graph, SOURCE_COLUMNS, then block, evidence,
    structure_said, agree (True/False/None). copies.site: the layer kind for an attributed
    post-projection copy, ``post-proj`` for one whose layer is unknown, else the role
    (placement | allreduce-staging | other); role, kind (of the copy's layer, "" outside),
    layer (1-indexed, 0 outside every layer), slot."""

    copies: Columns
    per_step: Columns  # one row per counted step with ops; no columns when there is none
    kinds: tuple[str, ...] = ()
    attribution: Attribution = field(default_factory=Attribution)
    notes: list[str] = field(default_factory=list)
    layers: Columns | None = None  # with keep_layers: step, layer (1-indexed), kind, start_ns, end_ns
    op_rows: np.ndarray | None = None  # table positions of the counted steps' GPU ops, in (step, start) order
    op_steps: np.ndarray | None = None  # the counted steps with ops (ascending) and each one's first position
    op_first: np.ndarray | None = None  # in op_rows


OpsReady = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
"""Called with the census' per-op arrays (``op_rows``, ``op_steps``, ``op_first``) once they are
known, before the rest of the census: work that needs only them can start meanwhile."""


def take_census(events: Columns, steps: Steps, layout: ModelLayout | None, *,
                cus: int | None = None, all_steps: bool = False, keep_layers: bool = False,
                op_shapes: dict[str, str] | None = None, ops_ready: OpsReady | None = None) -> Census:
    table = steps.table if all_steps else steps.decode
    ops = step_ops(events, steps, table["step"], cus, per_op=layout is not None)
    if ops_ready is not None and ops.o_row is not None:
        ops_ready(ops.o_row, ops.step_ids, ops.op_first)
    tokens = _tokens(table, ops, layout)
    step_ids, op_bounds, copy_bounds = ops.step_bounds()
    n = len(ops.c_pos)
    role = filled(n, OTHER)
    layer = np.full(n, -1, dtype=np.int64)
    slot = np.zeros(n, dtype=np.int64)
    place = filled(n, "")
    c_bytes, c_src = ops.c_bytes.copy(), ops.c_src.copy()
    maps: dict[int, LayerMap] = {}
    verdicts: list[StepVerdict] = []
    anchors = (0, 0)
    found = _sources(events, ops, op_shapes or {})
    evidence = None
    if layout is not None:
        maps, anchors = _place_by_structure(ops, op_bounds, copy_bounds, layout, role, layer, slot, place)
        evidence = weigh_stacks(role, place, found.modules if found is not None else None, ops.c_prev,
                                [x is not None for x in found.source] if found is not None else None)
    ops.o_code = ops.o_struct = ops.o_stream = None  # the layer map's alone: ~4 MB less at the peak below
    kinds = tuple(layout.kinds) if layout is not None else ()
    # A copy's dispatch gap is GPU time its removal frees only where a graph replay runs the
    # next node right after it; an eager copy's gap is host launch time, a copy issued before
    # a graph launch waits for the launch.
    assert ops.o_row is not None
    op_replayed = graph_replayed(events, ops.o_row)  # one lookup for every op: the GPU time and the copies read it
    replayed = op_replayed[ops.c_pos]
    freed_gap = np.where(replayed, ops.c_gap, 0)
    spans = [(int(a), int(b)) for a, b in zip(copy_bounds[:-1].tolist(), copy_bounds[1:].tolist())]
    if layout is not None:  # every step's roles settled first: the sites below read them all at once
        verdicts = [_settle_step(ops, c0, c1, layout, tokens.get(step_id), role, layer, c_bytes, c_src, maps.get(k))
                    for k, (step_id, (c0, c1)) in enumerate(zip(step_ids.tolist(), spans))]
    site = copy_sites(role, layer, layout)
    figures = _step_figures(step_ids, tokens, copy_bounds, site, ops.c_dur, freed_gap, kinds)
    pos = (np.arange(n) - np.repeat(copy_bounds[:-1], np.diff(copy_bounds))).astype(np.int32)  # place in its step
    copies = copies_table(events, ops, pos, c_bytes, c_src, site, role, layer, slot, place, layout, replayed)
    add_sources(copies, found)
    add_evidence(copies, evidence, role)
    ps = _per_step_table(figures, table)
    if not ps.empty:
        ps = _with_gpu_time(ps, events, ops, op_replayed)
    del op_replayed  # a flag per op (1 MB on a 1 GB trace) that nothing below reads
    census = Census(copies=copies, per_step=ps, kinds=kinds, op_rows=ops.o_row, op_steps=ops.step_ids,
                    op_first=ops.op_first)
    if keep_layers and layout is not None:
        census.layers = _layer_spans(events, ops, op_bounds, maps, layout)
    census.attribution = summarise_attribution(verdicts, layout, list(maps.values()), anchors)
    census.notes += evidence_notes(copies, len(step_ids))
    if layout is None:
        census.notes.append("attribution to layers needs a model layout (--model)")
        census.notes += _trace_alone(copies, len(table))
    return census


def _per_step_table(figures: Columns, table: Columns) -> Columns:
    """The per-step figures with each step's period and span from the steps' table (every
    counted step is one of its rows); no columns when no step was counted."""
    if not len(figures["step"]):
        return Columns()
    where = {int(s): i for i, s in reversed(list(enumerate(table["step"].tolist())))}
    at = np.array([where[int(s)] for s in figures["step"].tolist()], dtype=np.int64)
    figures["period_ns"], figures["span_ns"] = table["period_ns"][at], table["span_ns"][at]
    return figures


def _with_gpu_time(ps: Columns, events: Columns, ops: StepOps, replayed: np.ndarray) -> Columns:
    """The per-step figures with each step's GPU busy time and graph-replay span (steps/gpu_time.py)."""
    assert ops.o_row is not None
    busy, replay = gpu_time_per_step(events["start_ns"], events["dur_ns"], ops.o_row, ops.op_first, replayed)
    at = np.searchsorted(ops.step_ids, ps["step"])  # every step of ps has ops: step_ids holds it
    ps["busy_ns"], ps["replay_ns"] = busy[at], replay[at]
    return ps


def _signatures(ops: StepOps, op_bounds: np.ndarray) -> dict[bytes, list[int]]:
    """Steps grouped by their op sequence (name codes): each group shares one layer map."""
    groups: dict[bytes, list[int]] = {}
    codes = ops.o_code
    assert codes is not None
    for k in range(len(op_bounds) - 1):  # the codes' bytes are the key: exact, and one copy per group is kept
        groups.setdefault(codes[op_bounds[k]:op_bounds[k + 1]].tobytes(), []).append(k)
    return groups


def _place_by_structure(ops: StepOps, op_bounds: np.ndarray, copy_bounds: np.ndarray, layout: ModelLayout,
                        role: np.ndarray, layer: np.ndarray, slot: np.ndarray,
                        place: np.ndarray) -> tuple[dict[int, LayerMap], tuple[int, int]]:
    """Layer map of each distinct step sequence, every copy's role, layer and slot, and the
    attention-anchor check of the most common sequence (layers anchored, agreeing)."""
    assert ops.o_code is not None and ops.o_struct is not None
    roles = NameRoles.of(ops.categories)
    code_of = {str(name): i for i, name in enumerate(ops.categories.tolist())}
    maps: dict[int, LayerMap] = {}
    anchors = (0, 0)
    for group in sorted(_signatures(ops, op_bounds).values(), key=len, reverse=True):
        k0 = group[0]
        o0, o1 = int(op_bounds[k0]), int(op_bounds[k0 + 1])
        codes, struct = ops.o_code[o0:o1], ops.o_struct[o0:o1]
        lm = map_layers(codes, struct, layout.layer_kinds, ops.categories)
        if not maps:
            anchors = anchor_agreement(lm, codes, ops.categories, layout)
        kind_names = {code_of[name]: kind for name, kind in lm.kinds.agree.items() if name in code_of}
        c0, c1 = int(copy_bounds[k0]), int(copy_bounds[k0 + 1])
        streams = ops.o_stream[o0:o1] if ops.o_stream is not None else None
        placed = place_copies(codes, struct, ops.c_pos[c0:c1] - o0, lm, kind_names, layout.layer_kinds, roles, streams)
        for k in group:
            a, b = int(copy_bounds[k]), int(copy_bounds[k + 1])
            role[a:b], layer[a:b], slot[a:b], place[a:b] = placed.role, placed.layer, placed.slot, placed.place
            maps[k] = lm
    return maps, anchors


def _settle_step(ops: StepOps, c0: int, c1: int, layout: ModelLayout, n_tok: int | None, role: np.ndarray,
                 layer: np.ndarray, c_bytes: np.ndarray, c_src: np.ndarray, lm: LayerMap | None) -> StepVerdict:
    """Size cross-check and fallback for one step's copies; the step's verdict."""
    nbytes, src = c_bytes[c0:c1], c_src[c0:c1]
    size_known = (nbytes >= 0) & (src != "layout")
    match = bytes_match(nbytes, src, layout.post_proj_bytes(n_tok)) if n_tok else np.zeros(c1 - c0, dtype=bool)
    verdict = StepVerdict(structure=lm.status if lm is not None else "none", layers=lm.layers if lm else 0)
    if n_tok:  # a post-projection copy moves [N, hidden]; other roles may too (the MoE output copy does)
        verdict.size_disagree = int(((role[c0:c1] == POST) & size_known & ~match).sum())
    method, r, ell = order_attribution(role[c0:c1], layer[c0:c1], match, ~size_known,
                                       ops.c_next[c0:c1], ops.c_prev[c0:c1], layout.layers)
    verdict.fallback = method if (role[c0:c1] == UNPLACED).any() else ""
    role[c0:c1] = np.where(r == UNPLACED, OTHER, r)
    layer[c0:c1] = ell
    post = role[c0:c1] == POST
    verdict.post = int(post.sum())
    verdict.post_placed = int((post & (ell >= 0)).sum())
    if n_tok:
        implied = post & (nbytes < 0)  # attributed by place, not size: the layout says its size
        c_bytes[c0:c1][implied] = layout.post_proj_bytes(n_tok)
        c_src[c0:c1][implied] = "layout"
    elif post.any():
        verdict.no_tokens = True
    return verdict


def _layer_spans(events: Columns, ops: StepOps, op_bounds: np.ndarray, maps: dict[int, LayerMap],
                 layout: ModelLayout) -> Columns:
    """Each counted step's layers on the GPU timeline: first op start to last op end."""
    assert ops.o_row is not None
    start = events["start_ns"][ops.o_row]
    end = start + events["dur_ns"][ops.o_row]
    parts: dict[str, list[np.ndarray]] = {c: [] for c in LAYER_COLUMNS}
    for k, lm in maps.items():
        if lm.status != "ok":
            continue
        o0 = int(op_bounds[k])
        lo = o0 + lm.starts
        hi = o0 + np.append(lm.starts[1:], lm.end)
        keep = hi > lo
        spans = list(zip(lo[keep].tolist(), hi[keep].tolist()))
        parts["step"].append(np.full(int(keep.sum()), int(ops.step_ids[k]), dtype=np.int64))
        parts["layer"].append(np.arange(1, lm.layers + 1, dtype=np.int64)[keep])
        parts["kind"].append(np.asarray(layout.layer_kinds, dtype=object)[keep])
        parts["start_ns"].append(np.array([int(start[a:b].min()) for a, b in spans], dtype=np.int64))
        parts["end_ns"].append(np.array([int(end[a:b].max()) for a, b in spans], dtype=np.int64))
    empty = {"kind": np.empty(0, dtype=object)}
    return Columns({c: np.concatenate(p) if p else empty.get(c, np.empty(0, dtype=np.int64)) for c, p in parts.items()})


def _sources(events: Columns, ops: StepOps, op_shapes: dict[str, str]) -> CopySources | None:
    """The issuing code of every copy, where the trace has Python stacks or shapes (else None)."""
    if len(ops.c_pos) and ops.c_row is not None and (op_shapes or (events["kind"] == "python").any()):
        return copy_sources(events, ops.c_row, op_shapes)
    return None


def _tokens(table: Columns, ops: StepOps, layout: ModelLayout | None) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for step_id, tok in zip(table["step"].tolist(), table["tokens"].tolist()):
        out[int(step_id)] = None if tok is None or tok != tok else int(tok)  # None or NaN: not known
    if layout is None or all(v is not None for v in out.values()):
        return out
    inferred = _infer_tokens(ops.c_bytes, ops.c_src, layout)
    return {k: (v if v is not None else inferred) for k, v in out.items()}


def _infer_tokens(c_bytes: np.ndarray, c_src: np.ndarray, layout: ModelLayout) -> int | None:
    """N whose [N, hidden] copy size is seen most often. Exact sizes (bytes == N*hidden*dtype)
    win over rocclr grid bounds, which a smaller copy of another site can also fit."""
    per_token = layout.hidden * layout.dtype_bytes
    exact: dict[int, int] = {}
    bound: dict[int, int] = {}
    sizes: dict[tuple[int, str], int] = {}
    for key in zip(c_bytes.tolist(), (str(x) for x in c_src.tolist())):
        sizes[key] = sizes.get(key, 0) + 1
    for (nbytes, src), n in sorted(sizes.items()):
        if nbytes <= 0:
            continue
        if src != "grid-bound":
            if nbytes % per_token == 0:
                exact[nbytes // per_token] = exact.get(nbytes // per_token, 0) + n
            continue
        fits = [t for t in range(max(1, (nbytes - 8192) // per_token), nbytes // per_token + 1)
                if bytes_match(np.array([nbytes]), np.array(["grid-bound"]), t * per_token)[0]]
        if len(fits) == 1:
            votes = exact if fits[0] * per_token == nbytes else bound
            votes[fits[0]] = votes.get(fits[0], 0) + n
    for votes in (exact, bound):
        if votes:
            return max(votes, key=lambda t: (votes[t], t))
    return None




def _step_figures(step_ids: np.ndarray, tokens: dict[int, int | None], bounds: np.ndarray, site: np.ndarray,
                  dur: np.ndarray, gap: np.ndarray, kinds: tuple[str, ...]) -> Columns:
    """Each counted step's copies by site: counts, and copy and freed-gap time (ms). ``bounds``:
    each step's first copy, then the end. Sums of integer nanoseconds over every step at once
    (a cumulative sum read at the bounds: exact, so each is the step's own sum)."""
    lo, hi = bounds[:-1], bounds[1:]

    def per_step(values: np.ndarray) -> np.ndarray:
        total = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
        return total[hi] - total[lo]

    def ms(mask: np.ndarray, values: np.ndarray = dur) -> np.ndarray:
        return per_step(np.where(mask, values, 0)) / 1e6

    is_post = np.isin(site, list(kinds)) if kinds else np.zeros(len(site), dtype=bool)
    copies = (hi - lo).astype(np.int64)
    post_total = per_step(is_post)
    out = Columns(n=len(lo))
    out["step"] = np.asarray(step_ids, dtype=np.int64)
    out["tokens"] = objects([tokens.get(s) for s in step_ids.tolist()])
    out["copies"], out["other"], out["post_total"] = copies, copies - post_total, post_total
    out["unattributed"] = per_step(site == UNATTRIBUTED_SITE)
    out["post_total_ms"], out["other_ms"] = ms(is_post), ms(~is_post)
    for kind in kinds:
        mine = site == kind
        out[f"post_{kind}"], out[f"post_{kind}_ms"], out[f"post_{kind}_gap_ms"] = per_step(mine), ms(mine), ms(mine, gap)
    return out


def _trace_alone(copies: Columns, n_steps: int) -> list[str]:
    """What the trace says without a layout: copy sizes that repeat many times per step (one
    per layer, probably), and a preset whose [N, hidden] copy and layer count they fit."""
    if copies.empty or not n_steps:
        return []
    sizes, counts = np.unique(copies["bytes"], return_counts=True)
    per_size = counts / n_steps
    order = descending_order(per_size)
    groups = [(int(b), float(p)) for b, p in zip(sizes[order].tolist(), per_size[order].tolist())
              if b > 0 and p >= 4 and float(p).is_integer()]
    out = []
    if groups:
        listed = ", ".join(f"{p:.0f} of {b:,} B" for b, p in groups[:3])
        out.append(f"copies that repeat per step: {listed} — pass --model to name their layers")
    for preset in PRESETS.values():
        for nbytes, per in groups:
            if round(per) == preset.layers and nbytes % (preset.hidden * preset.dtype_bytes) == 0:
                out.append(f"{per:.0f} copies of {nbytes:,} B per step fit {preset.name}: try --model {preset.name}")
                return out
    return out
