"""Kernel roles, kept as data: which kernels are matrix multiplies (a layer's projections).

The layer map (analysis/layer_map.py) finds layers without any name list; placing a copy
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
    (r"(?i:norm)", "rms_norm / layer_norm / aiter add_rmsnorm / ck Rmsnorm2d: H200 replica, MI300X samples"),
    (r"_attn_res_kernel", "Kimi-K3 Attention Residuals, the norm between attention and MoE "
                          "(vllm-and-kimi.md §4.3)"),
)
_NORM = re.compile("|".join(f"(?:{p})" for p, _ in NORM_KERNELS))


@lru_cache(maxsize=65536)
def is_norm(name: str) -> bool:
    return bool(_NORM.search(name))
