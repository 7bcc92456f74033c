"""Independent event counts of real traces, to check ``copyprof inspect`` against (run on demand).

Stdlib only and sharing no code with copyprof: it reads each file with ``json`` / ``csv`` as a
whole and counts by its own rules, written from the format docs (Chrome trace: complete "X"
events by ``cat``; rocprofv3: one row or record per dispatch / copy / API call), so that a
reader bug cannot hide in a shared helper. With ``--compare`` it runs ``copyprof inspect
--format json`` on the same file (the interpreter given by ``--python``) and prints one
markdown row per file (per rank for merged multi-rank files) with both readings and whether
they agree. Results and method: benchmarks/REAL_TRACES.md.

    python benchmarks/count_events.py [--compare] [--python PY] FILE_OR_DIR...
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

KIND_OF_CAT = {  # Chrome-trace categories as Kineto writes them (libkineto ActivityType names; 2020-21 capitalised)
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "cuda_driver": "runtime", "runtime": "runtime", "hip_runtime": "runtime",
    "user_annotation": "annotation", "gpu_user_annotation": "annotation", "cpu_op": "cpu_op", "operator": "cpu_op",
}
KINDS = ("kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op")
COPY_KERNEL = re.compile(r"^(__amd_rocclr_copyBuffer|memcpy\d*_post|MEMORY_COPY_DEVICE_TO_DEVICE)")
GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)")
LABEL = re.compile(r"\[((?:TP|DP|PP|EP)\d+(?:-(?:TP|DP|PP|EP)\d+)*)\]")


def _open(path: str) -> Any:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rt", encoding="utf-8") if magic == b"\x1f\x8b" else open(path, encoding="utf-8")


def _is_d2d_memcpy(ev: dict) -> bool:
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    text = f"{ev.get('name', '')} {args.get('kind', '')}"
    return "DtoD" in text or "PtoP" in text or "Device -> Device" in text


def _rank_of(ev: dict) -> str:
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    if isinstance(args.get("rank"), int):
        return str(args["rank"])
    m = LABEL.search(ev["pid"]) if isinstance(ev.get("pid"), str) else None
    return m.group(1) if m else ""


def count_chrome(path: str) -> dict[str, dict[str, Any]]:
    with _open(path) as fh:
        doc = json.load(fh)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
    if isinstance(events, dict):  # {"pid,tid": [...]}
        events = [e for group in events.values() for e in group]
    complete = [e for e in events if isinstance(e, dict) and e.get("ph", "X") == "X"]
    ranks = [_rank_of(e) for e in complete]
    marked = sum(1 for r in ranks if r)
    if len(set(ranks) - {""}) < 2 or marked < 0.99 * len(ranks):
        ranks = [""] * len(complete)
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"counts": Counter(), "d2d": 0, "graph_launches": 0,
                                                         "string_grids": 0})
    for ev, rank in zip(complete, ranks):
        cat = ev.get("cat")
        kind = KIND_OF_CAT.get(cat.lower()) if isinstance(cat, str) else None
        r = out[rank]
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        r["string_grids"] += sum(isinstance(args.get(k), str) for k in ("grid", "block"))
        if kind is None:
            continue
        r["counts"][kind] += 1
        name = str(ev.get("name", ""))
        if kind == "memcpy" and _is_d2d_memcpy(ev):
            r["d2d"] += 1
        elif kind == "kernel" and COPY_KERNEL.match(name):
            r["d2d"] += 1
        elif kind == "runtime" and GRAPH_LAUNCH.match(name):
            r["graph_launches"] += 1
    return dict(out)


def count_rocprofv3_json(path: str) -> dict[str, dict[str, Any]]:
    with _open(path) as fh:
        doc = json.load(fh)
    out = {}
    for proc in doc["rocprofiler-sdk-tool"]:
        names = {s["kernel_id"]: s.get("kernel_name", "") for s in proc.get("kernel_symbols", [])}
        rec = proc["buffer_records"]
        dispatches = rec.get("kernel_dispatch", [])
        copies = rec.get("memory_copy", [])
        d2d = sum(1 for d in dispatches if COPY_KERNEL.match(names.get(d["dispatch_info"]["kernel_id"], "")))
        out[str(proc["metadata"].get("pid", len(out)))] = {
            "counts": Counter(kernel=len(dispatches), memcpy=len(copies),
                              runtime=len(rec.get("hip_api", [])), annotation=len(rec.get("marker_api", []))),
            "d2d": d2d, "graph_launches": None, "string_grids": 0}
    return out


def count_rocprofv3_csv(path: str) -> dict[str, dict[str, Any]]:
    with _open(path) as fh:
        rows = list(csv.DictReader(fh))
    cols = {c.lower() for c in (rows[0] if rows else {})}
    counts, d2d = Counter(), 0
    for row in rows:
        low = {k.lower(): v for k, v in row.items()}
        if "kernel_name" in cols:
            counts["kernel"] += 1
            d2d += bool(COPY_KERNEL.match(low["kernel_name"]))
        elif "direction" in cols:
            counts["memcpy"] += 1
            d2d += "DEVICE_TO_DEVICE" in low["direction"].upper()
        elif "function" in cols:
            kind = "annotation" if low.get("domain", "").upper().startswith("MARKER") else "runtime"
            counts[kind] += low.get("domain", "").upper().startswith(("MARKER", "HIP"))
    return {"": {"counts": counts, "d2d": d2d, "graph_launches": None, "string_grids": 0}}


def count(path: str) -> dict[str, dict[str, Any]]:
    with _open(path) as fh:
        head = fh.read(4096)
    if head.lstrip().startswith(("{", "[")):
        return count_rocprofv3_json(path) if '"rocprofiler-sdk-tool"' in head else count_chrome(path)
    return count_rocprofv3_csv(path)


def inspect(path: str, python: str) -> list[dict[str, Any]]:
    proc = subprocess.run([python, "-m", "copyprof", "inspect", "--no-cache", "--format", "json", path],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        return [{"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}]
    return json.loads(proc.stdout)["files"]


def compare(path: str, python: str) -> list[str]:
    mine = count(path)
    theirs = inspect(path, python)
    rows = []
    if "error" in theirs[0]:
        return [f"| {os.path.basename(path)} | | copyprof failed: {theirs[0]['error']} | | no |"]
    by_rank = sorted(mine.items())
    for (rank, m), t in zip(by_rank, theirs):
        ours = [m["counts"].get(k, 0) for k in KINDS] + [m["d2d"]]
        cp = [t["counts"][k] for k in KINDS] + [t["d2d_copies"]]
        checks = [(a, b) for a, b in zip(ours, cp)]
        if m["graph_launches"] is not None:
            checks.append((m["graph_launches"], t["graph_launches"]))
        agree = all(a == b for a, b in checks) and len(by_rank) == len(theirs)
        label = os.path.basename(path) + (f" rank {t['ranks']}" if len(theirs) > 1 else "")
        note = "; ".join(filter(None, [t.get("partial") or "", *t.get("warnings", [])]))
        rows.append(f"| {label} | {'/'.join(map(str, ours))} g{m['graph_launches']} | "
                    f"{'/'.join(map(str, cp))} g{t['graph_launches']} | {note[:120]} | {'yes' if agree else 'NO'} |")
    if len(by_rank) != len(theirs):
        rows.append(f"| {os.path.basename(path)} | {len(by_rank)} rank(s) | {len(theirs)} trace(s) | | NO |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--compare", action="store_true", help="also run copyprof inspect and print a markdown table")
    ap.add_argument("--python", default=sys.executable, help="interpreter with copyprof installed")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        files += sorted(os.path.join(p, f) for f in os.listdir(p)) if os.path.isdir(p) else [p]
    if args.compare:
        print("| file | independent: kernel/memcpy/memset/runtime/annotation/cpu_op/d2d g=graph launches | "
              "copyprof inspect | copyprof partial / warnings | agree |")
        print("|---|---|---|---|---|")
    for f in files:
        if args.compare:
            print("\n".join(compare(f, args.python)), flush=True)
        else:
            for rank, m in sorted(count(f).items()):
                print(json.dumps({"file": f, "rank": rank, **m}, default=dict))


if __name__ == "__main__":
    main()
