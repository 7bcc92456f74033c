"""Attention stand-ins of the replica, one per layer mechanism, at one TP rank's shapes.

Each ``forward(x)`` returns the layer's attention output after its output projection
(``o_proj`` / ``out_proj``), as vLLM's modules do; the caller-owned-buffer copy the patch
removes is made by the replica model around it. Copies a mechanism makes *inside* the
attention in vLLM are made here too, with the same semantics (same-dtype contiguous
``copy_`` -> ``cudaMemcpyAsync(DeviceToDevice)``), because they stay in both arms:

* KDA (Kimi): ``core_attn_out[:n] = o`` (vLLM kimi_gdn_linear_attn, vllm-and-kimi.md §6.1);
* GDN (Qwen3-Next / Qwen3.5): ``core_attn_out[:num_actual_tokens] = core_attn_out_non_spec``
  (vLLM qwen3_next.py ``_forward_core``, read in source);
* MLA, softmax attention and mamba make none (vLLM's kernels write their outputs in place).

Not modelled: all-reduces, KV-cache writes, rotary embeddings, quantisation. Stand-ins are
numerically tame (normalised states, bounded gates) but are not the models' numerics.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from copyprof.capture.replica.shapes import RankShapes

EPS = 1e-5


def weight(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype = torch.bfloat16,
           fan_in: int | None = None) -> torch.Tensor:
    """Random weight with std 1/sqrt(fan_in) so activations stay O(1) over ~100 layers (no inf/NaN)."""
    t = torch.empty(shape, device=device, dtype=dtype)
    return t.normal_(0.0, 1.0 / math.sqrt(fan_in or shape[0]))


def ones(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, device=device, dtype=torch.bfloat16)


class MLA:
    """Absorbed-MLA decode stand-in for the local heads of one rank."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        h, qk = s.mla_heads, s.qk_nope_head_dim + s.qk_rope_head_dim
        lat = s.kv_lora_rank + s.qk_rope_head_dim
        # vLLM fuses q_a and kv_a into one replicated GEMM when q_lora is set (fused_qkv_a_proj).
        first_q = s.q_lora_rank if s.q_lora_rank else h * qk
        self.w_a = weight((s.hidden, first_q + lat), device)
        self.q_norm = ones(s.q_lora_rank, device) if s.q_lora_rank else None
        self.w_qb = weight((s.q_lora_rank, h * qk), device) if s.q_lora_rank else None
        self.kv_norm = ones(s.kv_lora_rank, device)
        self.w_uk = weight((h, s.qk_nope_head_dim, s.kv_lora_rank), device)
        self.w_uv = weight((h, s.kv_lora_rank, s.v_head_dim), device)
        self.w_o = weight((h * s.v_head_dim, s.hidden), device)
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


class KDA:
    """Kimi Delta Attention decode stand-in for the local heads of one rank."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        d, h, hd = s.kda_width, s.kda_heads, s.kda_head_dim
        # One fused GEMM for q/k/v (laid out per head as [h, 3, hd] so that per-head views need no
        # copy), the output gate g, the low-rank decay-gate input f_a, and beta.
        self.split = [3 * d, d, hd, h]
        self.w_in = weight((s.hidden, sum(self.split)), device)
        self.w_fb = weight((hd, d), device)
        self.o_norm = ones(hd, device)
        self.w_o = weight((d, s.hidden), device)
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


class Attention:
    """Softmax attention (full or sliding window), GQA over a per-request KV cache, with the
    per-head q/k RMSNorm and the sigmoid output gate of Qwen3-Next's full attention
    (``attn_output_gate``: q_proj emits the gate too)."""

    def __init__(self, s: RankShapes, device: torch.device, window: int | None = None) -> None:
        self.s = s
        qh, kvh, hd = s.attn_q_heads, s.attn_kv_heads, s.attn_head_dim
        self.split = [qh * hd, qh * hd if s.attn_gate else 0, kvh * hd, kvh * hd]
        self.w_qkv = weight((s.hidden, sum(self.split)), device)
        self.q_norm, self.k_norm = ones(hd, device), ones(hd, device)
        ctx = min(s.context, window) if window else s.context
        self.k_cache = torch.empty((s.tokens, kvh, ctx, hd), device=device, dtype=torch.bfloat16).normal_()
        self.v_cache = torch.empty((s.tokens, kvh, ctx, hd), device=device, dtype=torch.bfloat16).normal_()
        self.w_o = weight((qh * hd, s.hidden), device)
        self.scale = 1.0 / math.sqrt(hd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, n = self.s, x.shape[0]
        qh, kvh, hd = s.attn_q_heads, s.attn_kv_heads, s.attn_head_dim
        q, gate, _k, _v = (x @ self.w_qkv).split(self.split, dim=-1)
        q = F.rms_norm(q.view(n, qh, hd), (hd,), self.q_norm, EPS)  # (k is normed into the cache in vLLM)
        q = q.view(n, kvh, qh // kvh, hd)
        scores = torch.matmul(q, self.k_cache.transpose(2, 3)).mul_(self.scale)  # [n, kvh, group, ctx]
        o = torch.matmul(torch.softmax(scores, dim=-1), self.v_cache).reshape(n, qh * hd)
        if s.attn_gate:
            o = o * torch.sigmoid(gate)
        return o @ self.w_o  # o_proj


class GDN:
    """Gated delta-net decode stand-in (Qwen3-Next / Qwen3.5 linear attention) for one rank:
    in_proj_qkvz + in_proj_ba GEMMs, a short causal conv over q/k/v, the gated delta rule on a
    [N, v_heads, k_dim, v_dim] fp32 state, the output placement copy, RMSNormGated, out_proj."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        kh, vh, kd, vd = s.lin_k_heads, s.lin_v_heads, s.lin_k_dim, s.lin_v_dim
        self.conv_dim = 2 * kh * kd + vh * vd
        self.w_qkvz = weight((s.hidden, self.conv_dim + vh * vd), device)
        self.w_ba = weight((s.hidden, 2 * vh), device)
        self.conv_w = weight((self.conv_dim, s.conv_kernel), device, fan_in=s.conv_kernel)
        self.conv_state = torch.zeros((s.tokens, self.conv_dim, s.conv_kernel), device=device, dtype=torch.bfloat16)
        self.a_log = torch.zeros(vh, device=device, dtype=torch.float32)
        self.dt_bias = torch.zeros(vh, device=device, dtype=torch.float32)
        self.state = torch.empty((s.tokens, vh, kd, vd), device=device, dtype=torch.float32).normal_(0.0, 0.01)
        self.norm = ones(vd, device)
        self.w_out = weight((vh * vd, s.hidden), device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, n = self.s, x.shape[0]
        kh, vh, kd, vd = s.lin_k_heads, s.lin_v_heads, s.lin_k_dim, s.lin_v_dim
        mixed, z = (x @ self.w_qkvz).split([self.conv_dim, vh * vd], dim=-1)
        b, a = (x @ self.w_ba).split([vh, vh], dim=-1)
        window = torch.cat([self.conv_state[..., 1:], mixed.unsqueeze(-1)], dim=-1)  # causal_conv1d_update
        self.conv_state.lerp_(window, 1.0)  # the state moves on (an elementwise write, as vLLM's kernel)
        mixed = F.silu((window * self.conv_w).sum(-1))
        q, k, v = mixed.float().split([kh * kd, kh * kd, vh * vd], dim=-1)
        rep = vh // kh
        q = F.normalize(q.view(n, kh, 1, kd), dim=-1).expand(n, kh, rep, kd).reshape(n * vh, 1, kd)
        k = F.normalize(k.view(n, kh, 1, kd), dim=-1).expand(n, kh, rep, kd).reshape(n * vh, 1, kd)
        v = v.reshape(n * vh, 1, vd)
        decay = torch.exp(-torch.exp(self.a_log) * F.softplus(a.float() + self.dt_bias)).view(n * vh, 1, 1)
        beta = torch.sigmoid(b.float()).view(n * vh, 1, 1)
        st = self.state.view(n * vh, kd, vd)
        st.mul_(decay)
        u = (v - torch.bmm(k, st)).mul_(beta)
        st.baddbmm_(k.transpose(1, 2), u)
        o = torch.bmm(q, st).view(n, vh, vd).to(torch.bfloat16)
        # vLLM qwen3_next.py: core_attn_out[:num_actual_tokens] = core_attn_out_non_spec.squeeze(0)
        core_attn_out = torch.empty((n, vh, vd), device=x.device, dtype=torch.bfloat16)
        core_attn_out[:n] = o
        gated = F.rms_norm(core_attn_out, (vd,), self.norm, EPS) * F.silu(z.view(n, vh, vd))
        return gated.view(n, vh * vd) @ self.w_out  # out_proj


class Mamba:
    """Mamba-2 decode stand-in (Jamba, Nemotron-H): in_proj, short conv, selective state update
    on a [N, heads, head_dim, d_state] fp32 state, gated RMSNorm, out_proj."""

    def __init__(self, s: RankShapes, device: torch.device) -> None:
        self.s = s
        h, hd, ds, g = s.lin_v_heads, s.lin_v_dim, s.lin_k_dim, max(s.lin_k_heads, 1)
        self.inner, self.bc = h * hd, 2 * g * ds
        self.w_in = weight((s.hidden, 2 * self.inner + self.bc + h), device)
        self.conv_w = weight((self.inner + self.bc, s.conv_kernel), device, fan_in=s.conv_kernel)
        self.conv_state = torch.zeros((s.tokens, self.inner + self.bc, s.conv_kernel), device=device,
                                      dtype=torch.bfloat16)
        self.a_log = torch.zeros(h, device=device, dtype=torch.float32)
        self.state = torch.empty((s.tokens, h, hd, ds), device=device, dtype=torch.float32).normal_(0.0, 0.01)
        self.norm = ones(self.inner, device)
        self.w_out = weight((self.inner, s.hidden), device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, n = self.s, x.shape[0]
        h, hd, ds, g = s.lin_v_heads, s.lin_v_dim, s.lin_k_dim, max(s.lin_k_heads, 1)
        z, xbc, dt = (x @ self.w_in).split([self.inner, self.inner + self.bc, h], dim=-1)
        window = torch.cat([self.conv_state[..., 1:], xbc.unsqueeze(-1)], dim=-1)
        self.conv_state.lerp_(window, 1.0)
        xbc = F.silu((window * self.conv_w).sum(-1)).float()
        xs, bm, cm = xbc.split([self.inner, g * ds, g * ds], dim=-1)
        dt = F.softplus(dt.float())  # [n, h]
        da = torch.exp(-torch.exp(self.a_log) * dt).view(n, h, 1, 1)
        bh = bm.view(n, g, 1, ds).expand(n, g, h // g, ds).reshape(n, h, 1, ds)
        ch = cm.view(n, g, 1, ds).expand(n, g, h // g, ds).reshape(n, h, ds, 1)
        xs = xs.view(n, h, hd, 1)
        self.state.mul_(da).add_(xs * bh * dt.view(n, h, 1, 1))  # selective_state_update
        y = torch.matmul(self.state, ch).view(n, self.inner).to(torch.bfloat16)
        gated = F.rms_norm(y * F.silu(z), (self.inner,), self.norm, EPS)
        return gated @ self.w_out  # out_proj
