"""Where a cold `copyprof report` spends its seconds and megabytes, phase by phase, in one fresh
process (run on demand, like the other benchmarks; figures in docs/performance.md).

Phases, in the order the report runs them: the interpreter and the command's imports; the read
(inflate, scan, columns, the event table: ``copyprof.reading.read_runs``, no cache); the
analysis's imports (numpy, pandas, scipy); the analysis (steps, census, layer map, copies,
estimate: ``analyze_run``); the JSON encode. After each, the wall time since the previous one,
the process's CPU time (its own; decode workers are children, counted apart), its RSS and its
peak RSS so far (VmHWM: where the peak is reached is the phase whose HWM jumps). A second line
times the inflate alone (isal, streamed into a 4 MiB buffer and dropped) for the read's share.

    python benchmarks/profile_phases.py TRACE_OR_RUN [JOBS] [--model kimi-k3]
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time

T0 = time.perf_counter()


def _status() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> None:
    model = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else None
    args = [a for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and sys.argv[i - 1] != "--model"]
    path, jobs = args[0], int(args[1]) if len(args) > 1 else 2
    phases: list[dict[str, object]] = []
    last = [T0, *_cpu()]

    def mark(name: str) -> None:
        now, me, kids = time.perf_counter(), *_cpu()
        st = _status()
        phases.append({"phase": name, "wall_s": round(now - last[0], 3), "cpu_s": round(me - last[1], 3),
                       "workers_cpu_s": round(kids - last[2], 3), "rss_mb": round(st["VmRSS"]),
                       "peak_rss_mb": round(st["VmHWM"])})
        last[:] = [now, me, kids]

    import copyprof.cli.main  # noqa: F401  (what `copyprof report` imports before reading)
    from copyprof.reading import read_runs
    from copyprof.rundir.model import resolve_layout

    mark("start + command imports")
    traces = read_runs([path], jobs=jobs)
    mark(f"read (jobs={jobs})")
    from copyprof.analysis.report import analyze_run
    from copyprof.analysis.results import encode

    mark("analysis imports")
    layout, _ = resolve_layout(model, [path])
    report = analyze_run(traces, path, layout, jobs=jobs)  # as the report runs it: --jobs forks too
    mark("analysis")
    size = len(encode(report))
    mark("encode")
    print(json.dumps({"trace": path, "jobs": jobs, "json_bytes": size, "phases": phases}))
    if os.path.isfile(path) and path.endswith(".gz"):
        from isal import igzip

        t, n = time.perf_counter(), 0
        with igzip.open(path, "rb") as fh:
            buf = bytearray(4 << 20)
            while (k := fh.readinto(buf)):
                n += k
        print(json.dumps({"inflate_only_s": round(time.perf_counter() - t, 3), "uncompressed_mb": round(n / 1e6)}))


if __name__ == "__main__":
    main()
