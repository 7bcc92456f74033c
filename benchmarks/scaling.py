"""How time and peak RSS grow with the trace: HTA 0.5.0's parse and `copyprof report --no-cache`
on 0.25, 0.5, 1 and 2 GB Kineto traces, paired (run on demand; figures in docs/performance.md).

Each size: ``ROUNDS`` rounds of HTA's parse then the report, each a fresh process under GNU
``time -v`` (measure.timed, unsampled); per round the ratio of HTA's wall time to the report's
and of the peak RSS, the medians reported. A least-squares line through the report's median
seconds and peak MB against the size gives the slope (s/GB, MB/GB) and the intercept (what a
report costs before the first byte: imports, start-up). The traces come from make_trace.py
(the Kimi-K3 TP8 N=16 graph-replay replica capture replicated: the 1 GB trace the changes'
alternating benchmarks use; bench_parse.py's is the N=24 one); HTA's environment is
bench_parse.py's.

    python benchmarks/scaling.py [--rounds 3] [--sizes 250,500,1000,2000] [--skip-hta]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_parse import OUT, ensure_hta, hta_python  # noqa: E402  (the benchmarks' own helpers)
from make_trace import build_trace  # noqa: E402
from measure import REPO, timed  # noqa: E402

SOURCE = sorted((REPO / "traces").glob("replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z/rank0.*.pt.trace.json.gz"))


def trace_of(mb: int) -> Path:
    path = OUT / f"h200-{mb}mb.json.gz"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        build_trace(str(SOURCE[0]), str(path), mb)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="250,500,1000,2000")
    ap.add_argument("--skip-hta", action="store_true")
    args = ap.parse_args()
    if not args.skip_hta:
        ensure_hta()
    rows = []
    for mb in (int(s) for s in args.sizes.split(",")):
        path = trace_of(mb)
        report = [sys.executable, "-m", "copyprof", "report", "--no-cache", "--format", "json", "--model", "kimi-k3",
                  str(path)]
        hta = [str(hta_python()), str(REPO / "benchmarks" / "parse_only.py"), "hta", str(path)]
        rounds = []
        for _ in range(args.rounds):
            h = None if args.skip_hta else timed(hta, sample=False)
            r = timed(report, sample=False)
            rounds.append({"hta": h, "report": r})
            print(json.dumps({"mb": mb, "hta_s": h and h["wall_s"], "hta_mb": h and round(h["max_rss_mb"]),
                              "report_s": r["wall_s"], "report_mb": round(r["max_rss_mb"])}), flush=True)
        row = {"mb": mb, "report_s": statistics.median(x["report"]["wall_s"] for x in rounds),
               "report_rss_mb": statistics.median(x["report"]["max_rss_mb"] for x in rounds), "rounds": rounds}
        if not args.skip_hta:
            row.update(hta_s=statistics.median(x["hta"]["wall_s"] for x in rounds),
                       hta_rss_mb=statistics.median(x["hta"]["max_rss_mb"] for x in rounds),
                       speed_ratio=statistics.median(x["hta"]["wall_s"] / x["report"]["wall_s"] for x in rounds),
                       rss_ratio=statistics.median(x["report"]["max_rss_mb"] / x["hta"]["max_rss_mb"] for x in rounds))
        rows.append(row)
    gb = np.array([r["mb"] / 1000 for r in rows])
    fit = {k: dict(zip(("slope_per_gb", "intercept"), np.polyfit(gb, [r[k] for r in rows], 1).round(3).tolist()))
           for k in ("report_s", "report_rss_mb")} if len(rows) > 1 else {}
    result = {"rows": rows, "fit": fit}
    (OUT / "scaling.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({"fit": fit}))
    for r in rows:
        print(f"| {r['mb'] / 1000:g} GB | {r.get('hta_s', float('nan')):.1f} s, {r.get('hta_rss_mb', float('nan')):.0f} MB "
              f"| {r['report_s']:.2f} s, {r['report_rss_mb']:.0f} MB | {r.get('speed_ratio', float('nan')):.1f}x "
              f"| {r.get('rss_ratio', float('nan')):.3f} |")


if __name__ == "__main__":
    main()
