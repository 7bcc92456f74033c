"""Anchor kernels, kept as data: kernel names that only one layer kind launches.

Used to cross-check order-based attribution: between post-projection copy k-1 and copy k,
MLA anchors should appear only in MLA layers and KDA anchors only in KDA layers. Sources
(vllm-and-kimi.md §7): fla-org/flash-linear-attention@bc3b101dcb71, vLLM K3 AMD tree
(amd/ops/third_party/kda, csrc/libtorch_stable/kimi_k3), ROCm/aiter@e4048607a535
(hsa/gfx950/mla/mla_asm.csv, csrc/kernels/mla/reduce.cu), FlashMLA, FlashInfer.
"""
from __future__ import annotations

import re
from functools import lru_cache

KDA_ANCHORS: tuple[str, ...] = (
    r"fused_recurrent_kda",  # fla >= 2026-01, vLLM K3 third_party
    r"fused_recurrent_gated_delta_rule_fwd_kernel",  # fla v0.4.x (IS_KDA=True)
    r"kda_decode_fusion",  # vLLM K3 fused conv + KDA + norm (HIP and CUDA)
    r"fused_kda_decode",
    r"^_?kda_",  # kda_gate_*, kda_* helpers
    r"kda_gate",
    r"causal_conv1d_update|causal_conv1d_split_qkv",  # short conv (decode)
    r"layer_norm_gated_fwd_kernel",  # KDA o_norm (FusedRMSNormGated)
    r"chunk_kda_|recompute_w_u_fwd_kda_kernel|chunk_gated_delta_rule_fwd_kernel_h|chunk_gla_fwd_kernel_o|causal_conv1d_fwd_kernel",
)
MLA_ANCHORS: tuple[str, ...] = (
    r"(aiter::|_ZN5aiter\d+)?mla_(dec_stage1|a16w16|a8w8|a16w8|pfl)_",  # aiter asm decode
    r"kn_mla_reduce|kn_get_mla_metadata|_fwd_kernel_stage2_asm|mla_reduce",
    r"_fwd_grouped_kernel_stage1|_mla_decode_fwd(_reduce)?_kernel",  # Triton MLA
    r"concat_and_cache_mla",  # KV-cache write (incl. fused_qk_rope_concat_and_cache_mla)
    r"flash_fwd_splitkv_mla|flash_fwd_(splitkv_)?mla_combine_kernel|get_mla_metadata_kernel",  # FlashMLA
    r"BatchMLAPagedAttentionKernel|Sm100FmhaMla|fmhaSm100\w*HQk576HV512",  # FlashInfer / CUTLASS / trtllm-gen
)
# Collective kernels: an eager all-reduce is preceded by a same-size staging copy
# (vLLM CustomAllreduce / aiter custom_all_reduce copy the input into the IPC buffer).
ALLREDUCE_KERNELS: tuple[str, ...] = (
    r"cross_device_reduce_(1|2)stage|allreduce_prototype|allreduce_fusion_kernel|local_device_load_rmsnorm",
    r"nccl(Dev)?Kernel|ncclKernel|rccl",
    r"all_?reduce",
)

_KDA = re.compile("|".join(f"(?:{p})" for p in KDA_ANCHORS))
_MLA = re.compile("|".join(f"(?:{p})" for p in MLA_ANCHORS))
_AR = re.compile("|".join(f"(?:{p})" for p in ALLREDUCE_KERNELS), re.I)


@lru_cache(maxsize=65536)
def anchor_kind(name: str) -> str:
    """"mla", "kda", or "" for a kernel name."""
    if _MLA.search(name):
        return "mla"
    if _KDA.search(name):
        return "kda"
    return ""


@lru_cache(maxsize=65536)
def is_allreduce(name: str) -> bool:
    return bool(_AR.search(name))
