"""Layout presets: published config fields, read through the same rules as a user's config.json.

Each preset is the part of the model's published ``config.json`` that copyprof reads, with
where it was read. The layouts come from ``layout_from_config`` — so a preset and the
config it transcribes cannot disagree — and tests compare them with kinds written out
independently (tests/synth/published.py).

Sources:
- kimi-k3 (moonshotai/Kimi-K3): third-party transcriptions of the HF ``config.json``
  ``text_config`` (fixture "moonshotai/Kimi-K3 @ 9f62e4e9", megatron-lite ``K3Config``),
  corroborated by ROCm/aiter #4541 ("layers 83, 87, 91, 92 ... last four full-attention",
  0-indexed) and vLLM's fused KDA kernel comment "each of the 69 KDA layers"
  (vllm-and-kimi.md §2.4). Not verified against the HF file itself.
- kimi-linear-48b-a3b (moonshotai/Kimi-Linear-48B-A3B-Instruct ``config.json`` @ e1df551a as
  transcribed; the nvfp4 derivative's config has the same values; vllm-and-kimi.md §2.3).
- qwen3-next-80b-a3b (Qwen/Qwen3-Next-80B-A3B-Instruct): transformers ``Qwen3NextConfig``
  defaults @ 008e574 (documented as that checkpoint's configuration) and a third-party
  transcription of the release's config.json (same fields; ``intermediate_size`` 5120 there,
  unused: every layer is MoE). Not verified against the HF file itself.
- deepseek-v3 (deepseek-ai/DeepSeek-V3): ``inference/configs/config_671B.json`` of
  github.com/deepseek-ai/DeepSeek-V3 @ 9b4e978 (dim 7168, 61 layers, 3 dense, 128 heads,
  q_lora 1536, kv_lora 512, qk 128 + 64, v 128, 256 experts top-8, moe_inter 2048), written
  here with the HF field names.
- gpt-oss-20b (openai/gpt-oss-20b): a public transcription of its ``config.json`` (24 layers,
  ``layer_types`` alternating sliding/full from layer 1) and transformers ``GptOssConfig``.
"""
from __future__ import annotations

import json
import os
from typing import Any

from copyprof.errors import CopyprofError
from copyprof.models.from_config import layout_from_config
from copyprof.models.layout import ModelLayout

_K3_FULL = [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93]
_K3_KDA = [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26, 27, 29, 30, 31, 33, 34, 35,
           37, 38, 39, 41, 42, 43, 45, 46, 47, 49, 50, 51, 53, 54, 55, 57, 58, 59, 61, 62, 63, 65, 66, 67, 69, 70,
           71, 73, 74, 75, 77, 78, 79, 81, 82, 83, 85, 86, 87, 89, 90, 91]

PUBLISHED: dict[str, tuple[str, dict[str, Any]]] = {
    "kimi-k3": ("moonshotai/Kimi-K3", {
        "model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"],
        "text_config": {
            "model_type": "kimi_linear", "num_hidden_layers": 93, "hidden_size": 7168, "torch_dtype": "bfloat16",
            "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "linear_attn_config": {"full_attn_layers": _K3_FULL, "kda_layers": _K3_KDA, "num_heads": 96,
                                   "head_dim": 128, "short_conv_kernel_size": 4},
            "intermediate_size": 33792, "moe_intermediate_size": 3072, "num_experts": 896,
            "num_experts_per_token": 16, "num_shared_experts": 2, "first_k_dense_replace": 1,
        }}),
    "kimi-linear-48b-a3b": ("moonshotai/Kimi-Linear-48B-A3B-Instruct", {
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "num_hidden_layers": 27,
        "hidden_size": 2304, "torch_dtype": "bfloat16", "num_attention_heads": 32, "num_key_value_heads": 32,
        "head_dim": 72, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
                               "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                               "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4},
        "intermediate_size": 9216, "moe_intermediate_size": 1024, "num_experts": 256, "num_experts_per_token": 8,
        "num_shared_experts": 1, "first_k_dense_replace": 1,
    }),
    "qwen3-next-80b-a3b": ("Qwen/Qwen3-Next-80B-A3B-Instruct", {
        "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 48,
        "hidden_size": 2048, "torch_dtype": "bfloat16", "full_attention_interval": 4, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "intermediate_size": 5120, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "num_experts": 512, "num_experts_per_tok": 10, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936,
    }),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", {
        "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
        "hidden_size": 7168, "torch_dtype": "bfloat16", "num_attention_heads": 128, "num_key_value_heads": 128,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 129280,
    }),
    "gpt-oss-20b": ("openai/gpt-oss-20b", {
        "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 24,
        "hidden_size": 2880, "torch_dtype": "bfloat16", "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12, "vocab_size": 201088,
    }),
}

PRESETS: dict[str, ModelLayout] = {
    name: layout_from_config(config, name=name, source="preset", hf_id=hf_id)
    for name, (hf_id, config) in PUBLISHED.items()
}


SERVING_TP: dict[str, tuple[int, str]] = {
    "kimi-k3": (8, "the TP of the Kimi-K3 PRs' runs (vllm-and-kimi.md §2.4, vLLM #50592/#50654)"),
    "deepseek-v3": (8, "671B parameters need eight 141-192 GB GPUs"),
    "qwen3-next-80b-a3b": (4, "80B bf16 weights (~160 GB) need more than one GPU; 4 is copyprof's H200 capture"),
    "kimi-linear-48b-a3b": (1, "48B bf16 weights (~96 GB) fit one H200 or MI300X"),
    "gpt-oss-20b": (1, "fits one GPU"),
}
"""``copyprof run``'s default ``--tp`` per preset, and why; any other model gets 1 (a config-only
test model fails inside vLLM with a TP larger than its GPUs). Sizes are from the presets'
configs; only Kimi-K3's TP is taken from a published run."""


def default_tp(model: str) -> tuple[int, str]:
    """The tensor-parallel size ``run`` uses when ``--tp`` is not given, with the reason."""
    return SERVING_TP.get(model.lower(), (1, "not a preset with a known serving TP"))


def load_layout(spec: str, name: str | None = None) -> ModelLayout:
    """A preset name (or its Hugging Face id), a config.json path, or a model directory;
    ``name`` names a config's layout (default: its directory's name)."""
    key = spec.lower()
    if key in PRESETS:
        return PRESETS[key]
    for preset in PRESETS.values():
        if preset.hf_id and preset.hf_id.lower() == key:
            return preset
    path = os.path.join(spec, "config.json") if os.path.isdir(spec) else spec
    if not os.path.isfile(path):
        names = ", ".join(PRESETS)
        raise CopyprofError(f"unknown model {spec!r}: not a preset ({names}) nor a config.json / model directory")
    try:
        with open(path, "rb") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise CopyprofError(f"cannot read model config: {exc}", path=path) from exc
    name = name or os.path.basename(os.path.dirname(os.path.abspath(path)))
    return layout_from_config(config, name=name, source=path)
