"""Known defects of ROCm profiling stacks, as data: what each does to a trace, for which stack, where seen.

``copyprof run`` prints the ones that apply to the environment it probed (which profiler back
end the torch build links, which HIP it vendors) before a capture and writes them to run.json
(capture/torch_backend.py). The completeness and overhead checks (analysis/health/completeness.py,
analysis/health/launch_overhead.py) then say whether the capture actually shows the defect: a version
can only say "at risk", a trace says "happened".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class KnownDefect:
    """``backend``: the kineto back end it concerns (``roctracer``, ``rocprofiler-sdk``, ``any-rocm``);
    ``hip``: (major, minor) of the HIP versions it concerns, empty for any; ``fixed_in``: the ROCm
    release that fixes it ("" none); ``links``: where it was reported and measured."""

    id: str
    backend: str
    hip: tuple[tuple[int, int], ...]
    effect: str
    fixed_in: str
    links: tuple[str, ...]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["hip"] = [f"{a}.{b}" for a, b in self.hip]
        out["links"] = list(self.links)
        return out


DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect(
        id="roctracer-graph-kernels",
        backend="roctracer",
        hip=((7, 2),),
        effect=("ROCTracer can lose some or all kernel dispatches of hipGraphLaunch replay: copy counts from graph "
                "replay may be a lower bound (copyprof's completeness check says whether this capture lost any)"),
        fixed_in="7.2.2",
        links=("https://github.com/ROCm/ROCm/issues/6102",
               "https://github.com/sgl-project/sglang/pull/35390",
               "https://github.com/AMD-AGI/Hyperloom/issues/747"),
        note=("ROCm/ROCm#6102 (now ROCm/legacy-rocm-build#6102) is labelled ROCm 7.2.1 and resolved in 7.2.2. torch "
              "wheels vendor their own HIP and roctracer under torch/lib and libtorch_hip.so carries RPATH $ORIGIN, "
              "so an upgraded /opt/rocm does not help (sglang#35390: 448 of 512 kernels per replay on MI355X and "
              "MI300X with ROCm 7.2.4 installed); Hyperloom#747 saw zero kernels under hipGraphLaunch on stock "
              "vllm/vllm-openai-rocm v0.19.0 (ROCm 7.2.1) and v0.21.0 (ROCm 7.2.2). A HIP 7.2 version number does not "
              "tell 7.2.0 from 7.2.2 here; ROCm/rocm-systems#4361 measured ROCm 7.0 complete. Other HIP versions: "
              "not reported, not checked."),
    ),
    KnownDefect(
        id="rocprofiler-sdk-launch-overhead",
        backend="rocprofiler-sdk",
        hip=(),
        effect=("kineto on rocprofiler-sdk adds ~270 µs to every hipGraphLaunch and drops GPU occupancy from ~97 % to "
                "~75 % in graph replay: profiled step periods measure the profiler (copyprof's overhead check says "
                "whether this capture's launches hold up the GPU; the A/B then relies on GPU span or timing)"),
        fixed_in="",
        links=("https://github.com/ROCm/ATOM/pull/432", "https://github.com/ROCm/aiter/pull/2511"),
        note=("Both PRs add a regression guard: `ldd libtorch_cpu.so` showing librocprofiler-sdk.so instead of "
              "libroctracer64.so, hipGraphLaunch averaging over 150 µs (healthy ~50 µs), occupancy under 80 %. They "
              "name ROCm/pytorch#3056 (2026-03-17) as re-enabling rocprofiler-sdk in kineto."),
    ),
    KnownDefect(
        id="rocm-no-graph-node-ids",
        backend="any-rocm",
        hip=(),
        effect=("kernels of HIP-graph replay carry no graph id / graph node id in kineto traces: a copy is matched "
                "across replays by its place in the step, not by its node"),
        fixed_in="",
        links=("https://github.com/pytorch/kineto/pull/1567", "https://github.com/ROCm/rocm-systems/pull/6498"),
        note="kineto#1567 (open when this was written) adds `graph id` / `graph node id` on ROCm rows; "
             "rocm-systems#6498 (merged) adds rocprofiler-sdk's HIP graph callbacks it builds on.",
    ),
)


def applicable(backend: str | None, hip_version: str | None) -> list[KnownDefect]:
    """The defects that concern a ROCm torch whose kineto links ``backend`` and vendors
    ``hip_version`` (e.g. ``"7.2.53211"``); none for a build that is not ROCm."""
    if not hip_version:
        return []
    parts = hip_version.split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        major_minor = None
    out = []
    for d in DEFECTS:
        if d.backend not in ("any-rocm", backend):
            continue
        if d.hip and major_minor not in d.hip:
            continue
        out.append(d)
    return out
