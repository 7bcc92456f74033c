"""The replica model: one TP rank's decode step of any decoder layout, at real per-rank shapes.

Why a replica: the copy that PRs like vLLM #50592 remove (``output[:] = o_proj(x)``, one
``[N, hidden]`` bf16 device-to-device copy per decoder layer per step) can be measured without
vLLM, weights or a multi-GPU box, as long as the step around it has the same layer order,
the same tensor shapes on one rank, and the same copy semantics. This module builds that
step with plain torch ops and random bf16 weights. It is a stand-in, not a numerical model:

* Per layer: input RMSNorm -> attention stand-in of the layer's mechanism (MLA, KDA, gated
  delta-net, softmax attention, mamba: capture/replica_layers.py) -> post-projection copy into
  a caller-owned buffer, unless this arm removes that kind's copies (direct return) ->
  residual add -> post-attention RMSNorm -> MLP (dense layers) or MoE stand-in (one GEMM pair
  sized like the top-k experts' and the shared expert's per-rank work) -> residual add. Layers
  without attention (Nemotron-H ``moe`` / ``mlp`` blocks) are norm -> MLP -> residual add.
* Not modelled (single rank, no vLLM): all-reduces, KV-cache writes, the MoE router,
  rotary embeddings, quantised experts. Absolute step times are therefore not vLLM's; the
  *difference* between arms is the removed copies.

Arms are sets of layer kinds whose copies are removed: ``baseline`` none, ``candidate``
every kind's, and any partial set (``--remove KIND,...``), e.g. vLLM #50847 removed only
Kimi-K3's MLA copies. Both copies are same-dtype contiguous ``copy_`` calls, which PyTorch
turns into ``cudaMemcpyAsync(DeviceToDevice)`` — the same route vLLM's ``output[:] = ...`` takes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from copyprof.capture.replica_layers import GDN, KDA, MLA, Attention, Mamba, ones, weight
from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout

DEFAULT_CONTEXT = 4096
DEFAULT_VOCAB = 163840  # Kimi-Linear / Kimi-K3 vocab_size (vllm-and-kimi.md §2.3), when a layout has none
EPS = 1e-5
ATTENTION_FREE = "mlp-only"


def arm_removals(layout: ModelLayout, remove: tuple[str, ...] = ()) -> dict[str, frozenset[str]]:
    """The replica's arms: baseline (no copy removed), candidate (every kind with attention),
    and ``partial`` (the kinds in ``remove``) when asked for."""
    kinds = [k for k in layout.kinds if layout.mechanism_of(k) != ATTENTION_FREE]
    arms = {"baseline": frozenset(), "candidate": frozenset(kinds)}
    if remove:
        unknown = sorted(set(remove) - set(kinds))
        if unknown:
            raise CopyprofError(f"--remove names kinds {unknown} that {layout.name} has no attention layers of "
                                f"(its kinds: {', '.join(kinds)})")
        if set(remove) == set(kinds):
            raise CopyprofError("--remove names every kind: that is the candidate arm")
        arms["partial"] = frozenset(remove)
    return arms


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


class _MLP:
    """Dense MLP or MoE stand-in: SiLU-gated GEMM pair of per-rank width ``inter``."""

    def __init__(self, hidden: int, inter: int, device: torch.device) -> None:
        self.inter = inter
        self.w_gu = weight((hidden, 2 * inter), device)
        self.w_down = weight((inter, hidden), device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = (x @ self.w_gu).split(self.inter, dim=-1)
        return (F.silu(gate) * up) @ self.w_down


def attention_for(mechanism: str, s: RankShapes, device: torch.device, window: int = 0) -> Any:
    """The stand-in of one layer mechanism (None for attention-free blocks)."""
    if mechanism == ATTENTION_FREE:
        return None
    if mechanism == "mla":
        return MLA(s, device)
    if mechanism == "kda":
        return KDA(s, device)
    if mechanism == "gdn":
        return GDN(s, device)
    if mechanism == "mamba":
        return Mamba(s, device)
    return Attention(s, device, window=window or None)


class ReplicaModel:
    """All decoder layers of one rank, plus a static input and a sampler stand-in.

    The weights and recurrent states are shared by every arm: ``step(removed)`` differs only
    in which layers copy their projection into a caller-owned buffer, so graphs captured for
    the arms run the same kernels on the same memory apart from those copies.
    """

    def __init__(self, layout: ModelLayout, shapes: RankShapes, device: torch.device | str, seed: int = 0) -> None:
        self.layout = layout
        self.shapes = shapes
        self.device = torch.device(device)
        torch.manual_seed(seed)
        s, dev = shapes, self.device
        self.attn = [attention_for(layout.mechanism_of(kind), s, dev,
                                   s.sliding_window if kind == "sliding_attention" else 0)
                     for kind in layout.layer_kinds]
        dense = set(layout.dense_layers)
        self.mlp = [_MLP(s.hidden, s.dense_intermediate if i in dense else s.moe_intermediate, dev)
                    for i in range(layout.layers)]
        self.norm_in = [ones(s.hidden, dev) for _ in layout.layer_kinds]
        self.norm_post = [ones(s.hidden, dev) for _ in layout.layer_kinds]
        self.norm_final = ones(s.hidden, dev)
        self.w_lm = weight((s.hidden, s.vocab), dev)
        # Static step input (the embedding output stand-in); CUDA graphs need fixed addresses.
        self.hidden_in = torch.empty((s.tokens, s.hidden), device=dev, dtype=torch.bfloat16).normal_()

    def _attention(self, i: int, x: torch.Tensor, removed: frozenset[str]) -> torch.Tensor:
        if self.layout.layer_kinds[i] not in removed:
            # vLLM <= 0.30 (Kimi), Qwen3-Next: the decoder layer allocates a buffer and the attention
            # module does output[:] = o_proj(...): one [N, hidden] same-dtype D2D copy.
            output = torch.empty_like(x)
            output[:] = self.attn[i].forward(x)
            return output
        return self.attn[i].forward(x)  # vLLM >= 0.31 (#50592): return o_proj(...) directly

    def step(self, removed: frozenset[str]) -> torch.Tensor:
        """One decode step (all layers, final norm) with the copies of ``removed`` kinds gone;
        returns the final hidden states."""
        s = self.shapes
        h = self.hidden_in
        for i in range(self.layout.layers):
            if self.attn[i] is not None:
                x = F.rms_norm(h, (s.hidden,), self.norm_in[i], EPS)
                h = h + self._attention(i, x, removed)
            x = F.rms_norm(h, (s.hidden,), self.norm_post[i], EPS)
            h = h + self.mlp[i].forward(x)
        return F.rms_norm(h, (s.hidden,), self.norm_final, EPS)

    def sample(self, final_hidden: torch.Tensor) -> torch.Tensor:
        """Sampler stand-in run between steps, outside the step annotation (as in vLLM).

        Logits over this rank's vocab shard, softmax, argmax, and the token ids to the host
        (which also keeps host and device in step, like vLLM's per-step output sync).
        """
        logits = final_hidden @ self.w_lm  # [N, vocab / tp]
        probs = torch.softmax(logits.float(), dim=-1)
        return probs.argmax(dim=-1).to("cpu")


def weight_bytes(model: ReplicaModel) -> int:
    """Bytes of weights, caches and states the replica allocated (for run.json and sanity)."""
    total = 0
    seen: set[int] = set()

    def add(t: Any) -> None:
        nonlocal total
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()

    for obj in [a for a in model.attn if a is not None] + model.mlp:
        for v in vars(obj).values():
            add(v)
    for t in [*model.norm_in, *model.norm_post, model.norm_final, model.w_lm, model.hidden_in]:
        add(t)
    return total

