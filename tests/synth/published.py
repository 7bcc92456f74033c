"""Layer kinds as the models' published configs state them, written out here by hand.

These are the test suite's own transcription — deliberately not derived from copyprof's
presets or its config rules — so that a preset or a rule that moves a layer fails a test.
Sources, per model:

- Kimi-K3: HF ``config.json`` ``text_config.linear_attn_config.full_attn_layers`` as
  transcribed by third parties (vllm-and-kimi.md §2.4): 4, 8, ..., 88, 92, 93 (1-indexed),
  corroborated by ROCm/aiter #4541 (0-indexed 83, 87, 91, 92 are the last four full layers).
- Kimi-Linear-48B-A3B: ``full_attn_layers`` [4, 8, 12, 16, 20, 24, 27] (§2.3).
- Qwen3-Next-80B-A3B: ``full_attention_interval`` 4 over 48 layers: full attention on
  1-indexed 4, 8, ..., 48 (transformers ``Qwen3NextConfig``).
- DeepSeek-V3: 61 MLA layers (``inference/configs/config_671B.json``, n_layers 61).
- gpt-oss-20b: ``layer_types`` alternate sliding / full from layer 1 (24 layers).
"""
from __future__ import annotations

K3_FULL_ATTN_1INDEXED = (4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93)
K3_KINDS = tuple("mla" if i in K3_FULL_ATTN_1INDEXED else "kda" for i in range(1, 94))

KIMI_LINEAR_FULL_ATTN_1INDEXED = (4, 8, 12, 16, 20, 24, 27)
KIMI_LINEAR_KINDS = tuple("mla" if i in KIMI_LINEAR_FULL_ATTN_1INDEXED else "kda" for i in range(1, 28))

QWEN3_NEXT_FULL_1INDEXED = (4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48)
QWEN3_NEXT_KINDS = tuple("full_attention" if i in QWEN3_NEXT_FULL_1INDEXED else "linear_attention" for i in range(1, 49))

DEEPSEEK_V3_KINDS = ("mla",) * 61
GPT_OSS_20B_KINDS = ("sliding_attention", "full_attention") * 12

PUBLISHED_KINDS = {
    "kimi-k3": K3_KINDS, "kimi-linear-48b-a3b": KIMI_LINEAR_KINDS, "qwen3-next-80b-a3b": QWEN3_NEXT_KINDS,
    "deepseek-v3": DEEPSEEK_V3_KINDS, "gpt-oss-20b": GPT_OSS_20B_KINDS,
}
