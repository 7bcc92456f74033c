"""Which process uses the cores, and when, during one command (run on demand; figures in
docs/performance.md).

A cold report on two cores is three processes (the parent, which inflates, splits, gathers the
chunks' columns and then analyses, and two decode workers) whose CPU seconds add up to more
than the wall time allows only if they overlap. Phase timings (profile_phases.py) say how long
each phase takes, not whether a core sat idle during it: this samples the CPU time of the
command's process and of each of its children from /proc every ``--every`` seconds and prints
one line per sample (the seconds of CPU each process used in it), then the totals and the mean
number of busy cores. Linux only (/proc).

    python benchmarks/cpu_timeline.py [--every 0.1] -- copyprof report TRACE --format json --no-cache
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import descendants  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of ``pid`` so far (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=0.1, help="seconds between samples")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (put it after --)")
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    seen: dict[int, float] = {}
    lines = []
    while proc.poll() is None:
        time.sleep(args.every)
        used = {}
        for pid in [proc.pid, *descendants(proc.pid)]:
            now = cpu_seconds(pid)
            if now is not None:
                used[pid] = now - seen.get(pid, 0.0)
                seen[pid] = now
        workers = " ".join(f"{v:4.2f}" for pid, v in used.items() if pid != proc.pid)
        lines.append((time.perf_counter() - start, used.get(proc.pid, 0.0), sum(used.values()), workers))
    wall = time.perf_counter() - start
    print(f"{'t (s)':>6}  {'parent':>6}  {'busy cores':>10}  workers (CPU s in the sample)")
    for t, parent, total, workers in lines:
        print(f"{t:6.2f}  {parent:6.2f}  {total / args.every:10.2f}  {workers}")
    total_cpu = sum(seen.values())
    print(f"wall {wall:.2f} s, CPU {total_cpu:.2f} s (parent {seen.get(proc.pid, 0.0):.2f} s, "
          f"children {total_cpu - seen.get(proc.pid, 0.0):.2f} s), mean busy cores {total_cpu / wall:.2f}; "
          f"exit {proc.returncode}")


if __name__ == "__main__":
    main()
