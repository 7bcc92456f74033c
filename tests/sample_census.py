"""What each public sample in ../shared/sample_traces holds, counted with the standard library only.

Why: the expectations in tests/readers/test_public_samples.py must come from outside the code under
test. This module reads each file with ``json``/``gzip``/``sqlite3`` directly, following the
format notes in ../shared/docs/trace-formats.md (§1 Kineto, §2.3 rocprofv3 JSON, §3 nsys,
§4 what counts as a device-to-device copy), and imports nothing from copyprof, numpy or
pandas. Its definitions, where a choice had to be made:

* kinds: Kineto ``ph == "X"`` events by category (kernel, gpu_memcpy, gpu_memset,
  cuda_runtime/cuda_driver/hip_runtime, user_annotation/gpu_user_annotation, cpu_op; case
  folded); rocprofv3 JSON the ``buffer_records`` lists; nsys the CUPTI tables, one runtime
  call per correlation id (nsys repeats a call's id in "CUDA backtrace" rows) and NVTX rows
  with an end time (ranges; marks, domain and thread-name rows have none);
* device-to-device copies: Kineto ``gpu_memcpy`` named ``Memcpy DtoD``/``Memcpy PtoP`` (or
  ``args.kind == "DtoD"``) and copy kernels (``__amd_rocclr_copyBuffer``,
  ``MEMORY_COPY_DEVICE_TO_DEVICE``, ``memcpy*_post``); rocprofv3 copyBuffer dispatches and
  DEVICE_TO_DEVICE memory_copy records; nsys ``copyKind`` 8 (DtoD) and 10 (PtoP);
* copy sizes: the event's ``bytes``; for a rocclr aligned blit in rocprofv3 (grid in
  work-items, workgroup 512) only the bound ``work-items * 16`` is known ("grid-bound"), and
  nothing when the grid is saturated (>= CUs * 512 work-items: vllm-and-kimi.md §5.2);
* annotations: ranges per name; a range recorded on the CPU and again on the GPU
  (``gpu_user_annotation``) counts once: the larger of the two counts;
* graph launches: runtime calls named ``cudaGraphLaunch``/``hipGraphLaunch``/``cuGraphLaunch*``.

``python -m tests.sample_census`` prints the census of every sample found, as the literals
tests/readers/test_public_samples.py pins.
"""
from __future__ import annotations

import gzip
import json
import pprint
import re
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "sample_traces"
KINETO_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_runtime": "runtime",
                "cuda_driver": "runtime", "hip_runtime": "runtime", "user_annotation": "annotation",
                "gpu_user_annotation": "annotation", "cpu_op": "cpu_op", "python_function": "python"}
KINDS = ("kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op", "python")
COPY_KERNEL = re.compile(r"^(__amd_rocclr_copyBuffer(Rect)?(Aligned)?(\.kd)?|MEMORY_COPY_DEVICE_TO_DEVICE|memcpy\d*_post)$")
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")


def _census(kinds: Counter, d2d: list[tuple[str, int, str]], ann_cpu: Counter, ann_gpu: Counter,
            launches: int) -> dict[str, Any]:
    return {"counts": {k: kinds.get(k, 0) for k in KINDS},
            "d2d_by_name": dict(Counter(name for name, _, _ in d2d)),
            "d2d_by_bytes": {f"{b} {src}": n for (b, src), n in Counter((b, s) for _, b, s in d2d).items()},
            "annotations": {n: max(ann_cpu[n], ann_gpu[n]) for n in ann_cpu.keys() | ann_gpu.keys()},
            "graph_launches": launches}


def kineto(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    if isinstance(events, dict):
        events = list(events.values())
    kinds: Counter = Counter()
    ann_cpu: Counter = Counter()
    ann_gpu: Counter = Counter()
    runtime_bytes: dict[Any, int] = {}
    launches = 0
    copies = []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        kind = KINETO_KINDS.get(str(ev.get("cat", "")).lower())
        if kind is None:
            continue
        kinds[kind] += 1
        name, args = str(ev.get("name", "")), ev.get("args") or {}
        if kind == "annotation":
            (ann_gpu if ev["cat"].lower().startswith("gpu_") else ann_cpu)[name] += 1
        elif kind == "runtime":
            launches += bool(GRAPH_LAUNCH.match(name))
            size = args.get("bytes", args.get("size"))
            if isinstance(size, int) and "correlation" in args:
                runtime_bytes.setdefault(args["correlation"], size)
        elif (kind == "memcpy" and (name.startswith(("Memcpy DtoD", "Memcpy PtoP")) or args.get("kind") == "DtoD")) \
                or (kind == "kernel" and COPY_KERNEL.match(name)):
            copies.append((name, args))
    d2d = []
    for name, args in copies:
        if isinstance(args.get("bytes"), int):
            d2d.append((name, args["bytes"], "event"))
        elif args.get("correlation") in runtime_bytes:
            d2d.append((name, runtime_bytes[args["correlation"]], "runtime"))
        else:
            d2d.append((name, -1, "none"))
    return _census(kinds, d2d, ann_cpu, ann_gpu, launches)


def rocprofv3_json(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        [proc] = json.load(fh)["rocprofiler-sdk-tool"]  # one element per process; these samples have one
    records = proc["buffer_records"]
    symbols = {s["kernel_id"]: s["formatted_kernel_name"] for s in proc["kernel_symbols"]}
    cus = {a["id"]["handle"]: a.get("cu_count", 0) for a in proc["agents"]}
    kinds = Counter({"kernel": len(records["kernel_dispatch"]), "memcpy": len(records["memory_copy"]),
                     "runtime": len(records["hip_api"]), "annotation": len(records["marker_api"])})
    d2d = []
    for rec in records["kernel_dispatch"]:
        info = rec["dispatch_info"]
        name = symbols[info["kernel_id"]]
        if not COPY_KERNEL.match(name):
            continue
        items, wg = info["grid_size"]["x"], info["workgroup_size"]["x"]
        if "Rect" in name or items >= cus[info["agent_id"]["handle"]] * wg:
            d2d.append((name, -1, "none"))
        else:
            d2d.append((name, items * (16 if wg == 512 else 4), "grid-bound"))
    # memory_copy operations are enum values named by the file's own string table (§2.3).
    [copy_ops] = [k["operations"] for k in proc["strings"]["buffer_records"] if k["kind"] == "MEMORY_COPY"]
    for rec in records["memory_copy"]:
        if copy_ops[rec["operation"]] == "MEMORY_COPY_DEVICE_TO_DEVICE":
            d2d.append(("MEMORY_COPY_DEVICE_TO_DEVICE", rec["bytes"], "event"))
    return _census(kinds, d2d, Counter(), Counter(), 0)


def nsys(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

        def one(sql: str) -> int:
            return conn.execute(sql).fetchone()[0]
        kinds = Counter({
            "kernel": one("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
            "memcpy": one("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
            "memset": one("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET") if "CUPTI_ACTIVITY_KIND_MEMSET" in tables else 0,
            "runtime": one("SELECT COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME")})
        d2d = [(("Memcpy DtoD (Device -> Device)" if kind == 8 else "Memcpy PtoP (Device -> Device)"), b, "event")
               for kind, b in conn.execute("SELECT copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (8, 10)")]
        ann: Counter = Counter()
        if "NVTX_EVENTS" in tables:
            kinds["annotation"] = one('SELECT COUNT(*) FROM NVTX_EVENTS WHERE "end" IS NOT NULL')
            ann.update(name for (name,) in conn.execute(
                'SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId'
                ' WHERE e."end" IS NOT NULL'))
        launches = sum(bool(GRAPH_LAUNCH.match(name)) for (name,) in conn.execute(
            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"))
    finally:
        conn.close()
    return _census(kinds, d2d, ann, Counter(), launches)


def kineto_step_copies(path: Path, prefixes: tuple[str, ...], any_thread: bool = False) -> list[tuple[str, int, int]]:
    """(name, GPU ops, device-to-device copies) of each CPU annotation range whose name starts
    with one of ``prefixes``, in time order: the GPU work launched by runtime calls that start
    inside the range on the range's own thread (``any_thread``: on any thread of its process),
    matched by correlation id (README "How the report works", step 1)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    events = [e for e in (doc if isinstance(doc, list) else doc["traceEvents"]) if e.get("ph") == "X"]
    kind = {id(e): KINETO_KINDS.get(str(e.get("cat", "")).lower()) for e in events}
    calls = [e for e in events if kind[id(e)] == "runtime"]
    gpu_by_corr: dict[Any, list[dict]] = {}
    for e in events:
        if kind[id(e)] in ("kernel", "memcpy", "memset"):
            gpu_by_corr.setdefault((e.get("args") or {}).get("correlation"), []).append(e)
    out = []
    for ann in sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith(prefixes)),
                      key=lambda e: e["ts"]):
        lo, hi = ann["ts"], ann["ts"] + ann["dur"]
        ops = [g for c in calls if (c["tid"] == ann["tid"] or (any_thread and c["pid"] == ann["pid"])) and lo <= c["ts"] < hi
               for g in gpu_by_corr.get(c["args"].get("correlation"), [])]
        d2d = sum(1 for g in ops if str(g["name"]).startswith(("Memcpy DtoD", "Memcpy PtoP"))
                  or (kind[id(g)] == "kernel" and COPY_KERNEL.match(g["name"])))
        out.append((ann["name"], len(ops), d2d))
    return out


def census(path: Path) -> dict[str, Any]:
    """The census of one sample, by the reading its file name says it needs."""
    if path.name.startswith("kineto_"):
        return kineto(path)
    if path.name.startswith("rocprofv3_json_"):
        return rocprofv3_json(path)
    if path.name.startswith("nsys_sqlite_"):
        return nsys(path)
    raise ValueError(f"no census reading for {path.name}")


if __name__ == "__main__":
    for sample in sorted(SAMPLES.glob("*")) if len(sys.argv) < 2 else [Path(a) for a in sys.argv[1:]]:
        if sample.name != "README.md":
            print(f"{sample.name!r}:")
            pprint.pprint(census(sample), width=110)
