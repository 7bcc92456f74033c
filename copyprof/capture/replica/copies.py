"""Micro capture ``copies-<mode>``: plain same-dtype D2D copies of known sizes, eager and in CUDA graphs.

Why: on CUDA a contiguous same-dtype ``copy_`` is a ``cudaMemcpyAsync(DeviceToDevice)``; in a
trace it shows as a ``Memcpy DtoD`` record with ``bytes`` — or, inside CUDA-graph replay, as a
driver ``memcpy32_post`` kernel with no bytes (``trace-formats.md`` §1.5.1). Which form a
given size takes must be known, from a trace whose copies are known, before copyprof can
count copies in real traces. This capture gives exactly that: each size once per replay,
in a fixed order recorded in ``run.json``.

Variants, each replayed ``replays`` times inside ``record_function("copies_<variant>")``:

* ``static``: ``dst.copy_(src)`` for every size back to back, buffers allocated beforehand;
* ``interleaved``: a small elementwise kernel before each copy (as in a model step);
* ``alloc_in_capture``: ``out = torch.empty_like(src); out[:] = src`` — vLLM's caller-owned
  buffer pattern, the buffer coming from the graph's memory pool under capture.

CLI: ``copyprof run --engine copies --device cuda --steps 4 --out traces`` (``--steps``: replays of
each variant; the copy captures under ``traces/`` have 4 replays).
"""
from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from copyprof import __version__
from copyprof.capture.replica.device import device_info, import_torch
from copyprof.capture.replica.trace_file import export_trace
from copyprof.rundir.layout import (
    STATUS_CAPTURING,
    STATUS_STARTING,
    mark_complete,
    mark_failed,
    new_run_dir,
    update_run_json,
    utc_now_iso,
    write_run_json,
)
from copyprof.rundir.record import Device, RunRecord, Torch
from copyprof.errors import CopyprofError

# Bytes. 4608/14336 = one token of Kimi-Linear / K3 hidden; 16384, 49152 = KDA placement copies
# ([16, 512], [16, 1536] bf16); 73728 = [16, 2304]; 229376 / 344064 = [16|24, 7168].
DEFAULT_SIZES = (4608, 14336, 16384, 36864, 49152, 65536, 73728, 114688, 131072, 229376, 344064, 1048576)
VARIANTS = ("static", "interleaved", "alloc_in_capture")


def _variant_fn(torch: Any, variant: str, srcs: list[Any], dsts: list[Any], scratch: Any) -> Callable[[], list[Any]]:
    def static() -> list[Any]:
        for s, d in zip(srcs, dsts):
            d.copy_(s)
        return dsts

    def interleaved() -> list[Any]:
        for s, d in zip(srcs, dsts):
            scratch.add_(1.0)
            d.copy_(s)
        return dsts

    def alloc_in_capture() -> list[Any]:
        outs = []
        for s in srcs:
            o = torch.empty_like(s)
            o[:] = s
            outs.append(o)
        return outs

    return {"static": static, "interleaved": interleaved, "alloc_in_capture": alloc_in_capture}[variant]


def _capture_mode(torch: Any, dev: Any, mode: str, sizes: Sequence[int], replays: int, run_dir: Path) -> Path:
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = dev.type == "cuda"
    srcs = [torch.empty(n // 2, device=dev, dtype=torch.bfloat16).normal_() for n in sizes]
    dsts = [torch.empty_like(s) for s in srcs]
    scratch = torch.zeros(1024, device=dev, dtype=torch.float32)
    fns = {v: _variant_fn(torch, v, srcs, dsts, scratch) for v in VARIANTS}
    runners: dict[str, Callable[[], Any]] = {}
    keep: list[Any] = []
    for v, fn in fns.items():
        fn()  # warm-up (also the eager path's first-call costs)
        if mode == "cuda-graph":
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                keep.append(fn())
            g.replay()
            runners[v] = g.replay
        else:
            runners[v] = fn
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
        for v in VARIANTS:
            for _ in range(replays):
                with record_function(f"copies_{v}"):
                    runners[v]()
                if cuda:
                    torch.cuda.synchronize()
    return export_trace(prof, run_dir)


def run_copies(*, device: str = "cuda", sizes: Sequence[int] = DEFAULT_SIZES,
               modes: Sequence[str] = ("eager", "cuda-graph"), replays: int = 4, out: str = "traces",
               label: str = "copies", command: Sequence[str] | None = None,
               log: Callable[[str], None] = print) -> list[Path]:
    """One run directory ``<out>/<label>-<mode>-<UTC>`` per mode; returns them in ``modes`` order."""
    torch = import_torch()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CopyprofError("--device cuda asked for, but torch sees no CUDA device")
    if any(n <= 0 or n % 2 for n in sizes):
        raise CopyprofError("copy sizes must be positive and even (bf16 elements)")
    modes = [m for m in modes if m == "eager" or dev.type == "cuda"]  # no graphs on CPU
    paths: list[Path] = []
    for mode in modes:
        d = new_run_dir(out, f"{label}-{mode}")
        write_run_json(d, RunRecord(
            copyprof_version=__version__, engine="replica-copies", status=STATUS_STARTING,
            command=list(command if command is not None else sys.argv), graph_mode=mode,
            device=Device(**device_info(torch, dev)), torch_version=torch.__version__,
            cuda_version=torch.version.cuda,
            torch=Torch(version=torch.__version__, hip=getattr(torch.version, "hip", None), cuda=torch.version.cuda),
            host=socket.gethostname(), started=utc_now_iso(),
            finished=None, dtype="bfloat16", sizes_bytes_in_order=list(sizes), variants=list(VARIANTS),
            replays_per_variant=replays, annotation="copies_<variant>", files=[],
        ))
        try:
            update_run_json(d, status=STATUS_CAPTURING)
            trace = _capture_mode(torch, dev, mode, sizes, replays, d)
            mark_complete(d, files=[trace.name])
        except BaseException as exc:
            mark_failed(d, f"{type(exc).__name__}: {exc}")
            raise
        log(f"copies: {mode} -> {trace}")
        paths.append(d)
    return paths
