"""Count the D2D copies in each annotated step of a replica (or vLLM) Kineto trace.

Why: the replica's traces are shipped as test material, and ``traces/README.md`` must say
what each holds (copies per step, by form and size) from reading the file, not from what the
code meant to do. This is a small self-check for that, not copyprof's reader: it loads the
whole JSON (fine for the replica's short windows) and knows the forms listed in
``trace-formats.md`` §1.5.1:

* ``memcpy DtoD <bytes>``: ``gpu_memcpy`` "Memcpy DtoD (Device -> Device)" with ``args.bytes``;
* ``kernel memcpy32_post <bytes>``: a driver memcpy kernel (name contains "memcpy") with no
  bytes; bytes inferred as grid.x * block.x * 4 (= g * 256 * 4 for block [256,1,1]);
* ``kernel elementwise copy``: ``direct_copy_kernel`` / ``copy_kernel`` elementwise kernels;
* ``runtime cudaMemcpyAsync`` / ``runtime cudaGraphLaunch``: host API rows;
* ``cpu aten::copy_ [dims] dst<-src``: CPU ops (eager only; dims and dtypes only if the trace
  recorded shapes).

Steps are the ``user_annotation`` ranges whose name matches a pattern (default: vLLM's
``execute_context_..._generation_...``). Host rows belong to the step whose range holds
their start; GPU rows follow their host row through the correlation id (graph replays:
the ``cudaGraphLaunch``), so GPU work that runs after the CPU range closed still counts.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STEP_RE = r"^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$"
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
_COPY_KERNEL_RE = re.compile(r"direct_copy_kernel|\bcopy_kernel")


def load_trace(path: str | Path) -> dict[str, Any]:
    """A Kineto JSON (plain or gzip) as a dict with ``traceEvents``."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    return {"traceEvents": data} if isinstance(data, list) else data


_SHORT_TYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64"}


def _dims(ev: dict[str, Any]) -> str:
    """`` [4,2304] bf16<-bf16`` (destination dims, dst<-src dtypes) when the trace recorded shapes."""
    args = ev.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims:
        return ""
    text = " " + json.dumps(dims[0], separators=(",", ":"))
    if isinstance(types, list) and len(types) >= 2:
        text += f" {_SHORT_TYPES.get(types[0], types[0])}<-{_SHORT_TYPES.get(types[1], types[1])}"
    return text


def copy_form(ev: dict[str, Any]) -> str | None:
    """The census key of one event, or None if it is not a copy-related row."""
    cat, name, args = ev.get("cat", ""), ev.get("name", ""), ev.get("args") or {}
    if cat == "gpu_memcpy":
        kind = name.split(" ")[1] if name.startswith("Memcpy ") else name
        return f"memcpy {kind} {args.get('bytes', '?')}"
    if cat == "kernel" and "memcpy" in name.lower():
        grid, block = args.get("grid") or [0], args.get("block") or [0]
        return f"kernel {name} {int(grid[0]) * int(block[0]) * 4}"
    if cat == "kernel" and _COPY_KERNEL_RE.search(name):
        return "kernel elementwise copy"
    if cat in _RUNTIME_CATS and ("Memcpy" in name or name in ("cudaGraphLaunch", "cuGraphLaunch")):
        return f"runtime {name}"
    if cat == "cpu_op" and name == "aten::copy_":
        return f"cpu aten::copy_{_dims(ev)}"
    return None


def census(trace: dict[str, Any] | str | Path, step_pattern: str = STEP_RE) -> dict[str, Any]:
    """Per annotation name: number of steps and, per copy form, the count in each step."""
    data = load_trace(trace) if not isinstance(trace, dict) else trace
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    rx = re.compile(step_pattern)
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and rx.search(str(e.get("name", "")))),
                   key=lambda e: float(e["ts"]))
    starts = [float(s["ts"]) for s in steps]

    def step_of(ts: float) -> int | None:
        i = bisect_right(starts, ts) - 1
        if i >= 0 and ts <= starts[i] + float(steps[i].get("dur", 0)):
            return i
        return None

    corr_step: dict[Any, int | None] = {}
    for e in events:
        if e.get("cat") in _RUNTIME_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                corr_step[corr] = step_of(float(e["ts"]))
    counts: list[Counter[str]] = [Counter() for _ in steps]
    outside: Counter[str] = Counter()
    for e in events:
        form = copy_form(e)
        if form is None:
            continue
        if e.get("cat") in _GPU_CATS:
            idx = corr_step.get((e.get("args") or {}).get("correlation"))
        else:
            idx = step_of(float(e["ts"]))
        (outside if idx is None else counts[idx])[form] += 1
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(steps):
        by_name[s["name"]].append(i)
    result: dict[str, Any] = {}
    for name, idxs in by_name.items():
        forms = sorted({f for i in idxs for f in counts[i]})
        per_form = {}
        for f in forms:
            series = [counts[i][f] for i in idxs]
            per_form[f] = series[0] if len(set(series)) == 1 else {"min": min(series), "max": max(series),
                                                                   "per_step": series}
        result[name] = {"steps": len(idxs), "copies_per_step": per_form}
    return {"annotations": result, "outside_steps": dict(sorted(outside.items())),
            "gpu_events": sum(1 for e in events if e.get("cat") in _GPU_CATS)}


def census_run_dirs(paths: Iterable[str | Path], step_pattern: str | None = None) -> dict[str, Any]:
    """Census of every ``*.pt.trace.json[.gz]`` under each path (a run directory or a trace file)."""
    out: dict[str, Any] = {}
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(p.glob("*.pt.trace.json*"))
        for f in files:
            pattern = step_pattern
            if pattern is None:
                pattern = r"^copies_" if f.parent.name.startswith("copies-") else STEP_RE
            out[str(f)] = census(f, pattern)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m copyprof.capture.replica_census", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="run directories or trace files")
    p.add_argument("--steps", default=None, help="regex for step annotation names (default: vLLM decode steps; "
                                                  "'^copies_' for copies-* run directories)")
    args = p.parse_args(argv)
    json.dump(census_run_dirs(args.paths, args.steps), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
