"""Generated ROCm graph-replay decode traces in the shapes the issue-18 reports describe.

One decode step = a vLLM step annotation, an eager input-preparation kernel, one
``hipGraphLaunch`` and the graph's kernels (every fifth one a ``__amd_rocclr_copyBuffer.kd``
copy), run after the launch returns; then a sampler kernel outside the step's range, and the
host waits for the GPU before the next step. Knobs reproduce what was reported:

* ``drop``: which graph kernels the profiler lost (ROCTracer, ROCm/ROCm#6102): all of them
  (AMD-AGI/Hyperloom#747: ``hipGraphLaunch`` and zero kernels), some (sgl-project/sglang#35390:
  448 of 512 per replay), or none;
* ``launch_us``: the ``hipGraphLaunch`` call's duration (kineto on rocprofiler-sdk: ~270 µs
  more per launch, ROCm/ATOM#432; healthy ~50 µs);
* ``copy_name`` / ``memcpy_form``: the copy as a blit kernel of a given name, or as the
  ``cat: gpu_memcpy`` ``Memcpy DtoD (Device -> Device)`` record of rocprofiler-sdk kineto;
* ``eager_steps``: decode steps of the same tokens launched without the graph, after the
  graph steps; ``capture``: the graph's stream capture at the start of the trace;
* ``node_ids``: ``graph id`` / ``graph node id`` args as pytorch/kineto#1567 would write them
  (graph exec id, the dispatch's ordinal in its launch).

Ground truth: ``GraphTrace.copies_per_step`` copies and ``kernels_per_graph`` GPU ops per
replay; a dropped kernel is simply absent from the file (the GPU's timing is unchanged).
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

COPY = "__amd_rocclr_copyBuffer.kd"
TOKENS = 16
COPY_BYTES = TOKENS * 7168 * 2


def keep_all(step: int, index: int) -> bool:
    return False


def drop_all(step: int, index: int) -> bool:
    return True


def drop_one_in_eight(step: int, index: int) -> bool:
    """448 of 512 kept, as sglang#35390 measured; which ones varies per replay (a race)."""
    return (index + step) % 8 == 0


@dataclass
class GraphTrace:
    steps: int = 8
    kernels_per_graph: int = 40
    launch_us: float = 20.0
    kernel_us: float = 8.0
    copy_name: str = COPY
    memcpy_form: bool = False
    drop: Callable[[int, int], bool] = keep_all
    eager_steps: int = 0
    capture: bool = False
    node_ids: bool = False
    flavour: str = "rocprofiler-sdk"
    copies: bool = True  # False: the candidate of a direct-return patch (the copy nodes are gone)

    @property
    def copies_per_step(self) -> int:
        return sum(1 for i in range(self.kernels_per_graph) if self._is_copy(i)) if self.copies else 0

    @staticmethod
    def _is_copy(index: int) -> bool:
        return index % 5 == 4

    def _gpu(self, name: str, ts: float, corr: int, kind: str, index: int, graph: bool) -> dict:
        args: dict = {"device": 0, "stream": 1, "correlation": corr, "kind": kind}
        cat = "kernel"
        if self._is_copy(index) and name == self.copy_name:
            if self.memcpy_form:
                cat, name = "gpu_memcpy", "Memcpy DtoD (Device -> Device)"
                args["kind"] = "DtoD"
            args["bytes"] = COPY_BYTES
        if graph and self.node_ids:
            args.update({"graph id": 7, "graph node id": index})
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 1, "ts": ts, "dur": self.kernel_us, "args": args}

    def _op_name(self, index: int) -> str:
        return self.copy_name if self._is_copy(index) else f"decode_kernel_{index % 5}"

    def build(self) -> dict:
        ev: list[dict] = []
        corr = 1000
        t = 10_000.0
        pid = tid = 4242
        if self.capture:
            corr, t = self._capture(ev, corr, t, pid, tid)
        for s in range(self.steps + self.eager_steps):
            graph = s < self.steps
            label = f"execute_context_0(0)_generation_{TOKENS}({TOKENS})"
            start = t
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": pid, "tid": tid, "ts": t + 2,
                       "dur": 4.0, "args": {"correlation": corr}})
            ev.append(self._gpu("prepare_inputs_kernel", t + 8, corr, "Dispatch Kernel", -1, False))
            gpu_t = t + 8 + self.kernel_us + 1
            if graph:
                corr += 1
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": pid, "tid": tid,
                           "ts": t + 10, "dur": self.launch_us, "args": {"correlation": corr}})
                gpu_t = max(gpu_t, t + 10 + self.launch_us + 2)
                for i in range(self.kernels_per_graph):
                    if not self.copies and self._is_copy(i):
                        continue
                    if not self.drop(s, i):
                        ev.append(self._gpu(self._op_name(i), gpu_t, corr, "Dispatch Task", i, True))
                    gpu_t += self.kernel_us + 1
                cpu_end = t + 10 + self.launch_us
            else:
                cpu_t = t + 10
                for i in range(self.kernels_per_graph):
                    corr += 1
                    api = "hipMemcpyAsync" if self._is_copy(i) else "hipLaunchKernel"
                    ev.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": pid, "tid": tid, "ts": cpu_t,
                               "dur": 3.0, "args": {"correlation": corr}})
                    ev.append(self._gpu(self._op_name(i), max(gpu_t, cpu_t + 4), corr, "Dispatch Kernel", i, False))
                    gpu_t = max(gpu_t, cpu_t + 4) + self.kernel_us + 1
                    cpu_t += 4.0
                cpu_end = cpu_t
            ev.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": pid, "tid": tid, "ts": start,
                       "dur": cpu_end - start + 1})
            corr += 1  # the sampler: launched after the step's range, once the GPU finished (as vLLM samples)
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": pid, "tid": tid,
                       "ts": gpu_t + 2, "dur": 4.0, "args": {"correlation": corr}})
            ev.append(self._gpu("sampler_argmax_kernel", gpu_t + 10, corr, "Dispatch Kernel", -1, False))
            t = gpu_t + 60.0  # then the host starts the next step
        version_key = "rocprofiler-sdk_version" if self.flavour == "rocprofiler-sdk" else "roctracer_version"
        return {"schemaVersion": 1, version_key: "1.0.0",
                "deviceProperties": [{"id": 0, "name": "AMD Instinct MI355X", "warpSize": 64, "numSms": 256,
                                      "computeMajor": 9, "computeMinor": 5, "totalGlobalMem": 309237645312}],
                "traceEvents": ev}

    def _capture(self, ev: list[dict], corr: int, t: float, pid: int, tid: int) -> tuple[int, float]:
        """hipStreamBeginCapture, one launch call per node, hipStreamEndCapture, instantiate."""
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipStreamBeginCapture", "pid": pid, "tid": tid, "ts": t,
                   "dur": 2.0, "args": {"correlation": corr}})
        t += 3
        for i in range(self.kernels_per_graph):
            corr += 1
            api = "hipMemcpyAsync" if self._is_copy(i) else "hipLaunchKernel"
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": pid, "tid": tid, "ts": t, "dur": 2.0,
                       "args": {"correlation": corr}})
            t += 3
        for name in ("hipStreamEndCapture", "hipGraphInstantiate"):
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": t, "dur": 5.0,
                       "args": {"correlation": corr}})
            t += 6
        return corr, t + 500.0

    def write(self, path: Path) -> Path:
        path.write_bytes(gzip.compress(json.dumps(self.build()).encode()))
        return path


def drop_graph_kernels(path: Path, drop: Callable[[int, int], bool]) -> Path:
    """Rewrite a Kineto trace (e.g. tests/synth/kimi.py's) without the graph-replayed kernels
    (``kind: Dispatch Task``) that ``drop(replay, index)`` names: what ROCTracer loses."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    replay: dict[int, int] = {}
    seen: dict[int, int] = {}
    kept = []
    for e in sorted(doc["traceEvents"], key=lambda e: e["ts"]):
        args = e.get("args") or {}
        if e.get("cat") == "kernel" and args.get("kind") == "Dispatch Task":
            corr = args["correlation"]
            r = replay.setdefault(corr, len(replay))
            i = seen[corr] = seen.get(corr, -1) + 1
            if drop(r, i):
                continue
        kept.append(e)
    doc["traceEvents"] = kept
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path
