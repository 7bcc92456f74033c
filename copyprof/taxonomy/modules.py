"""Module classes, kept as data: which ``nn.Module`` around a copy says which block issued it.

A torch-profiler trace with Python stacks names each module call ``nn.Module: <Class>_<i>``;
the innermost classified module between a copy and its decoder layer is the block that issued
it — evidence of the copy's role independent of the kernel order. Each pattern says where it
was seen (corpus/: real vLLM 0.26.0 eager captures with stacks on the H200).
"""
from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache

DECODER_LAYER_MODULES: tuple[tuple[str, str], ...] = (
    (r"DecoderLayer$", "KimiDecoderLayer, DeepseekV2DecoderLayer, OlmoHybridDecoderLayer, JambaMambaDecoderLayer, "
                       "Qwen3DecoderLayer (corpus/)"),
    (r"(Transformer|Hybrid|Mamba)?Block$|^Layer$", "block-named layers of other vLLM models (GPT-2, Falcon-H1)"),
)
ATTENTION_MODULES: tuple[tuple[str, str], ...] = (
    (r"Attention|Attn|MLA", "KimiGatedDeltaNetAttention, KimiMLAAttention, OlmoHybridGatedDeltaNetAttention (corpus/)"),
    (r"Mixer|Mamba|SSM|DeltaNet|GDN|KDA|ShortConv|LinearAttention", "MambaMixer (corpus/ Jamba), MambaMixer2, ShortConv"),
)
MLP_MODULES: tuple[tuple[str, str], ...] = (
    (r"MoE|Moe|MLP|Experts?|FeedForward|FFN|MoERunner", "KimiMoE, DeepseekV2MoE, JambaMoE and their MoERunner (corpus/)"),
)


class Block(StrEnum):
    """Which part of a decoder layer issued a copy, as its stack says."""

    ATTENTION = "attention"
    MLP = "mlp"
    LAYER = "layer"  # inside a decoder layer, in no classified module
    OUTSIDE = "outside"  # no decoder layer on the stack
    UNKNOWN = ""  # no module frames (no stacks, or a graph replay)


def _rx(patterns: tuple[tuple[str, str], ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p, _ in patterns))


_LAYER, _ATTN, _MLP = _rx(DECODER_LAYER_MODULES), _rx(ATTENTION_MODULES), _rx(MLP_MODULES)
MODULE_PREFIX = "nn.Module: "


@lru_cache(maxsize=4096)
def module_class(frame: str) -> str:
    """``nn.Module: KimiMoE_3`` -> ``KimiMoE``; "" for a frame that is not a module call."""
    if not frame.startswith(MODULE_PREFIX):
        return ""
    return re.sub(r"_\d+$", "", frame[len(MODULE_PREFIX):])


def block_of(stack: tuple[str, ...] | list[str]) -> Block:
    """The block a copy's module frames (innermost first; other frames are skipped) put it in."""
    classes = [c for c in (module_class(f) for f in stack) if c]
    if not classes:
        return Block.UNKNOWN
    for c in classes:
        if _LAYER.search(c):
            return Block.LAYER
        if _MLP.search(c):
            return Block.MLP
        if _ATTN.search(c):
            return Block.ATTENTION
    return Block.OUTSIDE
