"""The GPU's own time per decode step of each corpus capture, read with the standard library only.

The independent reading of what `copyprof report` calls GPU busy and graph-replay span
(per_step.gpu_busy_ms, per_step.gpu_replay_span_ms), sharing no code with copyprof:

* a step's GPU ops are the kernels, memcpys and memsets whose correlation id names a runtime
  call made inside the step's ``execute_context_…_generation_…`` range (extract.py's rule);
* GPU busy: the length of the union of those ops' [ts, ts + dur] intervals, all streams;
* graph-replay span: last end minus first start among those of the ops whose runtime call is a
  ``cudaGraphLaunch`` (absent when the step launched no graph).

Each run's figures are medians over its decode steps, in ms.

    python3 corpus/truth/gpu_time.py corpus/runs/RUN ...     # print
    python3 corpus/truth/gpu_time.py --write                  # every run -> corpus/truth/gpu_time.json
    python3 corpus/truth/gpu_time.py --check                  # re-derive and compare with the file
"""
from __future__ import annotations

import bisect
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extract import GPU_CATS, RUNTIME_CATS, STEP, load  # noqa: E402  (the corpus's stdlib reader)

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "..", "runs")
OUT = os.path.join(HERE, "gpu_time.json")


def union_us(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


def gpu_time(trace: dict) -> dict:
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and STEP.match(e["name"])),
                   key=lambda e: e["ts"])
    starts = [s["ts"] for s in steps]
    runtime = {e["args"]["correlation"]: e for e in ev
               if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})}
    ops: list[list[tuple[float, float, bool]]] = [[] for _ in steps]
    for e in ev:
        if e.get("cat") not in GPU_CATS:
            continue
        r = runtime.get(e.get("args", {}).get("correlation"))
        if r is None:
            continue
        i = bisect.bisect_right(starts, r["ts"]) - 1
        if i >= 0 and r["ts"] <= steps[i]["ts"] + steps[i]["dur"]:
            ops[i].append((e["ts"], e["ts"] + e.get("dur", 0), r["name"] in ("cudaGraphLaunch", "cudaGraphLaunch_v10000")))
    busy = [union_us([(s, e) for s, e, _ in o]) / 1000 for o in ops if o]
    spans = [(max(e for s, e, g in o if g) - min(s for s, e, g in o if g)) / 1000 for o in ops if any(g for *_, g in o)]
    return {"steps": len(busy), "busy_ms": round(statistics.median(busy), 6) if busy else None,
            "replay_ms": round(statistics.median(spans), 6) if spans else None}


def every_run() -> dict:
    return {name: gpu_time(load(os.path.join(RUNS, name))) for name in sorted(os.listdir(RUNS))
            if os.path.isdir(os.path.join(RUNS, name))}


if __name__ == "__main__":
    if "--write" in sys.argv:
        with open(OUT, "w") as fh:
            json.dump(every_run(), fh, indent=1, sort_keys=True)
            fh.write("\n")
    elif "--check" in sys.argv:
        with open(OUT) as fh:
            stored = json.load(fh)
        fresh = every_run()
        bad = [k for k in set(stored) | set(fresh) if stored.get(k) != fresh.get(k)]
        if bad:
            raise SystemExit(f"gpu_time.json differs from the traces for: {', '.join(sorted(bad))}")
        print(f"gpu_time.json: {len(fresh)} runs, all as the traces say")
    else:
        for path in sys.argv[1:]:
            print(path, gpu_time(load(path)))
