"""Structure and stack as evidence of a copy's role (analysis/census/role_evidence.py).

Expected values follow from the rule, stated in each test: the stack names the block that
issued a copy (its innermost classified nn.Module), structure the place in the block."""
from __future__ import annotations

import numpy as np

from copyprof.analysis.census.role_evidence import weigh_stacks

MOE = ["nn.Module: MoERunner_3", "nn.Module: KimiMoE_3", "nn.Module: KimiDecoderLayer_4", "nn.Module: KimiLinearForCausalLM_0"]
MLA = ["nn.Module: KimiMLAAttention_1", "nn.Module: KimiDecoderLayer_7", "nn.Module: KimiLinearForCausalLM_0"]
GEMM, MOE_SUM = "nvjet_sm90_tst_64x8_64x16_1x2_h_bz_TNT", "void vllm::moe::moe_sum_vec_kernel<c10::BFloat16, int, 4>"


def _weigh(roles, places, modules, producers, sourced=None):
    role, place = np.array(roles, dtype=object), np.array(places, dtype=object)
    ev = weigh_stacks(role, place, modules, np.array(producers, dtype=object), sourced)
    return role.tolist(), ev


def test_agreeing_evidence_keeps_the_role_and_says_both():
    role, ev = _weigh(["mlp-output", "post-projection"], ["after the MoE reduction", ""], [MOE, MLA], [MOE_SUM, GEMM])
    assert role == ["mlp-output", "post-projection"]
    assert ev.evidence.tolist() == ["structure+stack", "structure+stack"] and ev.agree.tolist() == [True, True]


def test_the_stack_overrules_a_wrong_block_and_records_what_structure_said():
    """Structure took an MoE reduction's copy for a projection's (the real-vLLM fault): the stack
    says the MoE module issued it, so it is the MoE output copy (its producer is moe_sum)."""
    role, ev = _weigh(["post-projection"], ["after the attention block's output projection"], [MOE], [MOE_SUM])
    assert role == ["mlp-output"]
    assert ev.evidence.tolist() == ["stack"] and ev.agree.tolist() == [False]
    assert ev.structure_said.tolist() == ["post-projection"]


def test_an_unplaced_copy_takes_the_stacks_block():
    """No structure (unplaced): an attention module's copy after a GEMM is its projection's."""
    role, ev = _weigh(["unplaced"], ["no attention core recognised in its layer"], [MLA], [GEMM])
    assert role == ["post-projection"] and ev.evidence.tolist() == ["stack"] and ev.agree.tolist() == [None]


def test_without_module_frames_structure_alone_decides():
    role, ev = _weigh(["placement"], ["inside the attention block"], [[]], [GEMM], [True])
    assert role == ["placement"] and ev.evidence.tolist() == ["structure"] and ev.block.tolist() == [""]


def test_a_stacked_copy_outside_every_module_is_metadata_when_the_trace_records_modules():
    """The model runner's input copies run outside the model: no module frame around them."""
    role, ev = _weigh(["other", "mlp-output"], ["in the attention block, before its core", "after the MoE reduction"],
                      [[], MOE], ["void at::native::vectorized_elementwise_kernel", MOE_SUM], [True, True])
    assert role == ["metadata", "mlp-output"] and ev.block.tolist() == ["outside", "mlp"]
