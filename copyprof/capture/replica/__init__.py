"""The replica engine: one TP rank's decode step of any layout at the model's real shapes, in a
CUDA/HIP graph or eagerly, with and without the post-projection copies — no vLLM, no weights.

``engine.run_replica`` makes the run directories (``copyprof run --engine replica``);
``model`` stacks the attention stand-ins of ``layers`` at the sizes of ``shapes``; ``copies``
is the plain-copy micro-capture (``copyprof run --engine copies``); ``device`` imports torch
and describes the device. torch is imported only when a capture runs.
"""
from __future__ import annotations

from copyprof.capture.replica.engine import run_replica

__all__ = ["run_replica"]
