"""What vLLM itself chose for a capture, read from its own log: the facts that change how a
trace reads.

* **Model runner** — vLLM 0.26.0 runs Model Runner V2 by default for a generate model that is
  neither hybrid nor MoE (``config/vllm.py`` ``_is_default_v2_model_runner_model``; it logs
  "Using V2 Model Runner"), the V1 ``gpu_model_runner.py`` otherwise; V2 issues none of V1's
  per-step input copies (the corpus's Qwen3 captures).
* **Compilation** — ``compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, ...,
  'backend': 'inductor', ...}`` in the engine's config line: Inductor compiled the model, so a
  copy written in Python (``output[:] = ...``) may have been fused or removed (it was, in the
  corpus's Kimi-Linear graphs); ``NONE`` with ``--enforce-eager``.
* **CUDA-graph mode** — ``'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: ...>``.
* **Backends** — "Using FLASH_ATTN_MLA attention backend", "Using TritonExperts MoE backend".

Lines seen in vLLM 0.26.0 server logs (corpus/runs/*/server.log); a log without them gives
None for each fact, never a guess.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_MODE = re.compile(r"compilation_config=\{'mode': <CompilationMode\.(\w+)")
_BACKEND = re.compile(r"compilation_config=\{.*?'backend': '(\w*)'")
_CUDAGRAPH = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_ATTENTION = re.compile(r"Using (\w+) attention backend")
_MOE = re.compile(r"Using (\w+) MoE backend")
_V2 = re.compile(r"Using V2 Model Runner")
_V1 = re.compile(r"\[gpu_model_runner\.py:\d+\]")
_ENGINE = re.compile(r"Initializing a (V\d) LLM engine \(v([\w.+-]+)\)")
READ_LIMIT = 8 << 20  # the facts are in the first lines of a boot; a huge log is not read whole


def engine_facts(log: str | Path) -> dict[str, Any] | None:
    """The facts above from a server log (None when the file cannot be read)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            text = fh.read(READ_LIMIT)
    except OSError:
        return None
    mode = _MODE.search(text)
    backend = _BACKEND.search(text)
    graph = _CUDAGRAPH.search(text)
    engine = _ENGINE.search(text)
    runner = "v2" if _V2.search(text) else ("v1" if _V1.search(text) else None)
    compiled = None
    if mode is not None:
        compiled = mode.group(1) != "NONE"
    return {
        "engine": engine.group(1) if engine else None,
        "model_runner": runner,
        "compilation_mode": mode.group(1) if mode else None,
        "compiled_by": (backend.group(1) or None) if compiled and backend else None,
        "cudagraph_mode": graph.group(1) if graph else None,
        "attention_backends": sorted(set(_ATTENTION.findall(text))),
        "moe_backends": sorted(set(_MOE.findall(text))),
        "source": "server.log",
    }

