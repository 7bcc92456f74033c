"""The per-rank sizes of one TP rank's decode step, read from a model layout.

Shared by the layers (``layers.py``) and the model that stacks them (``model.py``), so
neither imports the other for its types.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout

DEFAULT_CONTEXT = 4096
DEFAULT_VOCAB = 163840  # Kimi-Linear-48B vocab_size (vllm-and-kimi.md §2.3; none given for K3), when a layout has none


@dataclass(frozen=True)
class RankShapes:
    """The per-rank sizes one TP rank sees in a decode step of ``tokens`` tokens."""

    tokens: int
    hidden: int
    tp: int
    mla_heads: int  # local MLA query heads = num_heads / tp
    kda_heads: int  # local KDA heads = kda_heads / tp
    kda_head_dim: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dense_intermediate: int  # per rank
    moe_intermediate: int  # per rank, summed over the top-k experts (+ shared expert) a token visits
    context: int
    vocab: int  # per rank (vocab / tp)
    attn_q_heads: int = 0  # softmax attention: local query heads
    attn_kv_heads: int = 0  # local KV heads (replicated when TP exceeds them, as vLLM does)
    attn_head_dim: int = 0
    attn_gate: bool = False  # Qwen3-Next attn_output_gate
    sliding_window: int = 0
    lin_k_heads: int = 0  # gated delta-net key heads / mamba groups, local
    lin_v_heads: int = 0  # value heads / mamba heads, local
    lin_k_dim: int = 0  # key head dim / mamba d_state
    lin_v_dim: int = 0  # value head dim / mamba head dim
    conv_kernel: int = 4

    @classmethod
    def from_layout(cls, layout: ModelLayout, *, tp: int, tokens: int, context: int = DEFAULT_CONTEXT,
                    vocab: int | None = None) -> RankShapes:
        """Derive one rank's shapes; refuse a TP size that does not divide the heads (vLLM asserts too)."""
        if tp < 1 or tokens < 1 or context < 1:
            raise CopyprofError(f"tp, concurrency and context must be >= 1 (got tp={tp}, N={tokens}, context={context})")
        mechs = {layout.mechanism_of(k) for k in layout.kinds}
        needs: dict[str, int] = {}
        for mech, what, n in (("mla", "num_attention_heads (MLA)", layout.num_heads),
                              ("kda", "linear_attn_config.num_heads (KDA)", layout.kda_heads),
                              ("attention", "num_attention_heads", layout.num_heads),
                              ("gdn", "linear_num_value_heads", layout.linear_num_value_heads),
                              ("gdn", "linear_num_key_heads", layout.linear_num_key_heads),
                              ("mamba", "mamba heads", layout.linear_num_value_heads)):
            if mech in mechs:
                if n <= 0:
                    raise CopyprofError(f"model {layout.name} has {mech} layers but its config gives no {what}")
                needs[what] = n
        for what, n in needs.items():
            if n % tp:
                raise CopyprofError(f"TP {tp} does not divide {what}={n} of {layout.name}; pick a TP that divides it")
        kv = layout.num_kv_heads or layout.num_heads
        if "attention" in mechs and kv and tp % kv and kv % tp:
            raise CopyprofError(f"TP {tp} neither divides nor is a multiple of num_key_value_heads={kv}")
        dense = layout.dense_intermediate or 4 * layout.hidden
        moe_total = (layout.moe_intermediate * max(layout.experts_per_token, 1) + layout.shared_expert_intermediate
                     if layout.moe_intermediate else dense)
        gated = layout.model_type.startswith(("qwen3_next", "qwen3_5"))
        return cls(
            tokens=tokens, hidden=layout.hidden, tp=tp,
            mla_heads=layout.num_heads // tp, kda_heads=layout.kda_heads // tp,
            kda_head_dim=layout.kda_head_dim, q_lora_rank=layout.q_lora_rank,
            kv_lora_rank=layout.kv_lora_rank, qk_nope_head_dim=layout.qk_nope_head_dim,
            qk_rope_head_dim=layout.qk_rope_head_dim, v_head_dim=layout.v_head_dim,
            dense_intermediate=max(dense // tp, 1), moe_intermediate=max(moe_total // tp, 1),
            context=context, vocab=max((vocab or layout.vocab or DEFAULT_VOCAB) // tp, 1),
            attn_q_heads=layout.num_heads // tp if "attention" in mechs else 0,
            attn_kv_heads=max(kv // tp, 1) if "attention" in mechs else 0,
            attn_head_dim=layout.head_dim, attn_gate=gated, sliding_window=layout.sliding_window,
            lin_k_heads=layout.linear_num_key_heads // tp, lin_v_heads=layout.linear_num_value_heads // tp,
            lin_k_dim=layout.linear_key_head_dim, lin_v_dim=layout.linear_value_head_dim,
            conv_kernel=layout.linear_conv_kernel,
        )

    @property
    def kda_width(self) -> int:
        """KDA channels on this rank (local heads x head dim): the placement copy's width."""
        return self.kda_heads * self.kda_head_dim

    def placement_bytes(self, mechanism: str) -> int:
        """Bytes of the copy a mechanism makes inside its attention (0 for none)."""
        if mechanism == "kda":
            return self.tokens * self.kda_width * 2
        if mechanism == "gdn":
            return self.tokens * self.lin_v_heads * self.lin_v_dim * 2
        return 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
