"""Replica engine: profile one TP rank's decode step in several arms (copy into a buffer vs return).

Why: to measure what a "return the projection directly" patch (vLLM #50592/#50847) removes —
one ``[N, hidden]`` bf16 D2D copy per decoder layer per step — on one GPU, without vLLM or
weights, for any decoder layout, and to produce vLLM-shaped Kineto traces
(``rank0.<ns>.pt.trace.json.gz`` with ``execute_context_0(0)_generation_N(N)`` step
annotations) that copyprof's readers can be tested against. Arms: ``baseline`` (every layer
copies), ``candidate`` (none does), ``partial`` (the kinds named by ``remove`` do not). The
model itself is in :mod:`copyprof.capture.replica.model`.

What a call does (:func:`run_replica`):

1. one run directory per arm, ``<out>/<label>-<arm>-<UTC timestamp>``, with ``run.json``
   (``status`` starting -> capturing -> complete / failed: <why>);
2. builds the model once (weights shared by both arms) and, on CUDA without ``graph=False``,
   captures ONE decode step per arm in a CUDA graph (warm-up first);
3. timing (when the baseline and another arm are run and ``timing_blocks > 0``): interleaved
   rounds of one block per arm, the order rotated every round (AB, BA, ... ; ABC, BCA, CAB,
   ...), each block ``timing_replays`` back-to-back step replays timed with CUDA events (CPU:
   ``perf_counter_ns``). Raw per-block ms/step go to ``timing.json``, written identically into
   every arm's run directory (each directory is self-contained; ``run_dirs`` names them all).
   Timing runs before profiling so that no profiler state is active while timing;
4. profiles ``steps`` steps per arm with ``torch.profiler`` (CPU + CUDA activities; stacks and
   shapes only when asked: ``with_stack`` for an eager capture whose copies name their code),
   the sampler stand-in running between steps outside the annotation.

CLI: ``copyprof run --engine replica --model kimi-k3 --tp 8 --concurrency 16 --device cuda
--steps 32 --out traces`` (``--remove KIND,...`` adds the partial arm).
"""
from __future__ import annotations

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
from copyprof.capture.replica.device import device_info, import_torch
from copyprof.rundir.layout import (
    STATUS_CAPTURING,
    STATUS_COMPLETE,
    STATUS_STARTING,
    failed_status,
    new_run_dir,
    update_run_json,
    utc_now_iso,
    write_run_json,
)
from copyprof.capture.torch_backend import preflight, preflight_lines
from copyprof.capture.trace_check import check_capture
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError
from copyprof.models import ModelLayout, load_layout

TIMING_JSON = "timing.json"
CPU_TIMING_NOTE = "CPU timings are for tests only: they say nothing about GPU copy cost"


def step_annotation(tokens: int) -> str:
    """vLLM's pure-decode step name (gpu_worker annotate_profile; vllm-and-kimi.md §8.4)."""
    return f"execute_context_0(0)_generation_{tokens}({tokens})"


class _Arm:
    """One arm's runnable step: a replayed CUDA graph or the eager step function."""

    def __init__(self, torch: Any, model: Any, removed: frozenset[str], graph: bool, warmup: int) -> None:
        arm = self.arm = removed  # the kinds whose copies this arm's step removes
        self.graph, self._torch = None, torch
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
    """``blocks`` rounds of one block per arm, the arm order rotated each round (AB, BA, ...;
    ABC, BCA, CAB, ...), so drift hits every arm alike and block i of every arm is one round."""
    names = list(arms)
    order: list[str] = []
    per_block: dict[str, list[float]] = {name: [] for name in names}
    for r in range(blocks):
        for name in names[r % len(names):] + names[: r % len(names)]:
            per_block[name].append(_time_block(torch, arms[name], replays, cuda))
            order.append(name)
    return {"arm_order": order, "blocks": blocks, "blocks_meaning": "per arm (one block of each arm per round)",
            "replays_per_block": replays, "per_block_ms": per_block}


def _profile_arm(torch: Any, model: Any, arm: _Arm, run_dir: Path, steps: int, record_shapes: bool,
                 with_stack: bool) -> Path:
    """Profile ``steps`` annotated steps (sampler outside the annotation); write the gzip'd trace."""
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = model.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    name = step_annotation(model.shapes.tokens)
    with profile(activities=activities, record_shapes=record_shapes, with_stack=with_stack) as prof:
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
    per = timing["per_block_ms"]
    base = per["baseline"]
    lines = []
    for arm, blocks in per.items():
        if arm == "baseline":
            continue
        pairs = [b - c for b, c in zip(base, blocks)]
        md = statistics.median(pairs)
        lines.append(f"timing: median ms/step baseline {statistics.median(base):.4f}, {arm} {statistics.median(blocks):.4f}; "
                     f"median paired difference (baseline - {arm}) {md * 1000:.2f} us/step "
                     f"({len(pairs)} rounds of {timing['replays_per_block']} steps)")
    return "\n".join(lines) + (f"\nnote: {CPU_TIMING_NOTE}" if device_type == "cpu" else "")


def run_replica(layout: ModelLayout | str, *, tp: int, concurrency: int, device: str,
                arms: Sequence[str] = ("baseline", "candidate"), remove: Sequence[str] = (), steps: int = 32,
                graph: bool = True, timing_blocks: int = 40, timing_replays: int = 50, out: str = "traces",
                label: str | None = None, context: int | None = None, warmup: int = 3, seed: int = 0,
                record_shapes: bool = False, with_stack: bool = False, command: Sequence[str] | None = None,
                log: Callable[[str], None] = print) -> list[Path]:
    """Capture replica decode steps for each arm; return the run directories (one per arm, in order).

    ``arms``: names among baseline, candidate, partial; ``remove``: the kinds whose copies the
    partial arm removes (adds that arm when given). ``graph`` applies on CUDA only; on CPU the
    steps always run eagerly (``graph_mode: "eager"``). Timing needs the baseline, another arm
    and ``timing_blocks > 0``. Every run directory ends with ``status`` ``complete`` or
    ``failed: <why>``; on failure the exception is re-raised.
    """
    from copyprof.capture.replica.model import ReplicaModel, arm_removals, weight_bytes
    from copyprof.capture.replica.shapes import DEFAULT_CONTEXT, RankShapes

    if isinstance(layout, str):
        layout = load_layout(layout)
    removals = arm_removals(layout, tuple(remove))
    arms = list(dict.fromkeys([*arms, *(["partial"] if remove else [])]))
    bad = [a for a in arms if a not in removals]
    if bad or not arms:
        raise CopyprofError(f"unknown arm(s) {bad or arms}: use baseline, candidate, or --remove KIND,... for partial")
    arms = [a for a in removals if a in arms]  # baseline, candidate, partial order
    if steps < 1:
        raise CopyprofError("steps must be >= 1")
    torch = import_torch()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CopyprofError("--device cuda asked for, but torch sees no CUDA device", exit_code=EXIT_CAPTURE_FAILED)
    if dev.type not in ("cuda", "cpu"):
        raise CopyprofError(f"device {device!r} not supported: use cuda or cpu")
    use_graph = bool(graph) and dev.type == "cuda"
    graph_mode = "cuda-graph" if use_graph else "eager"
    shapes = RankShapes.from_layout(layout, tp=tp, tokens=concurrency, context=context or DEFAULT_CONTEXT)
    do_timing = timing_blocks > 0 and timing_replays > 0 and "baseline" in arms and len(arms) > 1
    label = label or f"replica-{layout.name}-tp{tp}-c{concurrency}-{graph_mode}"

    dirs = {arm: new_run_dir(out, f"{label}-{arm}") for arm in arms}
    common = _run_record(layout, shapes, removals, tp=tp, concurrency=concurrency, steps=steps, graph_mode=graph_mode,
                         device=device_info(torch, dev), torch=torch, seed=seed, record_shapes=record_shapes,
                         with_stack=with_stack, command=command)
    # ROCm: which profiler back end this torch's kineto links, and its known defects (issue 18)
    common["profiler_backend"] = preflight(os.path.join(os.path.dirname(torch.__file__), "lib"),
                                           getattr(torch.version, "hip", None))
    for line in preflight_lines(common["profiler_backend"]) if common["profiler_backend"] else []:
        log(f"replica: {line}")
    for arm, d in dirs.items():
        others = [other.name for a, other in dirs.items() if a != arm]
        write_run_json(d, {**common, "arm": arm, "removed_kinds": sorted(removals[arm]),
                           "pair": others[0] if len(others) == 1 else None, "arms": {a: x.name for a, x in dirs.items()}})
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
            runners = {arm: _Arm(torch, model, removals[arm], use_graph, warmup) for arm in arms}
            if do_timing:
                timing = interleaved_timing(torch, runners, timing_blocks, timing_replays, dev.type == "cuda")
                timing.update({"device": common["device"], "torch_version": torch.__version__,
                               "cuda_version": torch.version.cuda, "graph_mode": graph_mode, "unit": "ms/step",
                               "timer": "torch.cuda.Event" if dev.type == "cuda" else "time.perf_counter_ns",
                               "model": layout.name, "tp": tp, "concurrency": concurrency,
                               "removed_kinds": {a: sorted(removals[a]) for a in arms},
                               "run_dirs": {a: d.name for a, d in dirs.items()}, "finished": utc_now_iso()})
                for d in dirs.values():
                    with open(d / TIMING_JSON, "w", encoding="utf-8") as fh:
                        json.dump(timing, fh, indent=1)
                log(_summarise(timing, layout, dev.type))
            for arm, d in dirs.items():
                trace = _profile_arm(torch, model, runners[arm], d, steps, record_shapes, with_stack)
                files = [trace.name] + ([TIMING_JSON] if do_timing else [])
                completeness = check_capture(d)  # graph work missing from the trace? (issue 18)
                if completeness.get("message"):
                    log(f"replica: {arm}: warning: {completeness['message']}")
                update_run_json(d, **update, files=files, completeness=completeness)
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


def _run_record(layout: ModelLayout, shapes: Any, removals: dict[str, frozenset[str]], *, tp: int, concurrency: int,
                steps: int, graph_mode: str, device: dict[str, Any], torch: Any, seed: int, record_shapes: bool,
                with_stack: bool, command: Sequence[str] | None) -> dict[str, Any]:
    """What every arm's run.json says about the capture, including the copies each arm must show."""
    kinds = layout.kinds
    expected: dict[str, Any] = {
        "post_proj": {"bytes": layout.post_proj_bytes(concurrency),
                      **{arm: {k: n for k, n in kinds.items() if k not in removed
                               and layout.mechanism_of(k) != "mlp-only"} for arm, removed in removals.items()}},
    }
    for kind, n in kinds.items():
        nbytes = shapes.placement_bytes(layout.mechanism_of(kind))
        if nbytes:
            expected[f"{kind}_placement"] = {"bytes": nbytes, "per_step": n, "arms": "all"}
    record: dict[str, Any] = {
        "copyprof_version": __version__, "engine": "replica", "status": STATUS_STARTING,
        "command": list(command if command is not None else sys.argv),
        "model": {"name": layout.name, "hf_id": layout.hf_id, "layers": layout.layers, "hidden": layout.hidden,
                  "kinds": kinds, "layer_kinds": layout.kind_sequence(), "source": layout.source},
        "tp": tp, "rank": 0, "concurrency": concurrency, "steps": steps, "graph_mode": graph_mode,
        "device": device, "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "host": socket.gethostname(), "python": platform.python_version(), "started": utc_now_iso(), "finished": None,
        "annotation": step_annotation(concurrency), "rank_shapes": shapes.to_json(), "seed": seed,
        "profiler": {"activities": ["CPU"] + (["CUDA"] if device["type"] == "cuda" else []), "with_stack": with_stack,
                     "record_shapes": record_shapes},
        "expected_copies_per_step": expected, "files": [],
    }
    if {"mla", "kda"} & set(kinds):  # Kimi run records as before
        record["model"].update(mla_layers=len(layout.mla_layers), kda_layers=len(layout.kda_layers))
    if device["type"] == "cpu":
        record["note"] = CPU_TIMING_NOTE
    return record
