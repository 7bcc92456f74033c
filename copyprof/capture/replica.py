"""Replica engine: profile one TP rank's decode step in two arms (copy into a buffer vs return).

Why: to measure what a "return the projection directly" patch (vLLM #50592/#50847) removes —
one ``[N, hidden]`` bf16 D2D copy per decoder layer per step — on one GPU, without vLLM or
weights, and to produce vLLM-shaped Kineto traces (``rank0.<ns>.pt.trace.json.gz`` with
``execute_context_0(0)_generation_N(N)`` step annotations) that copyprof's readers can be
tested against. The model itself is in :mod:`copyprof.capture.replica_model`.

What a call does (:func:`run_replica`):

1. one run directory per arm, ``<out>/<label>-<arm>-<UTC timestamp>``, with ``run.json``
   (``status`` starting -> capturing -> complete / failed: <why>);
2. builds the model once (weights shared by both arms) and, on CUDA without ``graph=False``,
   captures ONE decode step per arm in a CUDA graph (warm-up first);
3. timing (when both arms are run and ``timing_blocks > 0``): interleaved A/B blocks
   (baseline/candidate alternating, the first arm swapped every pair), each block
   ``timing_replays`` back-to-back step replays timed with CUDA events (CPU:
   ``perf_counter_ns``). Raw per-block ms/step go to ``timing.json``, written identically into
   BOTH arms' run directories (each directory is self-contained; ``pair`` names the other).
   Timing runs before profiling so that no profiler state is active while timing;
4. profiles ``steps`` steps per arm with ``torch.profiler`` (CPU + CUDA activities, no stacks,
   no shapes by default), the sampler stand-in running between steps outside the annotation.

CLI: ``python -m copyprof.capture.replica --model kimi-k3 --tp 8 --concurrency 16 --device cuda
--arm both --steps 32 --out traces`` (``copyprof run --engine replica`` calls :func:`run_replica`).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from copyprof import __version__
from copyprof.capture.rundir import (
    STATUS_CAPTURING,
    STATUS_COMPLETE,
    STATUS_STARTING,
    failed_status,
    new_run_dir,
    update_run_json,
    utc_now_iso,
    write_run_json,
)
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError
from copyprof.models import ModelLayout, load_layout

TIMING_JSON = "timing.json"
CPU_TIMING_NOTE = "CPU timings are for tests only: they say nothing about GPU copy cost"


def step_annotation(tokens: int) -> str:
    """vLLM's pure-decode step name (gpu_worker annotate_profile; vllm-and-kimi.md §8.4)."""
    return f"execute_context_0(0)_generation_{tokens}({tokens})"


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise CopyprofError("the replica engine needs torch: pip install 'copyprof[replica]'",
                            exit_code=EXIT_CAPTURE_FAILED) from exc
    return torch


def device_info(torch: Any, device: Any) -> dict[str, Any]:
    """Name and capability of the device the replica ran on (for run.json / timing.json)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda", "name": torch.cuda.get_device_name(device),
            "capability": list(torch.cuda.get_device_capability(device)),
            "multiprocessors": props.multi_processor_count, "total_memory_bytes": props.total_memory,
        }
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "capability": None,
            "cpu_count": os.cpu_count()}


class _Arm:
    """One arm's runnable step: a replayed CUDA graph or the eager step function."""

    def __init__(self, torch: Any, model: Any, arm: str, graph: bool, warmup: int) -> None:
        self.arm, self.graph, self._torch = arm, None, torch
        self._model = model
        if graph:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up on a side stream, as torch's graph docs ask
                for _ in range(max(warmup, 1)):
                    model.step(arm)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.output = model.step(arm)
            for _ in range(max(warmup, 1)):
                self.graph.replay()
            torch.cuda.synchronize()
        else:
            for _ in range(max(warmup, 1)):
                self.output = model.step(arm)
            self._sync()

    def run(self) -> Any:
        """Run one decode step; returns the final hidden states (static output under graphs)."""
        if self.graph is not None:
            self.graph.replay()
            return self.output
        self.output = self._model.step(self.arm)
        return self.output

    def _sync(self) -> None:
        if self._model.device.type == "cuda":
            self._torch.cuda.synchronize()


def _time_block(torch: Any, arm: _Arm, replays: int, cuda: bool) -> float:
    """Milliseconds per step over ``replays`` back-to-back steps."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            arm.run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / replays
    t0 = time.perf_counter_ns()
    for _ in range(replays):
        arm.run()
    return (time.perf_counter_ns() - t0) / 1e6 / replays


def interleaved_timing(torch: Any, arms: dict[str, _Arm], blocks: int, replays: int, cuda: bool) -> dict[str, Any]:
    """Interleaved A/B: ``blocks`` blocks per arm in pairs ordered AB, BA, AB, ... so drift hits both alike."""
    order: list[str] = []
    per_block: dict[str, list[float]] = {name: [] for name in arms}
    first, second = "baseline", "candidate"
    for b in range(2 * blocks):
        name = (first, second)[b % 2] if (b // 2) % 2 == 0 else (second, first)[b % 2]
        per_block[name].append(_time_block(torch, arms[name], replays, cuda))
        order.append(name)
    return {"arm_order": order, "blocks": blocks, "blocks_meaning": "per arm (2*blocks timed blocks in all)",
            "replays_per_block": replays, "per_block_ms": per_block}


def _profile_arm(torch: Any, model: Any, arm: _Arm, run_dir: Path, steps: int, record_shapes: bool) -> Path:
    """Profile ``steps`` annotated steps (sampler outside the annotation); write the gzip'd trace."""
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = model.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    name = step_annotation(model.shapes.tokens)
    with profile(activities=activities, record_shapes=record_shapes, with_stack=False) as prof:
        for _ in range(steps):
            with record_function(name):
                out = arm.run()
            model.sample(out)  # outside the step annotation, like vLLM's sample_tokens
        if cuda:
            torch.cuda.synchronize()
    # Same name pattern as torch.profiler.tensorboard_trace_handler(dir, "rank0", use_gzip=True),
    # i.e. what vLLM's CPU worker wrote (vllm-and-kimi.md §8.3); export_chrome_trace gzips on ".gz".
    path = run_dir / f"rank0.{time.time_ns()}.pt.trace.json.gz"
    prof.export_chrome_trace(str(path))
    return path


def _summarise(timing: dict[str, Any], layout: ModelLayout, device_type: str) -> str:
    base, cand = timing["per_block_ms"]["baseline"], timing["per_block_ms"]["candidate"]
    pairs = [b - c for b, c in zip(base, cand)]
    mb, mc, md = statistics.median(base), statistics.median(cand), statistics.median(pairs)
    line = (f"timing: median ms/step baseline {mb:.4f}, candidate {mc:.4f}; median paired difference "
            f"(baseline - candidate) {md * 1000:.2f} us/step = {md * 1000 / layout.layers:.3f} us per layer "
            f"over {layout.layers} layers ({len(pairs)} pairs of {timing['replays_per_block']} steps)")
    return line + (f"\nnote: {CPU_TIMING_NOTE}" if device_type == "cpu" else "")


def run_replica(layout: ModelLayout | str, *, tp: int, concurrency: int, device: str,
                arms: Sequence[str] = ("baseline", "candidate"), steps: int = 32, graph: bool = True,
                timing_blocks: int = 40, timing_replays: int = 50, out: str = "traces", label: str | None = None,
                context: int | None = None, warmup: int = 3, seed: int = 0, record_shapes: bool = False,
                command: Sequence[str] | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Capture replica decode steps for each arm; return the run directories (one per arm, in ``arms`` order).

    ``graph`` applies on CUDA only; on CPU the steps always run eagerly (``graph_mode: "eager"``).
    Timing needs both arms and ``timing_blocks > 0``. ``record_shapes`` exists for tests
    (vLLM-like captures leave it off). Every run directory ends with ``status`` ``complete``
    or ``failed: <why>``; on failure the exception is re-raised.
    """
    from copyprof.capture.replica_model import (
        ARMS,
        DEFAULT_CONTEXT,
        RankShapes,
        ReplicaModel,
        weight_bytes,
    )

    if isinstance(layout, str):
        layout = load_layout(layout)
    arms = list(dict.fromkeys(arms))
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise CopyprofError(f"unknown arm(s) {bad or arms}: use baseline and/or candidate")
    if steps < 1:
        raise CopyprofError("steps must be >= 1")
    torch = _torch()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CopyprofError("--device cuda asked for, but torch sees no CUDA device", exit_code=EXIT_CAPTURE_FAILED)
    if dev.type not in ("cuda", "cpu"):
        raise CopyprofError(f"device {device!r} not supported: use cuda or cpu")
    use_graph = bool(graph) and dev.type == "cuda"
    graph_mode = "cuda-graph" if use_graph else "eager"
    shapes = RankShapes.from_layout(layout, tp=tp, tokens=concurrency, context=context or DEFAULT_CONTEXT)
    do_timing = timing_blocks > 0 and timing_replays > 0 and set(arms) == set(ARMS)
    label = label or f"replica-{layout.name}-tp{tp}-c{concurrency}-{graph_mode}"

    dirs = {arm: new_run_dir(out, f"{label}-{arm}") for arm in arms}
    kda, mla = len(layout.kda_layers), len(layout.mla_layers)
    common: dict[str, Any] = {
        "copyprof_version": __version__, "engine": "replica", "status": STATUS_STARTING,
        "command": list(command if command is not None else sys.argv),
        "model": {"name": layout.name, "hf_id": layout.hf_id, "layers": layout.layers, "hidden": layout.hidden,
                  "mla_layers": mla, "kda_layers": kda, "layer_kinds": "".join(k[0].upper() for k in layout.layer_kinds)},
        "tp": tp, "rank": 0, "concurrency": concurrency, "steps": steps, "graph_mode": graph_mode,
        "device": device_info(torch, dev), "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "host": socket.gethostname(), "python": platform.python_version(), "started": utc_now_iso(), "finished": None,
        "annotation": step_annotation(concurrency), "rank_shapes": shapes.to_json(), "seed": seed,
        "profiler": {"activities": ["CPU"] + (["CUDA"] if dev.type == "cuda" else []), "with_stack": False,
                     "record_shapes": record_shapes},
        "expected_copies_per_step": {
            "post_proj": {"bytes": layout.post_proj_bytes(concurrency), "baseline": layout.layers, "candidate": 0},
            "kda_placement": {"bytes": concurrency * shapes.kda_width * 2, "baseline": kda, "candidate": kda},
        },
        "files": [],
    }
    if dev.type == "cpu":
        common["note"] = CPU_TIMING_NOTE
    for arm, d in dirs.items():
        pair = [other.name for a, other in dirs.items() if a != arm]
        write_run_json(d, {**common, "arm": arm, "pair": pair[0] if pair else None})
    try:
        log(f"replica: {layout.name} tp{tp} N={concurrency} {graph_mode} on {common['device']['name']}; "
            f"arms {', '.join(arms)} -> {', '.join(str(d) for d in dirs.values())}")
        if dev.type == "cpu":
            log(f"replica: CPU runs eagerly (no CUDA graphs); {CPU_TIMING_NOTE}")
        for d in dirs.values():
            update_run_json(d, status=STATUS_CAPTURING)
        with torch.inference_mode():
            model = ReplicaModel(layout, shapes, dev, seed=seed)
            update = {"replica_bytes": weight_bytes(model)}
            runners = {arm: _Arm(torch, model, arm, use_graph, warmup) for arm in
                       (ARMS if do_timing else arms)}
            if do_timing:
                timing = interleaved_timing(torch, runners, timing_blocks, timing_replays, dev.type == "cuda")
                timing.update({"device": common["device"], "torch_version": torch.__version__,
                               "cuda_version": torch.version.cuda, "graph_mode": graph_mode, "unit": "ms/step",
                               "timer": "torch.cuda.Event" if dev.type == "cuda" else "time.perf_counter_ns",
                               "model": layout.name, "tp": tp, "concurrency": concurrency,
                               "run_dirs": {a: d.name for a, d in dirs.items()}, "finished": utc_now_iso()})
                for d in dirs.values():
                    with open(d / TIMING_JSON, "w", encoding="utf-8") as fh:
                        json.dump(timing, fh, indent=1)
                log(_summarise(timing, layout, dev.type))
            for arm, d in dirs.items():
                trace = _profile_arm(torch, model, runners[arm], d, steps, record_shapes)
                files = [trace.name] + ([TIMING_JSON] if do_timing else [])
                update_run_json(d, **update, files=files)
                log(f"replica: {arm}: {steps} steps -> {trace}")
        for d in dirs.values():
            update_run_json(d, status=STATUS_COMPLETE, finished=utc_now_iso())
    except BaseException as exc:
        why = f"{type(exc).__name__}: {exc}"
        for d in dirs.values():
            try:
                update_run_json(d, status=failed_status(why), finished=utc_now_iso())
            except Exception as inner:  # noqa: BLE001 - report, but re-raise the original error
                log(f"replica: could not mark {d} as failed: {inner}")
        raise
    return [dirs[a] for a in arms]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m copyprof.capture.replica", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="preset (kimi-k3, kimi-linear-48b-a3b) or config.json path")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size; the replica runs rank 0's shapes")
    p.add_argument("--concurrency", type=int, required=True, help="tokens per decode step (N)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--arm", default="both", choices=["both", "baseline", "candidate"])
    p.add_argument("--steps", type=int, default=32, help="profiled decode steps per arm")
    p.add_argument("--eager", action="store_true", help="no CUDA graph (always so on CPU)")
    p.add_argument("--context", type=int, default=None, help="MLA KV-cache tokens per request (default 4096)")
    p.add_argument("--timing-blocks", type=int, default=40, help="interleaved A/B blocks (0: no timing)")
    p.add_argument("--timing-replays", type=int, default=50, help="steps per timing block")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="traces")
    p.add_argument("--label", default=None)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    arms = ("baseline", "candidate") if args.arm == "both" else (args.arm,)
    command = ["python", "-m", "copyprof.capture.replica", *(sys.argv[1:] if argv is None else argv)]
    try:
        dirs = run_replica(args.model, tp=args.tp, concurrency=args.concurrency, device=args.device, arms=arms,
                           steps=args.steps, graph=not args.eager, timing_blocks=args.timing_blocks,
                           timing_replays=args.timing_replays, out=args.out, label=args.label,
                           context=args.context, warmup=args.warmup, seed=args.seed, command=command)
    except CopyprofError as exc:
        print(f"copyprof: error: {exc}", file=sys.stderr)
        return exc.exit_code
    for d in dirs:
        print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
