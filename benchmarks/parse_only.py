"""One parse in a fresh process, timed inside it: ``hta`` (HTA's trace parse, run with HTA's
venv python) or ``copyprof`` (copyprof's reader, no cache, no analysis).

Prints one JSON line: import seconds, parse seconds, rows. Used by bench_parse.py, which runs
this under GNU ``time -v`` so the process's peak RSS is measured too.

    python benchmarks/parse_only.py hta TRACE
    python benchmarks/parse_only.py copyprof TRACE_OR_DIR [JOBS]
"""
from __future__ import annotations

import json
import sys
import time


def main() -> None:
    tool, path = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    if tool == "hta":
        from hta.common.trace import parse_trace_file  # HTA 0.5.0: JSON backend by default

        t1 = time.perf_counter()
        _, df, _ = parse_trace_file(path)
        rows = len(df)
    else:
        from copyprof.reading import read_runs

        t1 = time.perf_counter()
        rows = sum(len(t.events) for t in read_runs([path], jobs=int(sys.argv[3]) if len(sys.argv) > 3 else 1))
    t2 = time.perf_counter()
    print(json.dumps({"import_s": round(t1 - t0, 3), "parse_s": round(t2 - t1, 3), "rows": rows}))


if __name__ == "__main__":
    main()
