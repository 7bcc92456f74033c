"""On-demand fuzzing of every reader and of ``inspect``/``report --format json``; figures to FUZZ.md.

Usage (from the repository root)::

    python benchmarks/fuzz_readers.py                      # 10,000 mutated inputs per format
    python benchmarks/fuzz_readers.py --per-format 500     # a quicker look
    python benchmarks/fuzz_readers.py --replay KEY         # re-run one input (KEY as printed)

Each input is one seed (tests/fuzz/seeds.py: hand-made files and ../shared/sample_traces)
with one mutation (tests/fuzz/mutate.py), run by a worker process (tests/fuzz/harness.py)
under a per-input timer, an address-space limit and a hard kill. The figures go between the
``figures`` markers of benchmarks/FUZZ.md (the prose around them is kept); every failure is
listed with its KEY, and with ``--save-failures DIR`` its input is written there.

Why a script and not a test: ten thousand inputs per format take about an hour on two cores.
CI runs a bounded sample of the same machinery (tests/fuzz/test_fuzz_smoke.py).
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz.harness import FAILURES, Job, Pool, Result, make_jobs, run_input  # noqa: E402
from tests.fuzz.mutate import make_input  # noqa: E402
from tests.fuzz.seeds import FORMATS, build_seeds  # noqa: E402

FUZZ_MD = REPO / "benchmarks" / "FUZZ.md"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"
OUTCOMES = ("ok", "warned", "partial", "error") + FAILURES


def _job(key: str) -> Job:
    fmt, seed, op, rng, small = key.split(":")
    return Job(-1, fmt, int(seed), op, int(rng), int(small))


def replay(key: str, seeds_root: Path, save: Path | None) -> int:
    """Rebuild one input and run it here (no worker), printing what each command did."""
    from copyprof.readers import files as source

    seeds = build_seeds(seeds_root)
    job = _job(key)
    seed = seeds[job.fmt][job.seed]
    path = make_input(seed, job.op, random.Random(job.rng), (save or seeds_root.parent) / "replay")
    if job.small_blocks:
        source.BLOCK_SIZE = job.small_blocks
        if hasattr(source, "READ_SIZE"):
            source.READ_SIZE = job.small_blocks
    ins, rep, detail, secs, rss, _ = run_input(path, seed.model, 600.0)
    print(f"{key}: seed {seed.name}, input {path}\n  inspect {ins}, report {rep} in {secs:.2f} s, "
          f"peak RSS {rss / 1024:.0f} MiB\n  {detail}")
    return 0 if ins not in FAILURES and rep not in FAILURES else 1


def _table(results: list[Result], seeds: dict) -> list[str]:
    by_fmt: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        by_fmt[r.job.fmt].append(r)
    head = ["format", "inputs", *OUTCOMES[:4], "failures", "median ms", "slowest", "peak RSS", "most RSS added"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for fmt in FORMATS:
        rs = by_fmt.get(fmt, [])
        if not rs:
            continue
        c = collections.Counter(r.outcome for r in rs)
        slow = max(rs, key=lambda r: r.secs)
        peak = max(rs, key=lambda r: r.rss_kb)
        grew = max(rs, key=lambda r: r.rss_kb - r.base_kb)
        med = statistics.median(r.secs for r in rs) * 1000
        fails = sum(c[o] for o in FAILURES)
        lines.append(f"| {fmt} | {len(rs):,} | " + " | ".join(f"{c[o]:,}" for o in OUTCOMES[:4])
                     + f" | {fails} | {med:.0f} | {slow.secs:.2f} s (`{slow.job.key}`, {slow.seed_name}) "
                     f"| {peak.rss_kb / 1024:.0f} MiB | {(grew.rss_kb - grew.base_kb) / 1024:.0f} MiB "
                     f"({grew.seed_name}) |")
    return lines


def _checkout() -> str:
    """The commit being fuzzed (taken at the start: others may commit while a run goes on)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "copyprof"], capture_output=True, text=True, cwd=REPO).stdout
    return f"commit {commit.strip()}" + (" + uncommitted changes in copyprof/" if dirty.strip() else "")


def _details(results: list[Result], seeds: dict, elapsed: float, args: argparse.Namespace, restarts: int,
             checkout: str) -> list[str]:
    ops = collections.Counter((r.job.fmt, r.job.op) for r in results)
    per_seed = collections.Counter((r.job.fmt, r.seed_name) for r in results)
    out = [f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {checkout}, Python {platform.python_version()}, "
           f"{args.workers} workers on {platform.machine()}, {len(results):,} inputs in {elapsed / 60:.1f} min "
           f"(base seed {args.seed}; per-input timer {args.timeout:.0f} s, hard kill {args.hard_timeout:.0f} s, "
           f"address space {args.mem_gib} GiB; workers replaced after a death or kill: {restarts}).", "",
           "Inputs per seed:", ""]
    for fmt in FORMATS:
        names = [f"{name} {n:,}" for (f, name), n in sorted(per_seed.items()) if f == fmt]
        if names:
            out.append(f"- {fmt}: " + ", ".join(names))
    out += ["", "Inputs per mutation:", ""]
    for fmt in FORMATS:
        names = [f"{op} {n:,}" for (f, op), n in sorted(ops.items()) if f == fmt]
        if names:
            out.append(f"- {fmt}: " + ", ".join(names))
    failed = [r for r in results if r.outcome in FAILURES]
    out += ["", f"Failures: {len(failed)}" + (" (replay with `--replay KEY`):" if failed else "."), ""]
    groups: dict[tuple[str, str], list[Result]] = collections.defaultdict(list)
    for r in failed:
        groups[(r.job.fmt, r.detail.split(" in ")[0][:120])].append(r)
    for (fmt, what), rs in sorted(groups.items()):
        out.append(f"- {fmt}, {len(rs)}x {rs[0].outcome}: {what} (e.g. `{rs[0].job.key}`)")
    return out


def write_md(lines: list[str]) -> None:
    text = FUZZ_MD.read_text() if FUZZ_MD.exists() else f"# Reader fuzzing\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    FUZZ_MD.write_text(head + START + "\n" + "\n".join(lines) + "\n" + END + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-format", type=int, default=10_000)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--timeout", type=float, default=20.0, help="per-input timer (SIGALRM), seconds")
    ap.add_argument("--hard-timeout", type=float, default=90.0, help="worker killed after this, seconds")
    ap.add_argument("--mem-gib", type=int, default=3, help="worker address-space limit (RLIMIT_AS)")
    ap.add_argument("--replay", help="re-run one input: fmt:seed:op:rng:small_blocks")
    ap.add_argument("--save-failures", type=Path, help="write each failing input under this directory")
    ap.add_argument("--no-write", action="store_true", help="print the figures, leave FUZZ.md alone")
    ap.add_argument("--json", type=Path, help="also write every result as JSON lines here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="copyprof-fuzz-"))
    if args.replay:
        return replay(args.replay, tmp / "seeds", args.save_failures)
    checkout = _checkout()
    seeds = build_seeds(tmp / "seeds")
    jobs = make_jobs(seeds, args.per_format, args.seed, args.formats.split(","))
    pool = Pool(seeds, tmp / "work", workers=args.workers, timeout_s=args.timeout,
                hard_timeout_s=args.hard_timeout, mem_bytes=args.mem_gib << 30)
    results: list[Result] = []
    t0 = time.monotonic()
    sink = open(args.json, "w") if args.json else None
    for r in pool.run(jobs):
        results.append(r)
        if sink:
            sink.write(json.dumps(r.to_json()) + "\n")
        if r.outcome in FAILURES:
            print(f"FAIL {r.job.key} {r.seed_name}: {r.outcome}: {r.detail}", flush=True)
            if args.save_failures:
                make_input(seeds[r.job.fmt][r.job.seed], r.job.op, random.Random(r.job.rng),
                           args.save_failures / r.job.key.replace(":", "_"))
        if len(results) % 500 == 0:
            print(f"{len(results):,}/{len(jobs):,} inputs, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    if sink:
        sink.close()
    lines = _table(results, seeds) + [""] + _details(results, seeds, time.monotonic() - t0, args, pool.restarts, checkout)
    print("\n".join(lines))
    if not args.no_write:
        write_md(lines)
    return 1 if any(r.outcome in FAILURES for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
