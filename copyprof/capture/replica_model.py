"""The replica model: one TP rank's decode step of a KDA/MLA hybrid, at real per-rank shapes.

Why a replica: the copy that PRs like vLLM #50592 remove (``output[:] = o_proj(x)``, one
``[N, hidden]`` bf16 device-to-device copy per decoder layer per step) can be measured without
vLLM, weights or a multi-GPU box, as long as the step around it has the same layer order,
the same tensor shapes on one rank, and the same copy semantics. This module builds that
step with plain torch ops and random bf16 weights. It is a stand-in, not a numerical model:

* Per layer: input RMSNorm -> attention stand-in -> ``o_proj`` (local in -> hidden) ->
  post-projection copy into a caller-owned buffer (arm ``baseline``) or direct return (arm
  ``candidate``) -> residual add -> post-attention RMSNorm -> MLP (layer 1 dense) or MoE
  stand-in (one GEMM pair sized like the top-k experts' per-rank work) -> residual add.
* MLA (absorbed decode): fused latent projections, ``W_UK`` bmm, attention over a per-layer
  KV cache of ``context`` tokens per request, ``W_UV`` up-projection.
* KDA: fused q/k/v/gate projections, a delta-rule update of a ``[N, heads, 128, 128]`` fp32
  state, and the recurrent-output placement copy ``core_attn_out[:N] = o`` that vLLM's
  Kimi-Linear KDA performs in both arms (the patch does not remove it), then a gated o_norm.
* Not modelled (single rank, no vLLM): the all-reduce after o_proj and after the MoE, the
  KDA short convolution, KV-cache writes, the MoE router, shared experts, rotary embedding,
  the MLA output gate, quantised (MXFP4) experts. Absolute step times are therefore not
  vLLM's; the *difference* between arms is the removed copies.

Both copies are same-dtype contiguous ``copy_`` calls, which PyTorch turns into
``cudaMemcpyAsync(DeviceToDevice)`` — the same route vLLM's ``output[:] = ...`` takes.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout

ARMS = ("baseline", "candidate")
DEFAULT_CONTEXT = 4096
DEFAULT_VOCAB = 163840  # Kimi-Linear / Kimi-K3 vocab_size (vllm-and-kimi.md §2.3)
EPS = 1e-5


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
    moe_intermediate: int  # per rank, summed over the top-k experts a token visits
    context: int
    vocab: int  # per rank (vocab / tp)

    @classmethod
    def from_layout(cls, layout: ModelLayout, *, tp: int, tokens: int, context: int = DEFAULT_CONTEXT,
                    vocab: int = DEFAULT_VOCAB) -> RankShapes:
        """Derive one rank's shapes; refuse a TP size that does not divide the heads (vLLM asserts too)."""
        if tp < 1 or tokens < 1 or context < 1:
            raise CopyprofError(f"tp, concurrency and context must be >= 1 (got tp={tp}, N={tokens}, context={context})")
        needs = {"num_heads (MLA)": layout.num_heads, "kda_heads": layout.kda_heads}
        if "mla" in layout.layer_kinds and layout.num_heads <= 0:
            raise CopyprofError(f"model {layout.name} has MLA layers but num_heads is unknown")
        if "kda" in layout.layer_kinds and layout.kda_heads <= 0:
            raise CopyprofError(f"model {layout.name} has KDA layers but kda_heads is unknown")
        for what, n in needs.items():
            if n and n % tp:
                raise CopyprofError(f"TP {tp} does not divide {what}={n} of {layout.name}; pick a TP that divides it")
        dense = layout.dense_intermediate or 4 * layout.hidden
        moe_total = (layout.moe_intermediate * max(layout.experts_per_token, 1)) or dense
        return cls(
            tokens=tokens, hidden=layout.hidden, tp=tp,
            mla_heads=layout.num_heads // tp, kda_heads=layout.kda_heads // tp,
            kda_head_dim=layout.kda_head_dim, q_lora_rank=layout.q_lora_rank,
            kv_lora_rank=layout.kv_lora_rank, qk_nope_head_dim=layout.qk_nope_head_dim,
            qk_rope_head_dim=layout.qk_rope_head_dim, v_head_dim=layout.v_head_dim,
            dense_intermediate=max(dense // tp, 1), moe_intermediate=max(moe_total // tp, 1),
            context=context, vocab=max(vocab // tp, 1),
        )

    @property
    def kda_width(self) -> int:
        """KDA channels on this rank (local heads x head dim): the placement copy's width."""
        return self.kda_heads * self.kda_head_dim

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _w(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype = torch.bfloat16,
       fan_in: int | None = None) -> torch.Tensor:
    """Random weight with std 1/sqrt(fan_in) so activations stay O(1) over ~100 layers (no inf/NaN)."""
    t = torch.empty(shape, device=device, dtype=dtype)
    return t.normal_(0.0, 1.0 / math.sqrt(fan_in or shape[0]))


def _ones(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, device=device, dtype=torch.bfloat16)


class _MLA:
    """Absorbed-MLA decode stand-in for the local heads of one rank."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        h, qk = s.mla_heads, s.qk_nope_head_dim + s.qk_rope_head_dim
        lat = s.kv_lora_rank + s.qk_rope_head_dim
        # vLLM fuses q_a and kv_a into one replicated GEMM when q_lora is set (fused_qkv_a_proj).
        first_q = s.q_lora_rank if s.q_lora_rank else h * qk
        self.w_a = _w((s.hidden, first_q + lat), device)
        self.q_norm = _ones(s.q_lora_rank, device) if s.q_lora_rank else None
        self.w_qb = _w((s.q_lora_rank, h * qk), device) if s.q_lora_rank else None
        self.kv_norm = _ones(s.kv_lora_rank, device)
        self.w_uk = _w((h, s.qk_nope_head_dim, s.kv_lora_rank), device)
        self.w_uv = _w((h, s.kv_lora_rank, s.v_head_dim), device)
        self.w_o = _w((h * s.v_head_dim, s.hidden), device)
        # Per-request latent KV cache (kv_lora + rope) over `context` tokens; read every step.
        self.kv_cache = torch.empty((s.tokens, s.context, lat), device=device, dtype=torch.bfloat16).normal_()
        self.scale = 1.0 / math.sqrt(qk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, n, h = self.s, x.shape[0], self.s.mla_heads
        a = x @ self.w_a
        first_q = s.q_lora_rank if s.q_lora_rank else h * (s.qk_nope_head_dim + s.qk_rope_head_dim)
        q, kv_lat = a[:, :first_q], a[:, first_q:]
        if self.w_qb is not None:
            q = F.rms_norm(q, (q.shape[-1],), self.q_norm, EPS) @ self.w_qb
        q = q.view(n, h, -1)
        q_nope, q_pe = q[..., : s.qk_nope_head_dim], q[..., s.qk_nope_head_dim:]
        # The normed latent is what vLLM would write to the cache; the replica only reads the cache.
        _kv_c = F.rms_norm(kv_lat[:, : s.kv_lora_rank], (s.kv_lora_rank,), self.kv_norm, EPS)
        q_lat = torch.bmm(q_nope.transpose(0, 1), self.w_uk).transpose(0, 1)  # [n, h, kv_lora]
        q_full = torch.cat([q_lat, q_pe], dim=-1)  # [n, h, kv_lora + rope]
        scores = torch.bmm(q_full, self.kv_cache.transpose(1, 2)).mul_(self.scale)  # [n, h, ctx]
        p = torch.softmax(scores, dim=-1)
        o_lat = torch.bmm(p, self.kv_cache[:, :, : s.kv_lora_rank])  # [n, h, kv_lora]
        o = torch.bmm(o_lat.transpose(0, 1), self.w_uv).transpose(0, 1).reshape(n, h * s.v_head_dim)
        return o @ self.w_o  # o_proj: local heads*v -> hidden (RowParallel; all-reduce not modelled)


class _KDA:
    """Kimi Delta Attention decode stand-in for the local heads of one rank."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        d, h, hd = s.kda_width, s.kda_heads, s.kda_head_dim
        # One fused GEMM for q/k/v (laid out per head as [h, 3, hd] so that per-head views need no
        # copy), the output gate g, the low-rank decay-gate input f_a, and beta.
        self.split = [3 * d, d, hd, h]
        self.w_in = _w((s.hidden, sum(self.split)), device)
        self.w_fb = _w((hd, d), device)
        self.o_norm = _ones(hd, device)
        self.w_o = _w((d, s.hidden), device)
        # Recurrent state per request and head: [N, heads, dk, dv] fp32, updated in place each step.
        self.state = torch.empty((s.tokens, h, hd, hd), device=device, dtype=torch.float32).normal_(0.0, 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, n = self.s, x.shape[0]
        h, hd, d = s.kda_heads, s.kda_head_dim, s.kda_width
        qkv, g, fa, b = (x @ self.w_in).split(self.split, dim=-1)
        qkv = qkv.float().view(n * h, 3, hd)
        qk = F.normalize(qkv[:, :2], dim=-1)  # L2-normalised q and k, as in KDA
        q, k, v = qk[:, 0:1], qk[:, 1:2], qkv[:, 2:3]  # [N*h, 1, hd] views
        decay = torch.sigmoid(fa @ self.w_fb).view(n * h, hd, 1)  # per-key-channel forget gate
        beta = torch.sigmoid(b).view(n * h, 1, 1)
        st = self.state.view(n * h, hd, hd)
        st.mul_(decay)  # S <- diag(decay) S
        u = (v - torch.bmm(k, st)).mul_(beta)  # beta (v - k^T S)
        st.baddbmm_(k.transpose(1, 2), u)  # S <- S + k u^T (delta rule)
        o = torch.bmm(q, st).view(n, d).to(torch.bfloat16)  # q^T S
        # Recurrent-output placement copy (vLLM kimi_gdn_linear_attn: core_attn_out[0, :n] = ...):
        # same-dtype contiguous [N, local_heads*128] copy, present in BOTH arms.
        core_attn_out = torch.empty((n, d), device=x.device, dtype=torch.bfloat16)
        core_attn_out[:n] = o
        normed = F.rms_norm(core_attn_out.view(n, h, hd), (hd,), self.o_norm, EPS)
        gated = normed * torch.sigmoid(g).view(n, h, hd)
        return gated.view(n, d) @ self.w_o  # o_proj: local channels -> hidden


class _MLP:
    """Dense MLP (layer 1) or MoE stand-in: SiLU-gated GEMM pair of per-rank width ``inter``."""

    def __init__(self, hidden: int, inter: int, device: torch.device) -> None:
        self.inter = inter
        self.w_gu = _w((hidden, 2 * inter), device)
        self.w_down = _w((inter, hidden), device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = (x @ self.w_gu).split(self.inter, dim=-1)
        return (F.silu(gate) * up) @ self.w_down


class ReplicaModel:
    """All decoder layers of one rank, plus a static input and a sampler stand-in.

    The weights and recurrent state are shared by both arms: ``step("baseline")`` and
    ``step("candidate")`` differ only in the post-projection copy, so graphs captured for the
    two arms run the same kernels on the same memory apart from that copy.
    """

    def __init__(self, layout: ModelLayout, shapes: RankShapes, device: torch.device | str, seed: int = 0) -> None:
        self.layout = layout
        self.shapes = shapes
        self.device = torch.device(device)
        torch.manual_seed(seed)
        s, dev = shapes, self.device
        self.attn: list[_MLA | _KDA] = [(_MLA(s, dev) if kind == "mla" else _KDA(s, dev)) for kind in layout.layer_kinds]
        # First layer dense (first_k_dense_replace = 1 in both released configs), the rest MoE.
        self.mlp = [_MLP(s.hidden, s.dense_intermediate if i == 0 else s.moe_intermediate, dev)
                    for i in range(layout.layers)]
        self.norm_in = [_ones(s.hidden, dev) for _ in layout.layer_kinds]
        self.norm_post = [_ones(s.hidden, dev) for _ in layout.layer_kinds]
        self.norm_final = _ones(s.hidden, dev)
        self.w_lm = _w((s.hidden, s.vocab), dev)
        # Static step input (the embedding output stand-in); CUDA graphs need fixed addresses.
        self.hidden_in = torch.empty((s.tokens, s.hidden), device=dev, dtype=torch.bfloat16).normal_()

    def _attention(self, i: int, x: torch.Tensor, arm: str) -> torch.Tensor:
        if arm == "baseline":
            # vLLM <= 0.30: KimiDecoderLayer allocates attn_output = torch.empty_like(hidden_states) and
            # the attention module does output[:] = o_proj(...): one [N, hidden] same-dtype D2D copy.
            output = torch.empty_like(x)
            output[:] = self.attn[i].forward(x)
            return output
        return self.attn[i].forward(x)  # vLLM >= 0.31 (#50592): return o_proj(...) directly

    def step(self, arm: str) -> torch.Tensor:
        """One decode step (all layers, final norm) for ``arm``; returns the final hidden states."""
        if arm not in ARMS:
            raise CopyprofError(f"unknown arm {arm!r}: use one of {', '.join(ARMS)}")
        s = self.shapes
        h = self.hidden_in
        for i in range(self.layout.layers):
            x = F.rms_norm(h, (s.hidden,), self.norm_in[i], EPS)
            h = h + self._attention(i, x, arm)
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

    for obj in [*model.attn, *model.mlp]:
        for v in vars(obj).values():
            add(v)
    for t in [*model.norm_in, *model.norm_post, model.norm_final, model.w_lm, model.hidden_in]:
        add(t)
    return total


StepFn = Callable[[], torch.Tensor]
