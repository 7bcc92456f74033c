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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

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
from copyprof.rundir.record import Device, Model, ReplicaProfiler, RunRecord, Torch
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
    # Named as vLLM's CPU worker names its traces (vllm-and-kimi.md §8.3)
    return export_trace(prof, run_dir)


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


@dataclass(frozen=True)
class _Plan:
    """What every arm of one replica capture shares."""

    layout: ModelLayout
    shapes: Any  # RankShapes
    removals: dict[str, frozenset[str]]  # arm -> the kinds whose copies it removes
    arms: list[str]
    dev: Any  # torch.device
    graph_mode: str
    tp: int
    concurrency: int
    steps: int
    warmup: int
    seed: int
    timing_blocks: int
    timing_replays: int
    record_shapes: bool
    with_stack: bool

    @property
    def use_graph(self) -> bool:
        return self.graph_mode == "cuda-graph"

    @property
    def do_timing(self) -> bool:
        """Timing needs the baseline, another arm, and blocks of steps to time."""
        return self.timing_blocks > 0 and self.timing_replays > 0 and "baseline" in self.arms and len(self.arms) > 1


def _arms(layout: ModelLayout, arms: Sequence[str], remove: Sequence[str]) -> tuple[dict[str, frozenset[str]], list[str]]:
    """Each known arm's removed kinds, and the arms asked for in baseline, candidate, partial order."""
    from copyprof.capture.replica.model import arm_removals

    removals = arm_removals(layout, tuple(remove))
    wanted = list(dict.fromkeys([*arms, *(["partial"] if remove else [])]))
    bad = [a for a in wanted if a not in removals]
    if bad or not wanted:
        raise CopyprofError(f"unknown arm(s) {bad or wanted}: use baseline, candidate, or --remove KIND,... for partial")
    return removals, [a for a in removals if a in wanted]


def _device(torch: Any, device: str) -> Any:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CopyprofError("--device cuda asked for, but torch sees no CUDA device", exit_code=EXIT_CAPTURE_FAILED)
    if dev.type not in ("cuda", "cpu"):
        raise CopyprofError(f"device {device!r} not supported: use cuda or cpu")
    return dev


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
    from copyprof.capture.replica.shapes import DEFAULT_CONTEXT, RankShapes

    if isinstance(layout, str):
        layout = load_layout(layout)
    removals, arm_names = _arms(layout, arms, remove)
    if steps < 1:
        raise CopyprofError("steps must be >= 1")
    torch = import_torch()
    dev = _device(torch, device)
    plan = _Plan(layout=layout, shapes=RankShapes.from_layout(layout, tp=tp, tokens=concurrency,
                                                              context=context or DEFAULT_CONTEXT),
                 removals=removals, arms=arm_names, dev=dev,
                 graph_mode="cuda-graph" if graph and dev.type == "cuda" else "eager", tp=tp,
                 concurrency=concurrency, steps=steps, warmup=warmup, seed=seed, timing_blocks=timing_blocks,
                 timing_replays=timing_replays, record_shapes=record_shapes, with_stack=with_stack)
    label = label or f"replica-{layout.name}-tp{tp}-c{concurrency}-{plan.graph_mode}"
    dirs = {arm: new_run_dir(out, f"{label}-{arm}") for arm in plan.arms}
    info = device_info(torch, dev)
    _write_starting_records(plan, dirs, _run_record(plan, info, torch, command), log)
    try:
        log(f"replica: {layout.name} tp{tp} N={concurrency} {plan.graph_mode} on {info['name']}; "
            f"arms {', '.join(plan.arms)} -> {', '.join(str(d) for d in dirs.values())}")
        if dev.type == "cpu":
            log(f"replica: CPU runs eagerly (no CUDA graphs); {CPU_TIMING_NOTE}")
        for d in dirs.values():
            update_run_json(d, status=STATUS_CAPTURING)
        _capture_arms(torch, plan, dirs, info, log)
        for d in dirs.values():
            mark_complete(d)
    except BaseException as exc:
        why = f"{type(exc).__name__}: {exc}"
        for d in dirs.values():
            try:
                mark_failed(d, why)
            except Exception as inner:  # noqa: BLE001 - report, but re-raise the original error
                log(f"replica: could not mark {d} as failed: {inner}")
        raise
    return [dirs[a] for a in plan.arms]


def _write_starting_records(plan: _Plan, dirs: dict[str, Path], common: RunRecord, log: Callable[[str], None]) -> None:
    """Each arm's starting run.json, after saying which profiler back end this torch's kineto links
    on ROCm and the known defects of that back end."""
    for line in preflight_lines(common.profiler_backend) if common.profiler_backend else []:
        log(f"replica: {line}")
    for arm, d in dirs.items():
        others = [other.name for a, other in dirs.items() if a != arm]
        write_run_json(d, msgspec.structs.replace(
            common, arm=arm, removed_kinds=sorted(plan.removals[arm]), pair=others[0] if len(others) == 1 else None,
            arms={a: x.name for a, x in dirs.items()}))


def _capture_arms(torch: Any, plan: _Plan, dirs: dict[str, Path], device: dict[str, Any],
                  log: Callable[[str], None]) -> None:
    """Build the model once, make each arm's step runnable (a CUDA graph or eager), time the arms
    against each other when asked, then profile each arm into its run directory."""
    from copyprof.capture.replica.model import ReplicaModel, weight_bytes

    cuda = plan.dev.type == "cuda"
    with torch.inference_mode():
        model = ReplicaModel(plan.layout, plan.shapes, plan.dev, seed=plan.seed)
        replica_bytes = weight_bytes(model)
        runners = {arm: _Arm(torch, model, plan.removals[arm], plan.use_graph, plan.warmup) for arm in plan.arms}
        if plan.do_timing:
            timing = interleaved_timing(torch, runners, plan.timing_blocks, plan.timing_replays, cuda)
            timing.update({"device": device, "torch_version": torch.__version__,
                           "cuda_version": torch.version.cuda, "graph_mode": plan.graph_mode, "unit": "ms/step",
                           "timer": "torch.cuda.Event" if cuda else "time.perf_counter_ns",
                           "model": plan.layout.name, "tp": plan.tp, "concurrency": plan.concurrency,
                           "removed_kinds": {a: sorted(plan.removals[a]) for a in plan.arms},
                           "run_dirs": {a: d.name for a, d in dirs.items()}, "finished": utc_now_iso()})
            for d in dirs.values():
                with open(d / TIMING_JSON, "w", encoding="utf-8") as fh:
                    json.dump(timing, fh, indent=1)
            log(_summarise(timing, plan.layout, plan.dev.type))
        for arm, d in dirs.items():
            trace = _profile_arm(torch, model, runners[arm], d, plan.steps, plan.record_shapes, plan.with_stack)
            files = [trace.name] + ([TIMING_JSON] if plan.do_timing else [])
            completeness = check_capture(d)  # graph work missing from the trace? said where the capture is made
            if completeness.get("message"):
                log(f"replica: {arm}: warning: {completeness['message']}")
            update_run_json(d, replica_bytes=replica_bytes, files=files, completeness=completeness)
            log(f"replica: {arm}: {plan.steps} steps -> {trace}")


def _expected_copies(plan: _Plan) -> dict[str, Any]:
    """The copies each arm's steps must show: post-projection copies per kind, and placement copies."""
    layout, kinds = plan.layout, plan.layout.kinds
    expected: dict[str, Any] = {
        "post_proj": {"bytes": layout.post_proj_bytes(plan.concurrency),
                      **{arm: {k: n for k, n in kinds.items() if k not in removed
                               and layout.mechanism_of(k) != "mlp-only"} for arm, removed in plan.removals.items()}},
    }
    for kind, n in kinds.items():
        nbytes = plan.shapes.placement_bytes(layout.mechanism_of(kind))
        if nbytes:
            expected[f"{kind}_placement"] = {"bytes": nbytes, "per_step": n, "arms": "all"}
    return expected


def _run_record(plan: _Plan, device: dict[str, Any], torch: Any, command: Sequence[str] | None) -> RunRecord:
    """What every arm's run.json says about the capture, including the copies each arm must show."""
    layout, kinds = plan.layout, plan.layout.kinds
    model = Model(name=layout.name, hf_id=layout.hf_id, layers=layout.layers, hidden=layout.hidden, kinds=kinds,
                  layer_kinds=layout.kind_sequence(), source=layout.source)
    if {"mla", "kda"} & set(kinds):  # Kimi layouts: the two layer counts a Kimi reader looks for
        model = msgspec.structs.replace(model, mla_layers=len(layout.mla_layers), kda_layers=len(layout.kda_layers))
    cuda = device["type"] == "cuda"
    hip = getattr(torch.version, "hip", None)
    record = RunRecord(
        copyprof_version=__version__, engine="replica", status=STATUS_STARTING,
        command=list(command if command is not None else sys.argv), model=model,
        tp=plan.tp, rank=0, concurrency=plan.concurrency, steps=plan.steps, graph_mode=plan.graph_mode,
        device=Device(**device), torch_version=torch.__version__, cuda_version=torch.version.cuda,
        torch=Torch(version=torch.__version__, hip=hip, cuda=torch.version.cuda),
        host=socket.gethostname(), python=platform.python_version(), started=utc_now_iso(), finished=None,
        annotation=step_annotation(plan.concurrency), rank_shapes=plan.shapes.to_json(), seed=plan.seed,
        profiler=ReplicaProfiler(activities=["CPU"] + (["CUDA"] if cuda else []), with_stack=plan.with_stack,
                                 record_shapes=plan.record_shapes),
        expected_copies_per_step=_expected_copies(plan), files=[],
        # ROCm: which profiler back end this torch's kineto links, and its known defects
        profiler_backend=preflight(os.path.join(os.path.dirname(torch.__file__), "lib"), hip),
    )
    return msgspec.structs.replace(record, note=CPU_TIMING_NOTE) if not cuda else record
