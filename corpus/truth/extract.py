"""Read a Kineto trace of a vLLM capture with the standard library only, and list every
device-to-device copy of each decode step with what surrounds it.

This is the corpus's independent reading: it shares no code with copyprof (no copyprof import,
no numpy, no pandas), so a fault in copyprof's readers, step splitting or taxonomy cannot make
the ground truth agree with it. What it prints is raw evidence; corpus/truth/label.py turns it
into roles by rules written from the vLLM source of each issuing line.

Per copy (in GPU order within the step): bytes, how the GPU shows it (a ``Memcpy DtoD`` record
or the CUDA driver's ``memcpy32_post`` kernel), the kernels just before and after it on the
GPU, and in traces with Python stacks the innermost vLLM frames around its ``cudaMemcpyAsync``,
the module chain (``nn.Module:`` frames) and the decoder layer (the n-th ``*DecoderLayer``
module the step entered).

    python3 corpus/truth/extract.py RUN_DIR_OR_TRACE [--json]
"""
from __future__ import annotations

import bisect
import glob
import gzip
import json
import os
import re
import sys

STEP = re.compile(r"^execute_context_\d+\(\d+\)_generation_(\d+)\(\d+\)$")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path: str) -> dict:
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "**", "*.pt.trace.json*"), recursive=True))
        if len(found) != 1:
            raise SystemExit(f"{path}: expected one rank trace, found {len(found)}")
        path = found[0]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def is_d2d(e: dict) -> bool:
    if e["cat"] == "gpu_memcpy":
        return "DtoD" in e["name"] or "PtoP" in e["name"]
    return e["cat"] == "kernel" and e["name"].startswith("memcpy32_post")


def copy_bytes(e: dict) -> int:
    args = e.get("args", {})
    if "bytes" in args:
        return int(args["bytes"])
    grid = args.get("grid", [0])
    return int(grid[0]) * 256 * 4  # memcpy32_post: 256 threads of one 32-bit word each per block


def trim(frame: str) -> str:
    """'/opt/vsite/vllm/x.py(12): f' -> 'vllm/x.py(12): f' (the install prefix says nothing)."""
    i = frame.find("vllm/")
    return frame[i:] if i >= 0 else frame


def own_frame(name: str) -> bool:
    return (name.startswith("/") or name.startswith("vllm/")) and "/torch/" not in name and ".py(" in name


def enclosing(events: list[dict], queries: list[tuple[float, int]]) -> dict[int, list[dict]]:
    """For each (time, key), the events of one thread that contain that time, outermost first."""
    order = sorted(events, key=lambda e: (e["ts"], -e.get("dur", 0)))
    qs = sorted(queries)
    out: dict[int, list[dict]] = {}
    stack: list[dict] = []
    i = 0
    for t, key in qs:
        while i < len(order) and order[i]["ts"] <= t:
            e = order[i]
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < e["ts"]:
                stack.pop()
            stack.append(e)
            i += 1
        live = [e for e in stack if e["ts"] <= t <= e["ts"] + e.get("dur", 0)]
        out[key] = live
    return out


def extract(trace: dict) -> dict:
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and STEP.match(e["name"])),
                   key=lambda e: e["ts"])
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in ev if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    starts = [s["ts"] for s in steps]

    def step_of(e: dict) -> int:
        r = runtime.get(e.get("args", {}).get("correlation"))
        if r is None:
            return -1
        i = bisect.bisect_right(starts, r["ts"]) - 1
        return i if i >= 0 and r["ts"] <= steps[i]["ts"] + steps[i]["dur"] else -1

    per_step: list[list[dict]] = [[] for _ in steps]
    for e in gpu:
        k = step_of(e)
        if k >= 0:
            per_step[k].append(e)
    py = [e for e in ev if e.get("cat") in ("python_function", "cpu_op")]
    by_tid: dict = {}
    for e in py:
        by_tid.setdefault((e["pid"], e["tid"]), []).append(e)
    queries: dict = {}
    copies_out = []
    for k, ops in enumerate(per_step):
        kernels = [j for j, e in enumerate(ops) if e["cat"] == "kernel" and not is_d2d(e)]
        step_copies = []
        for j, e in enumerate(ops):
            if not is_d2d(e):
                continue
            prev = [ops[i]["name"] for i in kernels if i < j][-1:] or [""]
            nxt = [ops[i]["name"] for i in kernels if i > j][:1] or [""]
            r = runtime.get(e["args"].get("correlation"))
            c = {"step": k, "index": len(step_copies), "bytes": copy_bytes(e),
                 "form": "memcpy32_post" if e["cat"] == "kernel" else e["name"],
                 "via": r["name"] if r else "", "prev_kernel": prev[0][:160], "next_kernel": nxt[0][:160],
                 "dur_us": e.get("dur", 0)}
            if r is not None and r["name"].startswith("cudaMemcpy"):
                queries.setdefault((r["pid"], r["tid"]), []).append((r["ts"], id(c)))
            step_copies.append(c)
        copies_out.append(step_copies)
    found: dict[int, list[dict]] = {}
    for tid, qs in queries.items():
        found.update(enclosing(by_tid.get(tid, []), qs))
    layer_frames = {}
    for tid, events in by_tid.items():
        for e in events:
            if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ") and \
                    re.search(r"DecoderLayer_\d+$", e["name"]):
                i = bisect.bisect_right(starts, e["ts"]) - 1
                if i >= 0 and e["ts"] <= steps[i]["ts"] + steps[i]["dur"]:
                    layer_frames.setdefault(i, []).append(e)
    for k, step_copies in enumerate(copies_out):
        order = sorted(layer_frames.get(k, []), key=lambda e: e["ts"])
        for c in step_copies:
            live = found.get(id(c))
            if live is None:
                continue
            names = [e["name"] for e in live]
            c["modules"] = [n[len("nn.Module: "):] for n in names if n.startswith("nn.Module: ")]
            c["frames"] = [trim(n) for n in names if own_frame(n)][::-1][:4]  # innermost first
            c["cpu_op"] = next((e["name"] for e in reversed(live) if e.get("cat") == "cpu_op"), "")
            dims = next((e.get("args", {}).get("Input Dims") for e in reversed(live) if e.get("cat") == "cpu_op"), None)
            if dims:
                c["dims"] = dims[0] if dims else None
            layer_ev = [e for e in live if e["name"].startswith("nn.Module: ") and re.search(r"DecoderLayer_\d+$", e["name"])]
            c["layer"] = (order.index(layer_ev[-1]) + 1) if layer_ev and layer_ev[-1] in order else 0
    tokens = [int(STEP.match(s["name"]).group(1)) for s in steps]
    return {"steps": len(steps), "tokens": tokens, "copies": copies_out,
            "layers_entered": [len(layer_frames.get(k, [])) for k in range(len(steps))]}


def summary(x: dict) -> str:
    lines = [f"steps {x['steps']}, tokens {sorted(set(x['tokens']))}, copies per step "
             f"{sorted({len(c) for c in x['copies']})}, decoder layers entered per step {sorted(set(x['layers_entered']))}"]
    first = x["copies"][0] if x["copies"] else []
    for c in first:
        where = f"L{c.get('layer', '?')} {'/'.join(c.get('modules', [])[-3:])} {c.get('frames', [''])[:1]}" if "frames" in c else ""
        lines.append(f"  #{c['index']:2d} {c['bytes']:>8} {c['form'][:14]:14} prev={c['prev_kernel'][:48]:48} "
                     f"next={c['next_kernel'][:40]:40} {where}")
    return "\n".join(lines)


if __name__ == "__main__":
    out = extract(load(sys.argv[1]))
    print(json.dumps(out, indent=1) if "--json" in sys.argv else summary(out))
