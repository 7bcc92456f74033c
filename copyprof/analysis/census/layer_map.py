"""Split one decode step into decoder layers from the kernels themselves.

Why from the step's own structure: a decoder runs the same kernels in every layer (a norm,
the router, the MoE GEMMs, an all-reduce, ...), so a kernel that a step launches exactly
``m × L`` times (L layers) has its ``j``-th launch in layer ``j // m`` — whatever else the
step does, whatever the model, with or without copy sizes. Kernels launched ``m × n_k``
times, where ``n_k`` layers are of kind ``k``, place themselves in the kind's layers the same
way. Nothing is hard-coded per model; the layout only says how many layers of which kind.

How (``map_layers``):

1. Structure = kernels and memsets (copies are excluded: they are what differs between arms).
2. Every kernel name whose count in the step is ``m × L`` (m = 1..4) puts each launch in a
   layer. Names that agree with most others (no layer's launches start before the previous
   layer's end) form the skeleton; a name that disagrees is a coincidence of counts and is
   dropped. Kernels launched ``m × n_k`` times join if they fit the skeleton in kind ``k``'s
   layers — which is the kind cross-check (``KindCheck``). Where no name runs in every layer
   (single-block layers in graph replay: each layer's norm is fused under another name), the
   kinds' own kernels are the skeleton (``_kind_skeleton``).
3. Each layer then owns the span from its first to its last placed launch. The unplaced ops
   between two spans (the next layer's input norm, a dense layer's MLP, ...) are split
   like the layers of the same kind split them: a layer's prologue (ops before its first
   placed launch) has the length most layers of its kind show. Ops before the first layer
   and after the last are outside every layer (embedding, final norm).

Every op then has (layer, slot): its layer and the number of structural ops of that layer
before it — the same slot in every layer of a kind, which is what makes a copy site
comparable across layers and across arms.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_MULT = 4  # launches per layer a clock kernel may have
# Layers of one kind run the same kernels, so most of them have the same length (structural ops).
# Measured share of layers at their kind's modal length: 93/93, 48/48, 27/27 on our H200
# replica captures (graph and eager), 35/36 on the SGLang Qwen3-8B MI300X sample, 36/36 on the
# B200 eager sample read as a 36-layer model; 30/93 when a DLRM training step (the A100 sample)
# is read as Kimi-K3, where one kernel happened to run 93 times. Below half, the kernels that
# repeat once per layer are a coincidence of counts, not decoder layers.
MIN_LIKE_LAYERS = 0.5
# A kernel that runs once per layer spreads over the model's body, which is most of a decode
# step's kernels. Counts can coincide outside it: in the corpus's real vLLM Jamba graph capture
# (8 layers) two metadata kernels before the graph run 8 times each within 12 of the step's
# 360 kernels, and as a skeleton they cut the step into 8 "layers" of one op each. A
# candidate must span at least this share of the step's kernels.
MIN_SPAN = 0.4
OUTSIDE = -1  # layer index of ops outside every layer (before the first, after the last)


@dataclass
class KindCheck:
    """How the step's kernels agree with the layout's kinds.

    ``agree``: kernels (name -> kind) that run only in that kind's layers, once (or m times)
    in each. ``disagree``: kernels whose launch count matches a kind's layer count but that
    run in other layers (name -> (kind, 1-indexed layers the trace shows))."""

    agree: dict[str, str] = field(default_factory=dict)
    disagree: dict[str, tuple[str, list[int]]] = field(default_factory=dict)


@dataclass
class LayerMap:
    """Layers of one step's op sequence (positions index the step's ops, copies included).

    ``status``: ok | no-structure. ``starts``: op position where layer i begins (L entries)
    and ``end``: one past the last layer's last op. ``op_layer``: each op's layer
    (0-based, OUTSIDE before the first / after the last), ``op_slot``: structural ops of its
    layer before it. ``clocks``: how many kernel names placed the layers."""

    status: str
    layers: int
    starts: np.ndarray
    end: int
    op_layer: np.ndarray
    op_slot: np.ndarray
    clocks: int = 0
    kinds: KindCheck = field(default_factory=KindCheck)
    message: str = ""


def failed_map(n_ops: int, layers: int, message: str) -> LayerMap:
    empty = np.zeros(0, dtype=np.int64)
    return LayerMap("no-structure", layers, empty, 0, np.full(n_ops, OUTSIDE, dtype=np.int32),
                    np.zeros(n_ops, dtype=np.int32), message=message)


@dataclass
class _Placed:
    """One kernel name's launches placed in layers: positions (structural index) and layers."""

    code: int
    pos: np.ndarray
    layer: np.ndarray
    target: str  # "*" (all layers) or a kind


def map_layers(codes: np.ndarray, structural: np.ndarray, layer_kinds: tuple[str, ...],
               names: np.ndarray) -> LayerMap:
    """Layer map of one step. ``codes``: name code of each op in step order; ``structural``:
    mask of the ops that carry structure (kernels, memsets); ``names``: code -> name."""
    n_ops, n_layers = len(codes), len(layer_kinds)
    pos = np.flatnonzero(structural)
    seq = codes[pos]
    if n_layers < 2 or len(seq) < n_layers:
        return failed_map(n_ops, n_layers, f"the step has {len(seq)} kernels, fewer than the layout's {n_layers} layers")
    targets = _targets(layer_kinds)
    by_name = _occurrences(seq)
    skeleton = _skeleton([p for p in _candidates(by_name, targets, "*")
                          if p.pos[-1] - p.pos[0] >= MIN_SPAN * len(seq)])
    if skeleton:
        lo, hi = _spans(skeleton, n_layers)
        clocks = len(skeleton)
    else:
        kind_clocks = _kind_skeleton(by_name, targets, layer_kinds, len(seq))
        if not kind_clocks:
            return failed_map(n_ops, n_layers, f"no kernel runs once (or 2-{MAX_MULT} times) in each of the "
                                               f"{n_layers} layers of this step, nor in each layer of every kind")
        lo, hi = _spans(kind_clocks, n_layers)
        clocks = len(kind_clocks)
    lo, hi, check = _check_kinds(by_name, targets, layer_kinds, lo, hi, names)
    starts_s, end_s = _cut(lo, hi, layer_kinds, len(seq))
    like = _like_layers(np.diff(np.append(starts_s, end_s)), layer_kinds)
    if like < MIN_LIKE_LAYERS * n_layers:
        return failed_map(n_ops, n_layers, f"the kernels that run once per layer cut this step into layers of unlike "
                                           f"length, only {like} of {n_layers} with their kind's usual length: "
                                           f"not the layout's decoder layers")
    starts = np.append(pos, n_ops)[starts_s]
    end = int(np.append(pos, n_ops)[end_s])
    op_layer = np.searchsorted(starts, np.arange(n_ops), side="right").astype(np.int32) - 1
    op_layer[np.arange(n_ops) >= end] = OUTSIDE
    struct_before = np.cumsum(structural) - structural  # structural ops before each op
    first_struct = struct_before[np.minimum(starts, n_ops - 1)] if n_ops else starts
    first_struct = np.where(starts >= n_ops, len(seq), first_struct)
    op_slot = np.where(op_layer >= 0, struct_before - first_struct[np.maximum(op_layer, 0)], 0).astype(np.int32)
    return LayerMap("ok", n_layers, starts.astype(np.int64), end, op_layer, op_slot, clocks=clocks, kinds=check)


def _targets(layer_kinds: tuple[str, ...]) -> dict[str, np.ndarray]:
    out = {"*": np.arange(len(layer_kinds))}
    for kind in dict.fromkeys(layer_kinds):
        out[kind] = np.array([i for i, k in enumerate(layer_kinds) if k == kind])
    return out


def _occurrences(seq: np.ndarray) -> dict[int, np.ndarray]:
    """Structural positions of each name code, in order."""
    order = np.argsort(seq, kind="stable")
    codes = seq[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    return {int(g[0]): p for g, p in zip(np.split(codes, cuts), np.split(order, cuts)) if len(g)}


def _candidates(by_name: dict[int, np.ndarray], targets: dict[str, np.ndarray], target: str) -> list[_Placed]:
    layers = targets[target]
    n = len(layers)
    out = []
    for code, p in by_name.items():
        m, rest = divmod(len(p), n)
        if rest or not 1 <= m <= MAX_MULT:
            continue
        if target != "*" and len(p) % len(targets["*"]) == 0 and len(p) // len(targets["*"]) <= MAX_MULT:
            continue  # also an all-layer count: the skeleton decides for it
        out.append(_Placed(code, p, layers[np.arange(len(p)) // m], target))
    return out


def _spans(placed: list[_Placed], n_layers: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.full(n_layers, np.iinfo(np.int64).max)
    hi = np.full(n_layers, -1, dtype=np.int64)
    for p in placed:
        np.minimum.at(lo, p.layer, p.pos)
        np.maximum.at(hi, p.layer, p.pos)
    return lo, hi


def _ordered(lo: np.ndarray, hi: np.ndarray) -> bool:
    """Layers do not overlap: each one's last placed op precedes the next one's first."""
    return bool(np.all(hi[:-1] < lo[1:]))


def _skeleton(cands: list[_Placed]) -> list[_Placed]:
    """The largest set of all-layer names that agree with each other, found greedily: names
    are taken in order of how many others they agree with (pairwise), each kept if the
    layers stay ordered."""
    if not cands:
        return []
    n_layers = int(max(int(c.layer.max()) for c in cands)) + 1
    spans = [_spans([c], n_layers) for c in cands]
    ok = [_ordered(lo, hi) for lo, hi in spans]
    cands = [c for c, good in zip(cands, ok) if good]
    spans = [s for s, good in zip(spans, ok) if good]
    if not cands:
        return []
    votes = np.zeros(len(cands), dtype=np.int64)
    for i in range(len(cands)):
        for j in range(i + 1, len(cands)):
            lo = np.minimum(spans[i][0], spans[j][0])
            hi = np.maximum(spans[i][1], spans[j][1])
            if _ordered(lo, hi):
                votes[i] += 1
                votes[j] += 1
    kept: list[_Placed] = []
    lo = np.full(n_layers, np.iinfo(np.int64).max)
    hi = np.full(n_layers, -1, dtype=np.int64)
    for i in np.argsort(-votes, kind="stable").tolist():
        lo2, hi2 = np.minimum(lo, spans[i][0]), np.maximum(hi, spans[i][1])
        if _ordered(lo2, hi2):
            kept.append(cands[i])
            lo, hi = lo2, hi2
    return kept


def _kind_skeleton(by_name: dict[int, np.ndarray], targets: dict[str, np.ndarray], layer_kinds: tuple[str, ...],
                   n_struct: int) -> list[_Placed]:
    """Layers placed by each kind's own kernels where no kernel runs in every layer.

    Why: in a layout of single-block layers (Nemotron-H: each layer one norm and one mixer or
    one MLP/MoE) under graph replay, Inductor fuses each layer's norm into the compiled piece
    around it under a name of that piece, so no kernel name repeats once per layer; but each
    kind's mixer (mamba's convolution and scan, attention's core, the MoE routing) runs once
    in each layer of its kind. Kernels launched ``m x n_k`` times place themselves in kind
    ``k``'s layers; they are kept greedily while the layers stay in order (counting only the
    layers each name places), one reading per name: first the readings that place the most
    layers, then those that agree with most others. A reading that places one layer orders
    nothing by itself (a kind of one layer matches every kernel launched once, and any kernel
    read as m launches in one layer agrees with every reading that leaves that layer alone),
    so it only fills a layer the others left between two placed ones (never the first or last
    layer, where the step's metadata and sampling kernels run once too). Every layer must be
    placed and the kept names must spread over the model's body (``MIN_SPAN``), else there is
    no skeleton."""
    n_layers = len(layer_kinds)
    if len(set(layer_kinds)) < 2:
        return []
    cands = [c for kind in dict.fromkeys(layer_kinds) for c in _candidates(by_name, targets, kind)]
    if not cands:
        return []
    lo = np.full((len(cands), n_layers), np.iinfo(np.int64).max)
    hi = np.full((len(cands), n_layers), -1, dtype=np.int64)
    for row, c in enumerate(cands):  # launches are in order, m per layer: first and last of each
        m = len(c.pos) // len(targets[c.target])
        lo[row, c.layer[::m]] = c.pos[::m]
        hi[row, c.layer[m - 1::m]] = c.pos[m - 1::m]
    good = _in_order(lo, hi)
    cands, lo, hi = [c for c, g in zip(cands, good.tolist()) if g], lo[good], hi[good]
    if not cands:
        return []
    votes = _votes(lo, hi)
    placed = (hi >= 0).sum(axis=1)
    kept: list[_Placed] = []
    codes: set[int] = set()
    k_lo = np.full(n_layers, np.iinfo(np.int64).max)
    k_hi = np.full(n_layers, -1, dtype=np.int64)
    for i in np.lexsort((-votes, -placed)).tolist():
        if cands[i].code in codes:
            continue
        if placed[i] == 1:
            ell = int(cands[i].layer[0])
            if not ((k_hi[:ell] >= 0).any() and (k_hi[ell + 1:] >= 0).any()):
                continue
        lo2, hi2 = np.minimum(k_lo, lo[i]), np.maximum(k_hi, hi[i])
        if _in_order(lo2[None, :], hi2[None, :])[0]:
            kept.append(cands[i])
            codes.add(cands[i].code)
            k_lo, k_hi = lo2, hi2
    if not kept or (k_hi < 0).any() or k_hi.max() - k_lo.min() < MIN_SPAN * n_struct:
        return []
    return kept


def _votes(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each reading (row of layer spans), how many other readings keep the layers in order
    together with it; pairs in blocks of bounded memory."""
    votes = np.zeros(len(lo), dtype=np.int64)
    rows = max(1, 4_000_000 // (len(lo) * lo.shape[1]))
    for a in range(0, len(lo), rows):
        pair_lo = np.minimum(lo[a:a + rows, None, :], lo[None, :, :])
        pair_hi = np.maximum(hi[a:a + rows, None, :], hi[None, :, :])
        votes[a:a + rows] = _in_order(pair_lo, pair_hi).sum(axis=1) - 1
    return votes


def _in_order(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row of layer spans (layers on the last axis; a layer no name placed has hi = -1):
    whether every placed layer's first op comes after the last op of every placed layer
    before it."""
    before = np.full(hi.shape, -1, dtype=hi.dtype)
    before[..., 1:] = np.maximum.accumulate(hi, axis=-1)[..., :-1]
    return np.all((hi < 0) | (lo > before), axis=-1)


def _fits(cand: _Placed, lo: np.ndarray, hi: np.ndarray) -> bool:
    """A kind's kernel fits the skeleton when each launch lies after the previous layer's
    last placed op and before the next layer's first one."""
    prev_hi = np.concatenate(([-1], hi[:-1]))[cand.layer]
    next_lo = np.concatenate((lo[1:], [np.iinfo(np.int64).max]))[cand.layer]
    return bool(np.all((cand.pos > prev_hi) & (cand.pos < next_lo)))


def _check_kinds(by_name: dict[int, np.ndarray], targets: dict[str, np.ndarray], layer_kinds: tuple[str, ...],
                 lo: np.ndarray, hi: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray, KindCheck]:
    """Kernels launched m x (layers of one kind) times: those that fit the skeleton in that
    kind's layers agree with the layout (and refine the spans); those that fit no kind with
    their count disagree, with the layers the trace puts them in."""
    check = KindCheck()
    tried: dict[int, list[_Placed]] = {}
    for kind in dict.fromkeys(layer_kinds):
        for cand in _candidates(by_name, targets, kind):
            tried.setdefault(cand.code, []).append(cand)
    for code, cands in tried.items():
        fitting = [c for c in cands if _fits(c, lo, hi)]
        if len(fitting) == 1:
            c = fitting[0]
            np.minimum.at(lo, c.layer, c.pos)
            np.maximum.at(hi, c.layer, c.pos)
            check.agree[str(names[code])] = c.target
        elif not fitting:
            seen = sorted({int(x) + 1 for x in _layer_of(cands[0].pos, hi)})
            check.disagree[str(names[code])] = (cands[0].target, seen)
    return lo, hi, check


def _layer_of(pos: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The layer each structural position falls in when every unplaced op between two
    layers' spans goes to the later layer."""
    return np.searchsorted(hi[:-1] + 1, pos, side="right")


def _like_layers(lengths: np.ndarray, layer_kinds: tuple[str, ...]) -> int:
    """Layers whose length (structural ops) is the most common length of their kind."""
    kinds = np.asarray(layer_kinds)
    like = 0
    for kind in dict.fromkeys(layer_kinds):
        _, counts = np.unique(lengths[kinds == kind], return_counts=True)
        like += int(counts.max())
    return like


def _modal(values: list[int]) -> int:
    if not values:
        return 0
    v, c = np.unique(np.asarray(values), return_counts=True)
    return int(v[np.argmax(c)])  # the smallest of the most common


def _cut(lo: np.ndarray, hi: np.ndarray, layer_kinds: tuple[str, ...], n_struct: int) -> tuple[np.ndarray, int]:
    """Layer starts and the end of the last layer (structural indices). A layer's prologue
    (unplaced ops before its first placed op) takes the length most layers of its kind have
    (gaps between spans are the prologue plus, sometimes, the previous layer's unplaced
    tail: a dense MLP, say); the last layer's tail takes the length the other layers of its
    kind leave after their last placed op."""
    n = len(lo)
    gaps = lo[1:] - hi[:-1] - 1  # unplaced ops between consecutive spans
    prologue: dict[str, int] = {}
    for kind in dict.fromkeys(layer_kinds):
        prologue[kind] = _modal([int(gaps[i - 1]) for i in range(1, n) if layer_kinds[i] == kind])
    fallback = _modal([int(g) for g in gaps])
    starts = np.empty(n, dtype=np.int64)
    for i in range(n):
        want = prologue.get(layer_kinds[i], fallback) if i else prologue.get(layer_kinds[0]) or fallback
        floor = hi[i - 1] + 1 if i else 0
        starts[i] = max(floor, lo[i] - want)
    tails = [int(starts[i + 1] - hi[i] - 1) for i in range(n - 1) if layer_kinds[i] == layer_kinds[-1]]
    end = min(n_struct, int(hi[-1]) + 1 + _modal(tails))
    return starts, end
