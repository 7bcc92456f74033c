"""A copy's role from two kinds of evidence: its place in the layer's blocks, and the stack.

Structure (analysis/census/copy_sites.py) reads the kernel order; a trace with Python stacks also
names the module that issued each copy (``nn.Module: KimiMoE_3`` around an MoE output copy,
``KimiMLAAttention`` around an MLA projection copy). The stack is direct evidence of the block
a copy belongs to; structure says where in the block it sits. So where both exist and name the
same block the role stands (evidence ``structure+stack``); where they name different blocks
the stack's block wins and the role is re-read inside it from the kernel that produced the
copy (evidence ``stack``, with what structure had said); a copy structure could not place
takes the stack's block the same way. Without a stack, structure alone (``structure``); where
neither can place a copy the census asks its size (``size``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.census.copy_sites import METADATA, MLP_OUTPUT, OTHER, PLACEMENT, POST, STAGING, UNPLACED
from copyprof.columns import constant, filled
from copyprof.vocabulary import EvidenceKind, Place
from copyprof.taxonomy.kernel_roles import is_gemm, is_gemm_tail, is_moe_reduce
from copyprof.taxonomy.modules import Block, block_of

# The block each structural role lies in (a staging copy is wherever its all-reduce is).
_BLOCK_OF_ROLE = {POST: Block.ATTENTION, PLACEMENT: Block.ATTENTION, MLP_OUTPUT: Block.MLP, METADATA: Block.OUTSIDE}
_ATTENTION_PLACES = {Place.BEFORE_CORE.value, Place.IN_ATTENTION.value, Place.AFTER_PROJECTION.value}


@dataclass
class Evidence:
    """Per copy: the stack's block ("" without one), which evidence set the role, whether the
    two kinds agreed (None where only one exists), and what structure said when the stack won."""

    block: np.ndarray
    evidence: np.ndarray
    agree: np.ndarray
    structure_said: np.ndarray


def structural_block(role: str, place: str) -> str:
    if role in _BLOCK_OF_ROLE:
        return _BLOCK_OF_ROLE[role].value
    if role == OTHER:
        return Block.ATTENTION.value if place in _ATTENTION_PLACES else Block.MLP.value
    return ""


def role_in_block(block: str, producer: str) -> tuple[str, str]:
    """A role inside the block the stack names, from the kernel that produced the copy."""
    made_by_gemm = is_gemm(producer) or is_gemm_tail(producer)
    if block == Block.ATTENTION:
        return (POST, Place.AFTER_PROJECTION.value) if made_by_gemm else (PLACEMENT, Place.IN_ATTENTION.value)
    if block == Block.MLP:
        if is_moe_reduce(producer):
            return MLP_OUTPUT, Place.AFTER_MOE_REDUCE.value
        return (MLP_OUTPUT, Place.AFTER_MLP_GEMM.value) if made_by_gemm else (OTHER, Place.IN_MLP.value)
    return METADATA, Place.OUTSIDE.value


def weigh_stacks(role: np.ndarray, place: np.ndarray, modules: list[list[str]] | None,
                 producer: np.ndarray, sourced: list[bool] | None = None) -> Evidence:
    """Settle each copy's role between structure and stack (``role``/``place`` change in place).
    ``sourced``: which copies have a Python stack at all; in a trace that records module frames,
    a copy with a stack and no module around it was issued outside the model."""
    n = len(role)
    if modules is None:  # no stacks: structure alone, the same for every copy
        return Evidence(constant(n, ""), constant(n, EvidenceKind.STRUCTURE.value), constant(n, None), constant(n, ""))
    out = Evidence(filled(n, ""), filled(n, EvidenceKind.STRUCTURE.value), filled(n, None), filled(n, ""))
    records_modules = any(modules)
    for i in range(n):
        if modules[i]:
            block = block_of(tuple(modules[i])).value
        else:
            block = Block.OUTSIDE.value if records_modules and sourced is not None and sourced[i] else ""
        out.block[i] = block
        if block in ("", Block.LAYER.value) or role[i] == STAGING:
            continue
        said = structural_block(str(role[i]), str(place[i]))
        if role[i] == UNPLACED:
            role[i], place[i] = role_in_block(block, str(producer[i]))
            out.evidence[i] = EvidenceKind.STACK.value
        elif said == block:
            out.evidence[i], out.agree[i] = EvidenceKind.STRUCTURE_AND_STACK.value, True
        else:
            out.structure_said[i] = str(role[i])
            role[i], place[i] = role_in_block(block, str(producer[i]))
            out.evidence[i], out.agree[i] = EvidenceKind.STACK.value, False
    return out
