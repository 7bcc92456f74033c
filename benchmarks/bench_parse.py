"""Side-by-side parse benchmark: HolisticTraceAnalysis 0.5.0 vs copyprof (run on demand).

What it does (method in benchmarks/README.md):

1. builds a ~1 GB (uncompressed) Kineto trace by replicating a real H200 replica capture
   (the largest ``traces/**/*.pt.trace.json.gz``; the public A100 sample if there is none)
   with shifted ``ts`` and offset correlation ids (make_trace.py), and a TP8-like run
   directory of 8 ranks of ~125 MB;
2. creates HTA 0.5.0's own virtual environment under benchmarks/out/ (pip, once), and one for
   copyprof with only its declared dependencies (``pip install .``, as the Quick start does):
   each tool is measured with what it installs, not with what this machine happens to have
   (pandas >= 3 imports pyarrow whenever it is installed: +35 MB of RSS that copyprof never
   uses). ``--python`` runs copyprof with another interpreter instead (say, the current one);
3. runs each case in a fresh process under GNU ``time -v`` while sampling the process tree's
   RSS and PSS every 100 ms (PSS counts pages shared by the parent and its decode workers once):
   HTA's ``parse_trace_file``; copyprof's parse alone; ``copyprof report --format json`` with
   no cache, with a cold cache (empty directory), with the table cache only (analysis redone)
   and a warm one (served from the result cache); the 8-rank directory serial
   (``--jobs 1``) and parallel (``--jobs 2``), cold and warm;
4. prints and writes (benchmarks/out/results.{json,md}) MB/s of uncompressed JSON per wall
   second, peak RSS and PSS, and the ratios to HTA.

    python benchmarks/bench_parse.py [--repeat 3] [--skip-hta] [--mb 1000] [--rank-mb 125] [--python PY]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
HTA_VENV = OUT / "hta-venv"
HTA_VERSION = "0.5.0"
COPYPROF_VENV = OUT / "copyprof-venv"
sys.path.insert(0, str(HERE))
from make_trace import build_trace  # noqa: E402
from measure import QUIET, repeat, timed  # noqa: E402


def pick_source() -> Path:
    """The benchmark's input: the Kimi-K3 TP8 N=24 graph-replay baseline (the figures in
    README.md are of it), else the largest shipped trace, else the A100 sample."""
    found = sorted((REPO / "traces").glob("replica-kimi-k3-tp8-c24-cuda-graph-baseline-*/*.pt.trace.json.gz"))
    found = found or sorted((REPO / "traces").glob("**/*.pt.trace.json.gz"), key=lambda p: p.stat().st_size)
    return found[-1] if found else REPO.parent / "shared" / "sample_traces" / "kineto_cupti_a100_cudagraph_rank0.json.gz"


def build_inputs(src: Path, mb: float, rank_mb: float, ranks: int, tag: str) -> dict[str, Any]:
    """Build (or reuse, when built from the same source and sizes) the benchmark inputs."""
    OUT.mkdir(exist_ok=True)
    stamp = OUT / f"inputs{tag}.json"
    want = {"source": str(src.relative_to(REPO.parent)) if src.is_relative_to(REPO.parent) else str(src),
            "source_bytes": src.stat().st_size, "mb": mb, "rank_mb": rank_mb, "ranks": ranks, "builder": 2}
    if stamp.is_file():
        have = json.loads(stamp.read_text())
        if {k: have.get(k) for k in want} == want:
            return have
    big = OUT / f"bench_1g{tag}.pt.trace.json.gz"
    info = dict(want, big=build_trace(str(src), str(big), mb))
    tp = OUT / f"tp8{tag}"
    tp.mkdir(exist_ok=True)
    info["ranks_info"] = [build_trace(str(src), str(tp / f"rank{r}.pt.trace.json.gz"), rank_mb, rank=r) for r in range(ranks)]
    stamp.write_text(json.dumps(info, indent=1))
    return info


def hta_python() -> Path:
    """HTA's python: $COPYPROF_BENCH_HTA_PYTHON (an environment made elsewhere, e.g. offline),
    else benchmarks/out/hta-venv's (``ensure_hta`` makes it)."""
    return Path(os.environ.get("COPYPROF_BENCH_HTA_PYTHON") or HTA_VENV / "bin" / "python")


def ensure_hta() -> dict[str, str]:
    """HTA's environment (``hta_python``), benchmarks/out/hta-venv created with pip on first use;
    returns the versions that matter."""
    py = hta_python()
    if "COPYPROF_BENCH_HTA_PYTHON" in os.environ:
        pass
    elif not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
    check = [str(py), "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'), m.version('pandas'))"]
    have = subprocess.run(check, capture_output=True, text=True).stdout.split()
    if "COPYPROF_BENCH_HTA_PYTHON" not in os.environ and (not have or have[0] != HTA_VERSION or not have[1].startswith("2.")):
        # pandas < 3: HTA 0.5.0's transform_correlation_to_index writes ids into an int16
        # column, which pandas 3 refuses (TypeError) on the H200 traces; pandas 2 upcasts.
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"HolisticTraceAnalysis=={HTA_VERSION}", "pandas<3"],
                       check=True)
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m, sys; print(sys.version.split()[0]); "
                          "[print(m.version(p)) for p in ('HolisticTraceAnalysis', 'pandas', 'numpy')]"],
                         capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(("python", "hta", "pandas", "numpy"), out))


def ensure_copyprof(python: str | None) -> tuple[str, dict[str, str | None]]:
    """copyprof's python: ``python`` if given, else benchmarks/out/copyprof-venv with copyprof's
    declared dependencies installed by pip (once). The checkout's code runs either way
    (PYTHONPATH); returns the interpreter and the versions that matter for speed and memory."""
    py = Path(python) if python else COPYPROF_VENV / "bin" / "python"
    if not python and not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(COPYPROF_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO)], check=True)
    probe = ("import importlib.metadata as m, sys\n"
             "def v(p):\n    try:\n        return m.version(p)\n    except m.PackageNotFoundError:\n        return None\n"
             "print(sys.version.split()[0], *(v(p) for p in ('pandas', 'numpy', 'pyarrow', 'msgspec', 'isal')))")
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    versions = dict(zip(("python", "pandas", "numpy", "pyarrow", "msgspec", "isal"),
                        [None if x == "None" else x for x in out]))
    # The checkout's native Kineto scanner, built in place for this interpreter (setup.py);
    # the figures say whether it was in use, as without it copyprof reads ~2-3x slower.
    subprocess.run([str(py), "setup.py", "-q", "build_ext", "--inplace"], cwd=REPO, check=True, capture_output=True)
    native = subprocess.run([str(py), "-c", "from copyprof.readers.kineto.native import native_available as n; "
                             "print(n())"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    versions["native_scanner"] = native
    # Byte-compile the checkout once, as `pip install` does for an installed copyprof: the
    # checkout runs from PYTHONPATH, and a host with PYTHONDONTWRITEBYTECODE=1 (this VM) would
    # otherwise compile its ~100 modules in every timed run (~0.05-0.1 s each time, measured).
    subprocess.run([str(py), "-m", "compileall", "-q", str(REPO / "copyprof")], check=True, capture_output=True)
    versions["bytecode"] = "compiled"
    return str(py), versions


def clear(path: Path) -> None:
    """Empty the cache: parsed tables (*.npz) and cached analyses (results/*.json)."""
    for f in [*path.glob("*.npz"), *path.glob("results/*.json")]:
        f.unlink()


def clear_results(path: Path) -> None:
    """Drop the cached analyses only: the next report re-analyses from the cached tables."""
    for f in path.glob("results/*.json"):
        f.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per copyprof case (median reported)")
    ap.add_argument("--hta-repeat", type=int, default=1)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--mb", type=float, default=1000.0)
    ap.add_argument("--rank-mb", type=float, default=125.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--source", type=Path, help="trace to replicate (default: the largest traces/**/*.pt.trace.json.gz)")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each run, wait up to this many seconds for other processes' CPU use to fall below 15%%")
    ap.add_argument("--tag", default="", help="suffix for the output files (results-TAG.json) and inputs")
    ap.add_argument("--no-tp8", action="store_true", help="skip the 8-rank directory")
    ap.add_argument("--only", default="", help="run only the cases whose name matches this regex")
    ap.add_argument("--model", default="kimi-k3", help="--model passed to every copyprof report case")
    ap.add_argument("--python", help="interpreter for copyprof (default: benchmarks/out/copyprof-venv, made with pip)")
    ap.add_argument("--paired", type=int, default=0,
                    help="instead of the cases: N rounds of HTA parse, report (no cache), report (first run), "
                         "back to back, and the ratio of each round")
    args = ap.parse_args()
    QUIET["wait_s"] = args.quiet_wait
    src = args.source.resolve() if args.source else pick_source()
    print(f"source: {src}", flush=True)
    tag = f"-{args.tag}" if args.tag else ""
    info = build_inputs(src, args.mb, args.rank_mb, 0 if args.no_tp8 else args.ranks, tag)
    big, tp = OUT / f"bench_1g{tag}.pt.trace.json.gz", OUT / f"tp8{tag}"
    mb_big = info["big"]["json_bytes"] / 1e6
    mb_tp = sum(r["json_bytes"] for r in info["ranks_info"]) / 1e6
    tp8 = not args.no_tp8
    cache = OUT / "cache"
    cache.mkdir(exist_ok=True)
    # PYTHONPATH: the copyprof of this checkout, whatever is installed (parse_only.py runs as a script).
    extra = os.environ.get("PYTHONPATH")  # e.g. wheels installed with --target on an offline host
    env = {"COPYPROF_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join([str(REPO), *([extra] if extra else [])])}
    py, info["copyprof_env"] = ensure_copyprof(args.python)
    print(f"copyprof env: {info['copyprof_env']}", flush=True)
    # --model: what users run on a Kimi-K3 rank trace (the attribution is part of the work);
    # on a trace of another model the census simply finds no [N, 7168] copies.
    report = [py, "-m", "copyprof", "report", "--format", "json", "--model", args.model]
    cases: dict[str, dict[str, Any]] = {}

    def run(name: str, mb: float, cmd: list[str], n: int, before: Any = None) -> None:
        if args.only and not re.search(args.only, name):
            return
        r = repeat(n, cmd, env, before)
        r["mb"], r["mb_per_s"] = mb, mb / r["wall_s"]
        cases[name] = r
        inner = f" (parse {r['inner']['parse_s']:.2f} s in-process)" if r.get("inner") else ""
        print(f"{name:<26} {r['wall_s']:7.2f} s {r['mb_per_s']:7.1f} MB/s  max RSS {r['max_rss_mb']:6.0f} MB  "
              f"tree PSS {r['tree_pss_mb']:6.0f} MB{inner}  runs {r['runs']} others {r['others']} sampled run {r['sampled_wall_s']} s", flush=True)

    if args.paired:
        info["hta_env"] = ensure_hta()
        hta_py = os.environ.get("COPYPROF_BENCH_HTA_PYTHON") or str(HTA_VENV / "bin" / "python")
        hta = [hta_py, str(HERE / "parse_only.py"), "hta", str(big)]
        result = {"inputs": info, "machine": _machine(), "commit": _commit(),
                  "paired": paired(args.paired, hta, [*report, "--no-cache", str(big)], [*report, str(big)], env, cache)}
        (OUT / f"results{tag}.json").write_text(json.dumps(result, indent=1))
        print(f"wrote {OUT / f'results{tag}.json'}")
        return
    if not args.skip_hta:
        info["hta_env"] = ensure_hta()
        hta_py = os.environ.get("COPYPROF_BENCH_HTA_PYTHON") or str(HTA_VENV / "bin" / "python")
        run("hta_parse", mb_big, [hta_py, str(HERE / "parse_only.py"), "hta", str(big)],
            args.hta_repeat)
    run("copyprof_parse_j1", mb_big, [py, str(HERE / "parse_only.py"), "copyprof", str(big), "1"], args.repeat)
    run("copyprof_parse_j2", mb_big, [py, str(HERE / "parse_only.py"), "copyprof", str(big), "2"], args.repeat)
    run("report_nocache_j1", mb_big, [*report, "--no-cache", "--jobs", "1", str(big)], args.repeat)
    run("report_nocache_j2", mb_big, [*report, "--no-cache", "--jobs", "2", str(big)], args.repeat)
    run("report_cold_cache", mb_big, [*report, str(big)], args.repeat, before=lambda: clear(cache))
    run("report_table_cache", mb_big, [*report, str(big)], args.repeat, before=lambda: clear_results(cache))
    run("report_warm_cache", mb_big, [*report, str(big)], args.repeat)
    if tp8:
        run("tp8_report_nocache_j1", mb_tp, [*report, "--no-cache", "--jobs", "1", str(tp)], args.repeat)
        run("tp8_report_nocache_j2", mb_tp, [*report, "--no-cache", "--jobs", "2", str(tp)], args.repeat)
        run("tp8_report_cold_cache_j2", mb_tp, [*report, "--jobs", "2", str(tp)], args.repeat, before=lambda: clear(cache))
        run("tp8_report_table_cache", mb_tp, [*report, str(tp)], args.repeat, before=lambda: clear_results(cache))
        run("tp8_report_warm_cache", mb_tp, [*report, str(tp)], args.repeat)
        run("tp8_parse_j1", mb_tp, [py, str(HERE / "parse_only.py"), "copyprof", str(tp), "1"], args.repeat)
        run("tp8_parse_j2", mb_tp, [py, str(HERE / "parse_only.py"), "copyprof", str(tp), "2"], args.repeat)
    result = {"inputs": info, "machine": _machine(), "cases": cases, "commit": _commit()}
    if "hta_parse" in cases:
        h = cases["hta_parse"]
        result["ratios_vs_hta"] = {name: {"speed_x": round(c["mb_per_s"] / h["mb_per_s"], 1),
                                          "max_rss_fraction": round(c["max_rss_mb"] / h["max_rss_mb"], 3),
                                          "tree_pss_fraction": round(c["tree_pss_mb"] / h["tree_pss_mb"], 3)}
                                   for name, c in cases.items() if name != "hta_parse" and not name.startswith("tp8")}
        for name, r in result["ratios_vs_hta"].items():
            print(f"vs HTA  {name:<26} {r['speed_x']:6.1f}x faster  RSS {r['max_rss_fraction']:.3f}  PSS {r['tree_pss_fraction']:.3f}")
    (OUT / f"results{tag}.json").write_text(json.dumps(result, indent=1))
    (OUT / f"results{tag}.md").write_text(_markdown(result))
    print(f"wrote {OUT / f'results{tag}.json'} and {OUT / f'results{tag}.md'}")


def paired(n: int, hta: list[str], nocache: list[str], first_run: list[str], env: dict[str, str],
           cache: Path) -> dict[str, Any]:
    """``n`` rounds of HTA, copyprof's report without cache and on a first run, back to back.

    Why: this VM's speed drifts by ±10 % over minutes (HTA measured 40.5-46.2 s and the report
    2.75-3.07 s in runs an hour apart), so a ratio of medians taken minutes apart moves with the
    drift. Within a round the three runs see about the same machine; each round gives its own
    ratios, and their median, minimum and maximum are reported. Unsampled runs (see repeat)."""
    rounds = []
    for i in range(n):
        h = timed(hta, env, sample=False)
        r = timed(nocache, env, sample=False)
        clear(cache)
        f = timed(first_run, env, sample=False)
        row = {"hta_s": h["wall_s"], "hta_rss_mb": h["max_rss_mb"], "report_s": r["wall_s"], "report_rss_mb": r["max_rss_mb"],
               "first_run_s": f["wall_s"], "first_run_rss_mb": f["max_rss_mb"],
               "others": [h["others_cpu"], r["others_cpu"], f["others_cpu"]],
               "report_x": round(h["wall_s"] / r["wall_s"], 2), "first_run_x": round(h["wall_s"] / f["wall_s"], 2),
               "report_rss_fraction": round(r["max_rss_mb"] / h["max_rss_mb"], 4),
               "first_run_rss_fraction": round(f["max_rss_mb"] / h["max_rss_mb"], 4)}
        rounds.append(row)
        print(f"round {i + 1}: HTA {row['hta_s']:.2f} s {row['hta_rss_mb']:.0f} MB | report {row['report_s']:.2f} s "
              f"{row['report_x']:.1f}x RSS {row['report_rss_fraction']:.3f} | first run {row['first_run_s']:.2f} s "
              f"{row['first_run_x']:.1f}x RSS {row['first_run_rss_fraction']:.3f} | others {row['others']}", flush=True)
    summary = {}
    for key in ("report_x", "first_run_x", "report_rss_fraction", "first_run_rss_fraction"):
        values = sorted(r[key] for r in rounds)
        summary[key] = {"median": values[len(values) // 2], "min": values[0], "max": values[-1]}
        print(f"{key:<24} median {summary[key]['median']}  min {values[0]}  max {values[-1]}", flush=True)
    return {"rounds": rounds, "summary": summary}


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "copyprof"], capture_output=True, text=True, cwd=REPO).stdout
    return out + ("+dirty" if dirty.strip() else "")


def _machine() -> dict[str, Any]:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    mem = next((ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")), "0")
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "mem_gib": round(int(mem) / 2**20, 1),
            "python": sys.version.split()[0], "kernel": os.uname().release}


def _markdown(result: dict[str, Any]) -> str:
    rows = ["| case | MB (JSON) | wall s (median) | runs: wall s (others' CPU share) | MB/s | peak RSS, time -v (MB) | peak PSS, process tree (MB) | x HTA speed | RSS / HTA |",
            "|---|---|---|---|---|---|---|---|---|"]
    ratios = result.get("ratios_vs_hta", {})
    for name, c in result["cases"].items():
        r = ratios.get(name, {})
        rows.append(f"| {name} | {c['mb']:.0f} | {c['wall_s']:.2f} | {', '.join(f'{x:.2f} ({o:.0%})' for x, o in zip(c['runs'], c['others']))} | {c['mb_per_s']:.1f} | {c['max_rss_mb']:.0f} | "
                    f"{c['tree_pss_mb']:.0f} | {r.get('speed_x', '')} | {r.get('max_rss_fraction', '')} |")
    envs = [f"{name}: " + ", ".join(f"{k} {v}" for k, v in env.items())
            for name, env in (("copyprof", result["inputs"].get("copyprof_env")), ("HTA", result["inputs"].get("hta_env")))
            if env]
    return "\n".join(rows) + "\n" + "".join(f"\n{e}" for e in envs) + ("\n" if envs else "")


if __name__ == "__main__":
    main()
