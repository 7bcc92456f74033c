"""What each copy of a step is, by its place in its decoder layer's blocks.

A decoder layer is: input norm → attention block (its core, then its output projection) →
residual + norm → MLP/MoE block → the next layer's norm. Given the step's layer map
(analysis/census/layer_map.py), which finds the layers and each kind's own kernels, every layer is
cut at its norms into those two blocks and each copy gets the role its place says:

* ``allreduce-staging`` — the next kernel is an all-reduce (custom all-reduce copies its
  input into the IPC buffer outside graph capture);
* ``post-projection`` — after the attention block's last GEMM (its output projection), before
  the norm that closes the block: ``output[:] = o_proj(x)``, what a direct-return change removes;
* ``placement`` — inside the attention block, after its core starts and before that projection
  (Kimi KDA's ``core_attn_out[0, :n] = o``, a gated delta-net's likewise);
* ``mlp-output`` — in the MLP/MoE block, right after the block's result is made: after the MoE
  reduction (vLLM's fused-MoE ``output.copy_(fused_expert_output)``), or after a GEMM that
  follows the block's activation;
* ``metadata`` — outside every decoder layer (input ids, positions, attention metadata, a
  graph's output buffer);
* ``other`` — inside a layer, none of the above (a copy between an MLP's activation and its
  down projection, before an attention core).

The block boundary is the first norm after the attention core that has a GEMM between it and
the core (norms inside the attention — q/k norms before the core, a gated output norm before
the projection — have none); the MLP block runs from there to the next norm past a GEMM. The
attention core is the layer's kind-specific kernels (launched only in that kind's layers,
which the layer map found by counting) plus the attention anchors of the taxonomy (the only
clue where every layer is of one kind). A copy in a layer whose core or boundary cannot be
found is ``unplaced`` and says why; the census then asks its size, never against its place.

Layouts of single-block layers (Nemotron-H: each decoder layer is one norm and one mixer —
mamba, attention — or one norm and one MLP/MoE block; ``models.layout.single_block_layers``)
are cut the same way with one block per layer: a mixer layer ends at the norm that closes its
mixer (the next layer's input norm), and an MLP-only layer runs from its input norm (the last
norm before its first GEMM, MoE or activation kernel) to the next norm past a GEMM. Reading
such a layer as an attention + MLP pair would hand the next layer's MoE output copy to the
mixer layer before it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.census.layer_map import LayerMap
from copyprof.columns import filled
from copyprof.models.layout import MLP_ONLY_KINDS, single_block_layers
from copyprof.taxonomy.anchors import anchor_mechanism, is_allreduce
from copyprof.vocabulary import Place, Role
from copyprof.taxonomy.kernel_roles import is_activation, is_gemm, is_gemm_tail, is_moe, is_moe_reduce, is_norm


POST, PLACEMENT, MLP_OUTPUT, STAGING, METADATA, OTHER, UNPLACED = (
    Role.POST.value, Role.PLACEMENT.value, Role.MLP_OUTPUT.value, Role.STAGING.value, Role.METADATA.value,
    Role.OTHER.value, Role.UNPLACED.value)  # plain values: they fill numpy object arrays


@dataclass
class NameRoles:
    """Per name code: what each kernel is to a layer's structure (computed once per table)."""

    gemm: np.ndarray
    gemm_tail: np.ndarray
    norm: np.ndarray
    allreduce: np.ndarray
    anchor: np.ndarray
    activation: np.ndarray
    moe: np.ndarray
    moe_reduce: np.ndarray

    @classmethod
    def of(cls, names: np.ndarray) -> NameRoles:
        listed = [str(n) for n in names.tolist()]

        def flag(test) -> np.ndarray:  # noqa: ANN001
            return np.array([test(n) for n in listed], dtype=bool)
        return cls(flag(is_gemm), flag(is_gemm_tail), flag(is_norm), flag(is_allreduce),
                   flag(lambda n: anchor_mechanism(n) != ""), flag(is_activation), flag(is_moe), flag(is_moe_reduce))


@dataclass
class StepSites:
    """Per copy of the step (in step order): role, 0-based layer (-1 outside), slot, and the
    place that decided the role (a ``Place`` value)."""

    role: np.ndarray
    layer: np.ndarray
    slot: np.ndarray
    place: np.ndarray


@dataclass
class _Blocks:
    """One layer's landmarks (step op positions; -1 where absent)."""

    core_first: int
    core_last: int
    proj: int  # the attention block's last GEMM
    boundary: int  # the norm that closes the attention block
    mlp_end: int  # the norm past the MLP block's GEMMs (the next layer's input norm), or the layer end


def place_copies(codes: np.ndarray, structural: np.ndarray, copy_at: np.ndarray, lm: LayerMap,
                 kind_names: dict[int, str], layer_kinds: tuple[str, ...], roles: NameRoles,
                 streams: np.ndarray | None = None) -> StepSites:
    """Roles of the copies at step positions ``copy_at`` (ascending). ``kind_names``: name code
    -> kind for the kernels the layer map found specific to a kind; ``streams``: each op's GPU
    stream (a copy's producer is the kernel before it on its own stream)."""
    n = len(copy_at)
    role = filled(n, UNPLACED)
    place = filled(n, Place.NO_LAYERS.value)
    layer = lm.op_layer[copy_at].astype(np.int64) if lm.status == "ok" else np.full(n, -1, dtype=np.int64)
    slot = lm.op_slot[copy_at].astype(np.int64) if lm.status == "ok" else np.zeros(n, dtype=np.int64)
    nxt = _next_structural(structural, copy_at)
    staging = (nxt >= 0) & roles.allreduce[codes[np.maximum(nxt, 0)]]
    role[staging], place[staging] = STAGING, Place.BEFORE_ALLREDUCE.value
    if lm.status != "ok":
        return StepSites(role, layer, slot, place)
    kernels = np.flatnonzero(structural)
    single = single_block_layers(layer_kinds)
    blocks = [_mlp_layer_blocks(codes, kernels, lm, ell, layer_kinds[ell], kind_names, roles)
              if single and layer_kinds[ell] in MLP_ONLY_KINDS else
              _layer_blocks(codes, kernels, lm, ell, layer_kinds[ell], kind_names, roles, mixer_only=single)
              for ell in range(lm.layers)]
    first = blocks[0].boundary if single and layer_kinds[0] in MLP_ONLY_KINDS and blocks[0].boundary >= 0 else \
        _first_layer_start(codes, kernels, blocks[0], lm, roles)
    layer = _owners(copy_at, blocks, lm, first)
    outside = (layer < 0) & ~staging
    role[outside], place[outside] = METADATA, Place.OUTSIDE.value
    for i in np.flatnonzero(~staging & ~outside).tolist():
        b = blocks[int(layer[i])]
        prev = _producer(codes, kernels, copy_at[i], streams)
        role[i], place[i] = _role_in_layer(int(copy_at[i]), b, prev, codes, kernels, roles)
    _one_post_per_projection(role, place, layer)
    return StepSites(role, layer, slot, place)


def _next_structural(structural: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Position of the next structural op after each position (-1 when none)."""
    where = np.flatnonzero(structural)
    if not len(where):  # a step of copies only (no kernel, no memset): nothing follows any of them
        return np.full(len(at), -1, dtype=np.int64)
    j = np.searchsorted(where, at, side="right")
    return np.where(j < len(where), where[np.minimum(j, len(where) - 1)], -1)


def _layer_blocks(codes: np.ndarray, kernels: np.ndarray, lm: LayerMap, ell: int, kind: str,
                  kind_names: dict[int, str], roles: NameRoles, mixer_only: bool = False) -> _Blocks:
    """The layer's core, projection and block boundaries, searched from its core onward (the
    layer map's cut between layers is approximate by a norm or two; the norms are not). A
    mixer-only layer (``mixer_only``) ends at the norm that closes its mixer."""
    start = int(lm.starts[ell])
    end = int(lm.starts[ell + 1]) if ell + 1 < lm.layers else int(lm.end)
    mine = kernels[(kernels >= start) & (kernels < end)]
    c = codes[mine]
    # The attention kernels the taxonomy knows; where the layer runs none, the kernels that run
    # only in its kind's layers (in a compiled graph those include Inductor kernels of the MLP
    # piece that follows, so they come second), less GEMMs, norms and MLP kernels.
    core = roles.anchor[c] & ~roles.allreduce[c] & ~roles.moe[c]
    if not core.any():
        core = (np.array([kind_names.get(int(x)) == kind for x in c.tolist()], dtype=bool)
                & ~(roles.gemm[c] | roles.gemm_tail[c] | roles.norm[c] | roles.moe[c] | roles.activation[c]))
    if not core.any():
        return _Blocks(-1, -1, -1, -1, end)
    core_first, core_last = int(mine[np.argmax(core)]), int(mine[len(core) - 1 - np.argmax(core[::-1])])
    after = kernels[kernels > core_last]
    a = codes[after]
    gemm = roles.gemm[a]
    # the closing norm: the first norm after the core with a GEMM (the projection) before it
    seen_gemm = np.cumsum(gemm) > 0
    closing = np.flatnonzero(roles.norm[a] & seen_gemm & ~gemm)
    if not len(closing):
        return _Blocks(core_first, core_last, -1, -1, end)
    boundary = int(after[closing[0]])
    proj = int(after[np.flatnonzero(gemm[: closing[0]])[-1]])
    if mixer_only:
        return _Blocks(core_first, core_last, proj, boundary, boundary)
    # the MLP block ends at the next norm past a GEMM (the next layer's input norm, or the final norm)
    tail = after[closing[0] + 1:]
    t = codes[tail]
    past = np.cumsum(roles.gemm[t]) > 0
    ends = np.flatnonzero(roles.norm[t] & past & ~roles.gemm[t])
    mlp_end = int(tail[ends[0]]) if len(ends) else end
    return _Blocks(core_first, core_last, proj, boundary, mlp_end)


def _mlp_layer_blocks(codes: np.ndarray, kernels: np.ndarray, lm: LayerMap, ell: int, kind: str,
                      kind_names: dict[int, str], roles: NameRoles) -> _Blocks:
    """An MLP-only layer's one block: from its input norm — the last norm before the layer's
    first GEMM, MoE, activation or kind-specific kernel — to the next norm past a GEMM. The
    input norm stands for core, projection and boundary alike, so a copy after it is read as
    the MLP block's (``_role_in_layer``)."""
    start = int(lm.starts[ell])
    end = int(lm.starts[ell + 1]) if ell + 1 < lm.layers else int(lm.end)
    mine = kernels[(kernels >= start) & (kernels < end)]
    c = codes[mine]
    own = np.array([kind_names.get(int(x)) == kind for x in c.tolist()], dtype=bool)
    body = (roles.gemm[c] | roles.moe[c] | roles.activation[c] | own) & ~roles.norm[c]
    if not body.any():
        return _Blocks(-1, -1, -1, -1, end)
    first = int(mine[np.argmax(body)])
    norms = kernels[(kernels < first) & roles.norm[codes[kernels]]]
    boundary = int(norms[-1]) if len(norms) else start
    tail = kernels[kernels > boundary]
    t = codes[tail]
    ends = np.flatnonzero(roles.norm[t] & (np.cumsum(roles.gemm[t]) > 0) & ~roles.gemm[t])
    mlp_end = int(tail[ends[0]]) if len(ends) else end
    return _Blocks(boundary, boundary, boundary, boundary, mlp_end)


def _first_layer_start(codes: np.ndarray, kernels: np.ndarray, first: _Blocks, lm: LayerMap, roles: NameRoles) -> int:
    """Where the first decoder layer begins: its input norm, or where the norm is not known
    by name (Inductor fuses it with the embedding into ``triton_red_fused_1``), its first
    GEMM — the earlier of the two before its core. Without a core, the layer map's cut."""
    if first.core_first < 0:
        return int(lm.starts[0])
    before = kernels[kernels < first.core_first]
    c = codes[before]
    marks = before[roles.norm[c] | roles.gemm[c]]
    return int(marks[0]) if len(marks) else int(lm.starts[0])


def _owners(copy_at: np.ndarray, blocks: list[_Blocks], lm: LayerMap, first_norm: int) -> np.ndarray:
    """The layer each copy belongs to by the blocks: a copy up to a layer's MLP end is that
    layer's; before the step's first norm (the first layer's input norm) or past the last
    layer's MLP end it is outside every layer (-1). A layer whose blocks were not found ends
    where the layer map cut it."""
    cut_ends = np.append(lm.starts[1:], lm.end)
    ends = np.array([b.mlp_end if b.boundary >= 0 else int(e) for b, e in zip(blocks, cut_ends.tolist())],
                    dtype=np.int64)
    ends = np.maximum.accumulate(ends)
    idx = np.searchsorted(ends, copy_at, side="left")  # the first layer whose MLP ends after the copy
    out = np.where(idx < len(blocks), idx, -1).astype(np.int64)
    out[copy_at < first_norm] = -1
    return out


def _producer(codes: np.ndarray, kernels: np.ndarray, at: int, streams: np.ndarray | None) -> int:
    """The kernel that ran before the copy on the copy's own stream (-1 none)."""
    before = kernels[kernels < at]
    if streams is not None and len(before):
        before = before[streams[before] == streams[at]]
    return int(before[-1]) if len(before) else -1


def _role_in_layer(at: int, b: _Blocks, prev: int, codes: np.ndarray, kernels: np.ndarray,
                   roles: NameRoles) -> tuple[str, str]:
    if b.core_first < 0:
        return UNPLACED, Place.NO_CORE.value
    if b.boundary < 0:
        return UNPLACED, Place.NO_BOUNDARY.value
    if at < b.core_first:
        return OTHER, Place.BEFORE_CORE.value
    if at < b.proj:
        return PLACEMENT, Place.IN_ATTENTION.value
    if at < b.boundary:
        return POST, Place.AFTER_PROJECTION.value
    if prev >= 0 and prev > b.boundary:
        pc = int(codes[prev])
        if roles.moe_reduce[pc]:
            return MLP_OUTPUT, Place.AFTER_MOE_REDUCE.value
        if roles.gemm[pc] or roles.gemm_tail[pc]:
            block = kernels[(kernels > b.boundary) & (kernels < at)]
            if (roles.activation[codes[block]] | roles.moe[codes[block]]).any():
                return MLP_OUTPUT, Place.AFTER_MLP_GEMM.value
    return OTHER, Place.IN_MLP.value


def _one_post_per_projection(role: np.ndarray, place: np.ndarray, layer: np.ndarray) -> None:
    """A projection writes one output: a second copy after it in the same layer is not its."""
    seen: set[int] = set()
    for i in np.flatnonzero(role == POST).tolist():
        if int(layer[i]) in seen:
            role[i], place[i] = OTHER, Place.AFTER_PROJECTION.value
        seen.add(int(layer[i]))
