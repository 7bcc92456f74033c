"""Kernel roles, kept as data: which kernels are matrix multiplies (a layer's projections).

The layer map (analysis/census/layer_map.py) finds layers without any name list; placing a copy
*within* its layer — before or after the attention's output projection — needs to know
which kernels are GEMMs. Each pattern says where it was seen.
"""
from __future__ import annotations

import re
from functools import lru_cache

GEMM_KERNELS: tuple[tuple[str, str], ...] = (
    (r"^Cijk_", "hipBLASLt / Tensile GEMMs: MI300X vLLM and SGLang decode samples (TraceLens)"),
    (r"^nvjet_", "cuBLAS Hopper GEMMs: H200 replica captures (traces/)"),
    (r"(?i:gemm)", "cutlass / cuBLAS `sm80_xmma_gemm`, `ampere_*gemm`, aiter `gemm_a8w8`, `bf16gemm_` (H200 "
                  "captures; vllm-and-kimi.md §7.3)"),
    (r"(?i:gemv)", "cuBLAS `gemvx` / `gemv2T`: H200 replica captures"),
    (r"wvSplitK|LLMM1", "vLLM ROCm skinny GEMMs (vllm-and-kimi.md §7.3)"),
    (r"_matmul_ogs|(?i:fused_moe)|moe_gemm|grouped_gemm|MoeFlatmm|fmoe", "MoE GEMMs: triton matmul_ogs in the "
                  "MI300X vLLM gpt-oss sample; vLLM fused_moe; aiter fmoe / CK MoeFlatmm"),
    (r"(?i:(^|_)(bmm|matmul|mm)(_|$|<))|triton_tem_fused", "torch / Inductor matmul templates"),
)
# The tail of a split-K GEMM: part of the GEMM before it, not a GEMM of its own.
GEMM_TAILS: tuple[tuple[str, str], ...] = (
    (r"splitKreduce|_PostGSU|reduce_segments_gemm", "cuBLASLt split-K reduction after an H200 replica GEMM; "
                                                    "Tensile PostGSU"),
)

_GEMM = re.compile("|".join(f"(?:{p})" for p, _ in GEMM_KERNELS))
_TAIL = re.compile("|".join(f"(?:{p})" for p, _ in GEMM_TAILS))


@lru_cache(maxsize=65536)
def is_gemm(name: str) -> bool:
    """A matrix-multiply kernel that starts a GEMM (split-K tails are not)."""
    return bool(_GEMM.search(name)) and not _TAIL.search(name)


@lru_cache(maxsize=65536)
def is_gemm_tail(name: str) -> bool:
    return bool(_TAIL.search(name))

# Normalisation kernels: between a layer's attention output and its MLP sits the residual
# add + post-attention norm; a copy past one is no longer the projection's.
NORM_KERNELS: tuple[tuple[str, str], ...] = (
    (r"(?i:norm)", "rms_norm / layer_norm / aiter add_rmsnorm / ck Rmsnorm2d: H200 replica, MI300X samples; "
                   "vLLM `fused_add_rms_norm_kernel`, Inductor `triton_red_fused_add_rms_norm_*` (corpus/)"),
    (r"_attn_res_kernel", "Kimi-K3 Attention Residuals, the norm between attention and MoE "
                          "(vllm-and-kimi.md §4.3)"),
    (r"^triton_\w*(mean_\w*rsqrt|rsqrt_\w*mean)", "Inductor's decomposed RMSNorm (pow, mean, rsqrt): "
                                                  "`triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_sigmoid_0`, "
                                                  "the gated KDA norm in a real vLLM Kimi-Linear graph (corpus/)"),
)
_NORM = re.compile("|".join(f"(?:{p})" for p, _ in NORM_KERNELS))


@lru_cache(maxsize=65536)
def is_norm(name: str) -> bool:
    return bool(_NORM.search(name))

# The MLP block's landmarks. An activation between the up and down projections (dense MLP,
# routed and shared experts), and MoE kernels: routing, dispatch, the expert GEMMs and the
# reduction whose result a fused-MoE output copy moves (corpus/: vLLM 0.26.0 on H200).
ACTIVATION_KERNELS: tuple[tuple[str, str], ...] = (
    (r"act_and_mul|silu_and_mul|gelu_and_mul|swiglu|(?i:silu_kernel)", "vLLM `act_and_mul_kernel` (corpus/), "
                                                                    "aiter / SGLang `silu_and_mul`"),
    (r"^triton_\w*(mul_silu|silu_mul|gelu)", "Inductor-fused activations: `triton_poi_fused_mul_silu_slice_*` "
                                            "(corpus/ OLMo-hybrid and Kimi-Linear graphs)"),
)
MOE_KERNELS: tuple[tuple[str, str], ...] = (
    (r"fused_moe|moe_align_block_size|grouped_topk|topk_softmax|topkGating|moe_sorting|MoeFlatmm|fmoe|"
     r"_matmul_ogs|moe_gemm|expert", "vLLM Triton fused MoE and routing (corpus/), aiter / CK MoE, "
                                     "triton_kernels matmul_ogs (MI300X gpt-oss sample)"),
)
# The kernel that produces the routed experts' result: a copy right after it is the MoE output copy.
MOE_REDUCE_KERNELS: tuple[tuple[str, str], ...] = (
    (r"moe_sum|moe_reduce|moe_sum_reduce|finalizeMoe|finalize_moe|moe_combine|_moe_unpermute",
     "vLLM `moe_sum_vec_kernel` (corpus/: right before every fused-MoE output copy), SGLang "
     "`moe_sum_reduce`, TensorRT-LLM `finalizeMoeRouting`"),
)
_ACT = re.compile("|".join(f"(?:{p})" for p, _ in ACTIVATION_KERNELS))
_MOE = re.compile("|".join(f"(?:{p})" for p, _ in MOE_KERNELS + MOE_REDUCE_KERNELS))
_MOE_REDUCE = re.compile("|".join(f"(?:{p})" for p, _ in MOE_REDUCE_KERNELS))


@lru_cache(maxsize=65536)
def is_activation(name: str) -> bool:
    return bool(_ACT.search(name))


@lru_cache(maxsize=65536)
def is_moe(name: str) -> bool:
    return bool(_MOE.search(name))


@lru_cache(maxsize=65536)
def is_moe_reduce(name: str) -> bool:
    return bool(_MOE_REDUCE.search(name))
