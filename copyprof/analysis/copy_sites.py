"""What each copy of a step is, by its place in its decoder layer.

Given the step's layer map (analysis/layer_map.py), a copy is:

* ``allreduce-staging`` — the next kernel is an all-reduce (custom all-reduce copies its
  input into the IPC buffer outside graph capture; vllm-and-kimi.md §6.2);
* ``post-projection`` — after the layer's output projection: the first copy after the first
  GEMM that follows the layer's attention core, with no other GEMM and no norm in between
  (`output[:] = o_proj(x)`, the copy a direct-return patch removes);
* ``placement`` — inside the attention block, after its core starts and before the
  projection (Kimi KDA's ``core_attn_out[:n] = o``, Qwen3-Next GDN's likewise);
* ``other`` — anywhere else (the MLP, metadata, outside the layers).

The attention core of a layer is its kind-specific kernels (launched only in that kind's
layers, which the layer map found by counting) plus the attention anchors of the taxonomy
(the only clue in a model whose layers are all of one kind). Where a layer has no core or
no GEMM after it, structure cannot place its copies (``unplaced``): the census then falls
back to the copy's size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.layer_map import LayerMap
from copyprof.taxonomy.anchors import anchor_mechanism, is_allreduce
from copyprof.taxonomy.kernel_roles import is_gemm, is_norm

POST = "post-projection"
PLACEMENT = "placement"
STAGING = "allreduce-staging"
OTHER = "other"
UNPLACED = "unplaced"
ROLES = (POST, PLACEMENT, STAGING, OTHER, UNPLACED)


@dataclass
class NameRoles:
    """Per name code: GEMM, norm, all-reduce, attention anchor (computed once per table)."""

    gemm: np.ndarray
    norm: np.ndarray
    allreduce: np.ndarray
    anchor: np.ndarray

    @classmethod
    def of(cls, names: np.ndarray) -> NameRoles:
        listed = [str(n) for n in names.tolist()]
        return cls(np.array([is_gemm(n) for n in listed], dtype=bool),
                   np.array([is_norm(n) for n in listed], dtype=bool),
                   np.array([is_allreduce(n) for n in listed], dtype=bool),
                   np.array([anchor_mechanism(n) != "" for n in listed], dtype=bool))


@dataclass
class StepSites:
    """Per copy of the step (in step order): role, 0-based layer (-1 outside), slot."""

    role: np.ndarray
    layer: np.ndarray
    slot: np.ndarray


def place_copies(codes: np.ndarray, structural: np.ndarray, copy_at: np.ndarray, lm: LayerMap,
                 kind_names: dict[int, str], layer_kinds: tuple[str, ...], roles: NameRoles) -> StepSites:
    """Roles of the copies at step positions ``copy_at`` (ascending). ``kind_names``: name code
    -> kind for the kernels the layer map found specific to a kind."""
    n = len(copy_at)
    role = np.full(n, UNPLACED, dtype=object)
    layer = lm.op_layer[copy_at].astype(np.int64) if lm.status == "ok" else np.full(n, -1, dtype=np.int64)
    slot = lm.op_slot[copy_at].astype(np.int64) if lm.status == "ok" else np.zeros(n, dtype=np.int64)
    nxt = _next_structural(structural, copy_at)
    staging = (nxt >= 0) & roles.allreduce[codes[np.maximum(nxt, 0)]]
    role[staging] = STAGING
    if lm.status != "ok":
        return StepSites(role, layer, slot)
    role[(layer < 0) & ~staging] = OTHER
    ends = np.append(lm.starts[1:], lm.end)
    for ell in np.unique(layer[layer >= 0]).tolist():
        mine = np.flatnonzero((layer == ell) & ~staging)
        if len(mine):
            role[mine] = _layer_roles(codes, structural, copy_at[mine], int(lm.starts[ell]), int(ends[ell]),
                                      layer_kinds[ell], kind_names, roles)
    return StepSites(role, layer, slot)


def _next_structural(structural: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Position of the next structural op after each position (-1 when none)."""
    where = np.flatnonzero(structural)
    j = np.searchsorted(where, at, side="right")
    return np.where(j < len(where), where[np.minimum(j, len(where) - 1)], -1)


def _layer_roles(codes: np.ndarray, structural: np.ndarray, copies: np.ndarray, start: int, end: int, kind: str,
                 kind_names: dict[int, str], roles: NameRoles) -> list[str]:
    ops = np.arange(start, end)
    ops = ops[structural[start:end]]
    c = codes[ops]
    core = np.array([kind_names.get(int(x)) == kind for x in c.tolist()], dtype=bool) & ~roles.gemm[c]
    core |= roles.anchor[c] & ~roles.allreduce[c]
    if not core.any():
        return [UNPLACED] * len(copies)
    core_first, core_last = int(ops[np.argmax(core)]), int(ops[len(core) - 1 - np.argmax(core[::-1])])
    after = (ops > core_last) & roles.gemm[c]
    if not after.any():
        return [UNPLACED] * len(copies)
    proj = int(ops[np.argmax(after)])
    # Where the projection's window closes: the next GEMM or norm after it.
    closing = ops[(ops > proj) & (roles.gemm[c] | roles.norm[c])]
    close = int(closing[0]) if len(closing) else end
    out, have_post = [], False
    for cp in copies.tolist():
        if core_first < cp < proj:
            out.append(PLACEMENT)
        elif proj < cp < close and not have_post:
            out.append(POST)
            have_post = True
        else:
            out.append(OTHER)
    return out
