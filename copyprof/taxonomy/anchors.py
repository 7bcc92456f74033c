"""Anchor kernels, kept as data: attention cores that only one layer mechanism launches.

The layer map (analysis/census/layer_map.py) finds each layer's kind-specific kernels by counting;
these names add what counting cannot: in a model of one kind (Llama, DeepSeek) every kernel
runs in every layer, and the attention core is known only by name. They also cross-check a
layout: an MLA core in a layer the layout calls KDA is a disagreement. Mechanisms are the
layout's (models/layout.py MECHANISMS); ``linear`` kernels serve both KDA and gated
delta-net layers (fla's ``fused_recurrent_gated_delta_rule`` runs both).

Sources (vllm-and-kimi.md §7): fla-org/flash-linear-attention@bc3b101dcb71, vLLM K3 AMD tree
(amd/ops/third_party/kda, csrc/libtorch_stable/kimi_k3), ROCm/aiter@e4048607a535
(hsa/gfx950/mla/mla_asm.csv, csrc/kernels/mla/reduce.cu), FlashMLA, FlashInfer; softmax
attention names as seen in the MI300X vLLM (`kernel_unified_attention_2d/3d`) and SGLang
(`paged_attention_ll4mi_*`) samples, FlashAttention (`flash_fwd_*`), FlashInfer
(`BatchDecodeWithPagedKVCache*`, `BatchPrefill*`); mamba from vLLM's mamba_ssm ops
(`selective_state_update`, `_chunk_scan_fwd`, `_state_passing_fwd`), unverified in a trace.
"""
from __future__ import annotations

import re
from functools import lru_cache

KDA_ANCHORS: tuple[str, ...] = (
    r"fused_recurrent_kda",  # fla >= 2026-01, vLLM K3 third_party
    r"kda_decode_fusion",  # vLLM K3 fused conv + KDA + norm (HIP and CUDA)
    r"fused_kda_decode",
    r"^_?kda_",  # kda_gate_*, kda_* helpers
    r"kda_gate",
    r"chunk_kda_|recompute_w_u_fwd_kda_kernel",
)
LINEAR_ANCHORS: tuple[str, ...] = (  # KDA or gated delta-net
    r"fused_recurrent_gated_delta_rule",  # fla v0.4.x (IS_KDA=True for KDA), vLLM GDN decode
    r"chunk_gated_delta_rule|chunk_gla_fwd_kernel_o|chunk_scaled_dot_kkt",  # prefill
    r"layer_norm_gated_fwd_kernel|rms_norm_gated",  # o_norm (FusedRMSNormGated)
)
MLA_ANCHORS: tuple[str, ...] = (
    r"(aiter::|_ZN5aiter\d+)?mla_(dec_stage1|a16w16|a8w8|a16w8|pfl)_",  # aiter asm decode
    r"kn_mla_reduce|kn_get_mla_metadata|_fwd_kernel_stage2_asm|mla_reduce",
    r"_fwd_grouped_kernel_stage1|_mla_decode_fwd(_reduce)?_kernel",  # Triton MLA
    r"concat_and_cache_mla",  # KV-cache write (incl. fused_qk_rope_concat_and_cache_mla)
    r"flash_fwd_splitkv_mla|flash_fwd_(splitkv_)?mla_combine_kernel|get_mla_metadata_kernel",  # FlashMLA
    r"BatchMLAPagedAttentionKernel|Sm100FmhaMla|fmhaSm100\w*HQk576HV512",  # FlashInfer / CUTLASS / trtllm-gen
)
ATTENTION_ANCHORS: tuple[str, ...] = (  # softmax attention (full, sliding)
    r"unified_attention|paged_attention|reshape_and_cache",
    r"flash_fwd|flash_attn|FlashAttn|fmha|fused_multihead_attention",  # FA3 `flash::FlashAttnFwdSm90` (corpus/)
    r"BatchDecodeWithPagedKVCache|BatchPrefillWith|SinglePrefillWith",
    r"decode_attention|_fwd_kernel_stage1\b|store_kvcache",
)
CONV_ANCHORS: tuple[str, ...] = (  # the short convolution KDA, gated delta-net and mamba layers all run
    r"causal_conv1d_update|causal_conv1d_split_qkv|causal_conv1d_fwd",  # vLLM `_causal_conv1d_update_kernel` (corpus/)
)
MAMBA_ANCHORS: tuple[str, ...] = (
    r"selective_state_update|selective_scan|_chunk_scan_fwd|_state_passing_fwd|_chunk_cumsum_fwd|ssd_",
)
# Collective kernels: an eager all-reduce is preceded by a same-size staging copy
# (vLLM CustomAllreduce / aiter custom_all_reduce copy the input into the IPC buffer).
ALLREDUCE_KERNELS: tuple[str, ...] = (
    r"cross_device_reduce_(1|2)stage|allreduce_prototype|allreduce_fusion_kernel|local_device_load_rmsnorm",
    r"nccl(Dev)?Kernel|ncclKernel|rccl",
    r"all_?reduce",
)


def _rx(patterns: tuple[str, ...], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), flags)


# Checked in this order: MLA before softmax attention (MLA kernels write a paged cache too).
_MECHANISM_RX: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("mla", _rx(MLA_ANCHORS)), ("kda", _rx(KDA_ANCHORS)), ("linear", _rx(LINEAR_ANCHORS)),
    ("mamba", _rx(MAMBA_ANCHORS)), ("conv", _rx(CONV_ANCHORS)), ("attention", _rx(ATTENTION_ANCHORS)),
)
_AR = _rx(ALLREDUCE_KERNELS, re.I)
# Which layout mechanisms an anchor's mechanism is consistent with.
# FlashAttention kernels serve MLA layers too (vLLM's FLASH_ATTN_MLA backend runs FA3's
# `FlashAttnFwdSm90` in the MLA layers of the corpus's Kimi-Linear and DeepSeek captures).
CONSISTENT = {"mla": {"mla"}, "kda": {"kda"}, "linear": {"kda", "gdn"}, "mamba": {"mamba"},
              "conv": {"kda", "gdn", "mamba"}, "attention": {"attention", "mla"}}


@lru_cache(maxsize=65536)
def anchor_mechanism(name: str) -> str:
    """"mla", "kda", "linear" (KDA or GDN), "mamba", "conv" (KDA, GDN or mamba), "attention", or "" for a kernel name."""
    for mechanism, rx in _MECHANISM_RX:
        if rx.search(name):
            return mechanism
    return ""


def anchor_kind(name: str) -> str:
    """"mla", "kda" or "" (the Kimi view: linear kernels are KDA's there)."""
    m = anchor_mechanism(name)
    return "kda" if m == "linear" else (m if m in ("mla", "kda") else "")


@lru_cache(maxsize=65536)
def is_allreduce(name: str) -> bool:
    return bool(_AR.search(name))


# Attention written as plain torch ops (SDPA's math fallback, a reference implementation, the
# replica engine's MLA stand-in): its softmax is the core. Not an anchor of any mechanism —
# an MoE router runs a softmax too — but a softmax that runs in another kind's layers than the
# layout says is that kind's attention misplaced.
_ATTENTION_MATH = re.compile(r"SoftMax|softmax_warp|(?i:attention_math)")


def is_attention_math(name: str) -> bool:
    return bool(_ATTENTION_MATH.search(name)) and not re.search(r"(?i:topk|moe|gating)", name)
