"""Model layouts: which decoder layer is MLA (full attention) and which is KDA (linear).

Presets are data. Facts and sources (see ../shared/docs/vllm-and-kimi.md §2):
- Kimi-K3 (moonshotai/Kimi-K3, third-party transcriptions of config.json; vLLM
  ``vllm/transformers_utils/configs/kimi_k3.py``): 93 layers, hidden 7168, MLA on 1-indexed
  layers 4, 8, ..., 92 and 93 (24), KDA on the other 69; 96 heads, q_lora 1536, kv_lora 512,
  KDA 96 heads x 128. Not verified against the HF file itself.
- Kimi-Linear-48B-A3B (moonshotai/Kimi-Linear-48B-A3B-Instruct config.json @ e1df551a as
  transcribed): 27 layers, hidden 2304, MLA on 4, 8, ..., 24 and 27 (7), KDA on 20.

From a config: ``linear_attn_config.kda_layers`` is 1-indexed and every layer not in it is
MLA (vLLM ``KimiLinearConfig.is_kda_layer``); Kimi-K3 nests it under ``text_config``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from copyprof.errors import CopyprofError

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float32": 4, "fp32": 4}


@dataclass(frozen=True)
class ModelLayout:
    """The per-layer attention kinds and the shapes copyprof needs."""

    name: str
    hidden: int
    layer_kinds: tuple[str, ...]  # "mla" | "kda", forward order (index 0 = layer 1)
    dtype_bytes: int = 2
    hf_id: str | None = None
    num_heads: int = 0  # MLA query heads (global)
    kda_heads: int = 0  # KDA heads (global)
    kda_head_dim: int = 128
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    moe_intermediate: int = 0
    experts_per_token: int = 0
    dense_intermediate: int = 0
    source: str = "preset"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def mla_layers(self) -> list[int]:
        """1-indexed MLA layers."""
        return [i + 1 for i, k in enumerate(self.layer_kinds) if k == "mla"]

    @property
    def kda_layers(self) -> list[int]:
        """1-indexed KDA layers."""
        return [i + 1 for i, k in enumerate(self.layer_kinds) if k == "kda"]

    def post_proj_bytes(self, tokens: int) -> int:
        """Bytes of one post-attention-projection copy: [tokens, hidden] x dtype size."""
        return tokens * self.hidden * self.dtype_bytes


def _kinds_from_kda(num_layers: int, kda_1indexed: list[int]) -> tuple[str, ...]:
    kda = set(kda_1indexed)
    return tuple("kda" if i + 1 in kda else "mla" for i in range(num_layers))


def _every_fourth_plus_last(num_layers: int) -> list[int]:
    """1-indexed KDA layers when MLA sits on every 4th layer and on the last one."""
    mla = {i for i in range(4, num_layers + 1, 4)} | {num_layers}
    return [i for i in range(1, num_layers + 1) if i not in mla]


PRESETS: dict[str, ModelLayout] = {
    "kimi-k3": ModelLayout(
        name="kimi-k3",
        hf_id="moonshotai/Kimi-K3",
        hidden=7168,
        layer_kinds=_kinds_from_kda(93, _every_fourth_plus_last(93)),
        num_heads=96,
        kda_heads=96,
        q_lora_rank=1536,
        kv_lora_rank=512,
        moe_intermediate=3072,
        experts_per_token=16,
        dense_intermediate=33792,
    ),
    "kimi-linear-48b-a3b": ModelLayout(
        name="kimi-linear-48b-a3b",
        hf_id="moonshotai/Kimi-Linear-48B-A3B-Instruct",
        hidden=2304,
        layer_kinds=_kinds_from_kda(27, _every_fourth_plus_last(27)),
        num_heads=32,
        kda_heads=32,
        q_lora_rank=None,
        kv_lora_rank=512,
        moe_intermediate=1024,
        experts_per_token=8,
        dense_intermediate=9216,
    ),
}


def load_layout(spec: str) -> ModelLayout:
    """A preset name, a config.json path, or a model directory holding config.json."""
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
    return layout_from_config(config, name=os.path.basename(os.path.dirname(os.path.abspath(path))), source=path)


def layout_from_config(config: dict[str, Any], *, name: str, source: str = "config") -> ModelLayout:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    try:
        num_layers = int(text["num_hidden_layers"])
        hidden = int(text["hidden_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CopyprofError(f"model config lacks num_hidden_layers / hidden_size ({exc})", path=source) from exc
    lac = text.get("linear_attn_config") or {}
    kda = lac.get("kda_layers")
    if not isinstance(kda, list):
        raise CopyprofError("model config has no linear_attn_config.kda_layers: not a KDA/MLA hybrid", path=source)
    dtype = str(text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    return ModelLayout(
        name=name,
        hidden=hidden,
        layer_kinds=_kinds_from_kda(num_layers, [int(x) for x in kda]),
        dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        num_heads=int(text.get("num_attention_heads") or 0),
        kda_heads=int(lac.get("num_heads") or 0),
        kda_head_dim=int(lac.get("head_dim") or 128),
        q_lora_rank=text.get("q_lora_rank"),
        kv_lora_rank=int(text.get("kv_lora_rank") or 512),
        qk_nope_head_dim=int(text.get("qk_nope_head_dim") or 128),
        qk_rope_head_dim=int(text.get("qk_rope_head_dim") or 64),
        v_head_dim=int(text.get("v_head_dim") or 128),
        moe_intermediate=int(text.get("moe_intermediate_size") or 0),
        experts_per_token=int(text.get("num_experts_per_token") or 0),
        dense_intermediate=int(text.get("intermediate_size") or 0),
        source=source,
    )
