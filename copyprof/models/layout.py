"""A decoder model's layout: the kind of every layer and the shapes copyprof needs.

Why kinds are plain strings: the same caller-owned-buffer copy lives in models whose layers
are Kimi's ``mla``/``kda``, Qwen3-Next's ``full_attention``/``linear_attention``, gpt-oss's
``sliding_attention``/``full_attention``, Nemotron-H's ``moe``/``mlp`` blocks, ... A layout
keeps the names its config uses (Hugging Face's ``layer_types`` names where the config has
them) and ``mechanism`` says how a kind computes (what the replica engine builds for it).

Shapes are global (before tensor parallelism); the replica divides them by TP.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}

# How a layer kind computes, for the replica engine and the reports' wording. Kinds a config
# names but no entry here covers get "attention" (a full softmax-attention stand-in).
MECHANISMS = ("mla", "attention", "kda", "gdn", "mamba", "mlp-only")
# Kinds of layers that hold only an MLP or MoE block, no mixer (Nemotron-H's ``-`` and ``E``
# layers, transformers ``NemotronHConfig.layers_block_type``). A layout with such layers is
# made of single-block layers: every other layer then holds only its mixer (attention, mamba,
# ...), not an attention + MLP pair, and the census reads each layer as one block.
MLP_ONLY_KINDS = frozenset({"mlp", "moe"})


def single_block_layers(layer_kinds: tuple[str, ...]) -> bool:
    """Whether a layout's layers are single blocks (some MLP-only, the rest mixer-only)."""
    return any(k in MLP_ONLY_KINDS for k in layer_kinds)


@dataclass(frozen=True)
class ModelLayout:
    """Per-layer kinds (forward order, index 0 = layer 1) plus shapes.

    ``mechanism`` maps each kind to one of MECHANISMS. ``dense_layers``: 0-based layers with a
    dense MLP instead of MoE (first_k_dense_replace, mlp_only_layers, ...). Attention shapes:
    ``num_heads``/``num_kv_heads``/``head_dim`` for softmax attention (and MLA query heads);
    the MLA latent sizes; ``kda_*`` for Kimi Delta Attention; ``linear_*`` for gated
    delta-net / mamba (value heads carry the state width)."""

    name: str
    hidden: int
    layer_kinds: tuple[str, ...]
    mechanism: dict[str, str] = field(default_factory=dict, compare=True, hash=False)
    dtype_bytes: int = 2
    hf_id: str | None = None
    model_type: str = ""
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    kda_heads: int = 0
    kda_head_dim: int = 128
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel: int = 4
    moe_intermediate: int = 0
    experts_per_token: int = 0
    shared_expert_intermediate: int = 0
    dense_intermediate: int = 0
    dense_layers: tuple[int, ...] = ()
    vocab: int = 0
    sliding_window: int = 0
    source: str = "preset"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __hash__(self) -> int:  # dict fields are excluded from the generated hash
        return hash((self.name, self.hidden, self.layer_kinds, self.dtype_bytes, self.source))

    @property
    def layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def kinds(self) -> dict[str, int]:
        """Each kind with its number of layers: softmax-attention kinds first (MLA, full,
        sliding), then linear ones, then attention-free blocks; ties in order of first
        appearance. (A fixed order keeps reports stable: Kimi reads MLA, then KDA.)"""
        counts: dict[str, int] = {}
        for k in self.layer_kinds:
            counts[k] = counts.get(k, 0) + 1
        rank = {m: i for i, m in enumerate(MECHANISMS)}
        order = sorted(counts, key=lambda k: rank.get(self.mechanism_of(k), len(rank)))
        return {k: counts[k] for k in order}

    def layers_of(self, kind: str) -> list[int]:
        """1-indexed layers of ``kind``."""
        return [i + 1 for i, k in enumerate(self.layer_kinds) if k == kind]

    def mechanism_of(self, kind: str) -> str:
        return self.mechanism.get(kind, "attention")

    @property
    def mla_layers(self) -> list[int]:
        """1-indexed MLA layers (Kimi / DeepSeek naming)."""
        return self.layers_of("mla")

    @property
    def kda_layers(self) -> list[int]:
        """1-indexed KDA layers (Kimi naming)."""
        return self.layers_of("kda")

    def post_proj_bytes(self, tokens: int) -> int:
        """Bytes of one post-attention-projection copy: [tokens, hidden] x dtype size."""
        return tokens * self.hidden * self.dtype_bytes

    def kind_sequence(self) -> str:
        """The layer kinds as one compact string for run.json (``KKKM…`` style): each kind's
        initial, upper case; ambiguous initials fall back to the kind's index."""
        initials = {k: k[:1].upper() for k in self.kinds}
        if len(set(initials.values())) < len(initials):
            initials = {k: str(i) for i, k in enumerate(self.kinds)}
        return "".join(initials[k] for k in self.layer_kinds)

    def to_json(self) -> dict[str, Any]:
        """The ``layout`` object of the report JSON (README contract): Kimi layouts keep
        ``mla_layers``/``kda_layers`` (counts); every layout has ``kinds``."""
        out: dict[str, Any] = {"name": self.name, "layers": self.layers}
        if {"mla", "kda"} & set(self.kinds):
            out["mla_layers"] = len(self.mla_layers)
            out["kda_layers"] = len(self.kda_layers)
        out.update(hidden=self.hidden, dtype_bytes=self.dtype_bytes, kinds=self.kinds)
        return out


def kind_label(kind: str) -> str:
    """A kind as prose: Kimi's and DeepSeek's acronyms upper case (MLA, KDA), Hugging Face's
    ``full_attention`` as "full-attention"."""
    return kind.upper() if kind in ("mla", "kda", "gdn") else kind.replace("_", "-")
