"""Step-annotation grammars, kept as data: which CPU ranges mark one engine step, and what
they say about the batch.

Where each was seen:
- vLLM ``execute_context_{reqs}({tokens})_generation_{reqs}({tokens})``: GPUWorker.annotate_profile
  (vllm ``v1/worker/gpu_worker.py`` 0.33.0 L1212-1323); B200 sample shows
  ``execute_context_1(888_788544)_generation_0(0)`` (first number = tokens).
- vLLM detailed (``detailed_trace_annotation``): ``execute_{tokens}_context_{reqs}(sq..sk..)_generation_{reqs}(sq..sk..)``,
  TraceLens MI300X decode samples (``execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086...)``).
- SGLang ``step[DECODE bs=32]`` (TraceLens SGLang Qwen3-8B sample).
- ``ProfilerStep#N`` from torch.profiler schedules: says nothing about the batch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StepInfo:
    grammar: str
    ctx_reqs: int | None
    ctx_tokens: int | None
    gen_reqs: int | None
    gen_tokens: int | None

    @property
    def tokens(self) -> int | None:
        if self.ctx_tokens is None and self.gen_tokens is None:
            return None
        return (self.ctx_tokens or 0) + (self.gen_tokens or 0)

    @property
    def is_decode(self) -> bool | None:
        """True for pure decode (no context tokens), None when the grammar cannot tell."""
        if self.ctx_tokens is None and self.ctx_reqs is None:
            return None
        return (self.ctx_tokens or 0) == 0 and (self.ctx_reqs or 0) == 0 and (self.gen_reqs or 0) > 0


_VLLM = re.compile(r"^execute_context_(\d+)\((\d+)[^)]*\)_generation_(\d+)\((\d+)[^)]*\)$")
_VLLM_DETAILED = re.compile(r"^execute_(\d+)_context_(\d+)\(sq(\d+)[^)]*\)_generation_(\d+)\(sq(\d+)[^)]*\)$")
_SGLANG = re.compile(r"^step\[(\w+) bs=(\d+)\]$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

# Grammar name -> priority (lower is preferred when a trace has several).
GRAMMARS: dict[str, int] = {"vllm": 0, "vllm-detailed": 0, "sglang": 1, "profiler-step": 2}


def parse_step(name: str) -> StepInfo | None:
    m = _VLLM.match(name)
    if m:
        cr, ct, gr, gt = map(int, m.groups())
        return StepInfo("vllm", cr, ct, gr, gt)
    m = _VLLM_DETAILED.match(name)
    if m:
        _total, cr, ct, gr, gt = map(int, m.groups())
        return StepInfo("vllm-detailed", cr, ct, gr, gt)
    m = _SGLANG.match(name)
    if m:
        mode, bs = m.group(1).upper(), int(m.group(2))
        if mode == "DECODE":
            return StepInfo("sglang", 0, 0, bs, bs)
        return StepInfo("sglang", bs, None, 0, 0) if mode in ("EXTEND", "PREFILL", "MIXED") else StepInfo("sglang", 0, 0, 0, 0)
    if _PROFILER_STEP.match(name):
        return StepInfo("profiler-step", None, None, None, None)
    return None
