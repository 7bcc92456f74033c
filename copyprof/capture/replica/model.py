"""The replica model: one TP rank's decode step of any decoder layout, at real per-rank shapes.

Why a replica: the copy that PRs like vLLM #50592 remove (``output[:] = o_proj(x)``, one
``[N, hidden]`` bf16 device-to-device copy per decoder layer per step) can be measured without
vLLM, weights or a multi-GPU box, as long as the step around it has the same layer order,
the same tensor shapes on one rank, and the same copy semantics. This module builds that
step with plain torch ops and random bf16 weights. It is a stand-in, not a numerical model:

* Per layer: input RMSNorm -> attention stand-in of the layer's mechanism (MLA, KDA, gated
  delta-net, softmax attention, mamba: layers.py) -> post-projection copy into
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

from typing import Any

import torch
import torch.nn.functional as F

from copyprof.capture.replica.layers import GDN, KDA, MLA, Attention, Mamba, ones, weight
from copyprof.capture.replica.shapes import RankShapes
from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout

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


class _MLP:
    """Dense MLP or MoE stand-in: SiLU-gated GEMM pair of per-rank width ``inter``.

    On a CPU its GEMMs run in float32: without native bf16 units a bf16 GEMM is ~40x slower
    there (0.28 s against 0.006 s for [4, 2304] x [2304, 4096]), the MLP was most of a CPU step,
    and the CPU run exists for tests. The MLP issues no copy under study; in float32 it adds a
    dtype conversion at each end, the same in every arm (CPU traces hold such conversions
    anyway). On a GPU it stays bf16, as the model it stands in for."""

    def __init__(self, hidden: int, inter: int, device: torch.device) -> None:
        self.inter = inter
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        self.w_gu = weight((hidden, 2 * inter), device, dtype)
        self.w_down = weight((inter, hidden), device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        if dtype != self.w_gu.dtype:  # the CPU's float32 GEMMs (no op recorded on a GPU)
            x = x.to(self.w_gu.dtype)
        gate, up = (x @ self.w_gu).split(self.inter, dim=-1)
        out = (F.silu(gate) * up) @ self.w_down
        return out if out.dtype == dtype else out.to(dtype)


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

