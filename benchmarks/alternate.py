"""Two checkouts of copyprof, one command, alternating rounds (run on demand; how the A/B
figures in docs/performance.md and benchmarks/README.md are taken).

Why alternate: this VM's speed drifts by 10-30 % over minutes, so two trees timed one after
the other compare hours, not code; the per-round ratio (B's time over A's, each round one run
of each) cancels the drift that is slower than a round. Why this script and not a loop in the
shell: ``python -m copyprof`` puts the current directory first on ``sys.path``, before
``PYTHONPATH``, so a loop run from inside a checkout runs that checkout in both arms. Here each
run starts in a fresh empty directory, each arm's module path is printed before the first
round and checked against its tree, and the outputs of A and B are compared byte for byte in
every round (a change to the read path or the analysis must leave them identical).

    python benchmarks/alternate.py TREE_A TREE_B [--rounds 10] [--python PY] -- report TRACE --format json --no-cache

Each tree needs its native scanner built for PY (``python setup.py build_ext --inplace``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def module_path(python: str, tree: Path, workdir: str) -> str:
    """Where ``copyprof`` is imported from when ``tree`` is on PYTHONPATH (run in ``workdir``)."""
    out = subprocess.run([python, "-c", "import copyprof; print(copyprof.__file__)"], cwd=workdir,
                         env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def timed(python: str, tree: Path, args: list[str], workdir: str) -> tuple[float, float, float, bytes]:
    """Wall seconds, CPU seconds of the command and its children, its peak RSS in MB (the
    largest of the process and the children it waited for, as GNU time reports it), and its
    stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([python, "-m", "copyprof", *args], cwd=workdir, stdout=out, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(tree)})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        out.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a", type=Path)
    ap.add_argument("tree_b", type=Path)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--python", default=sys.executable)
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("no copyprof arguments given (put them after --)")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]
    trees = {"A": a.tree_a.resolve(), "B": a.tree_b.resolve()}
    args = [str(Path(x).resolve()) if Path(x).exists() else x for x in args]  # paths survive the change of directory
    with tempfile.TemporaryDirectory(prefix="copyprof-alternate-") as workdir:
        for arm, tree in trees.items():
            where = module_path(a.python, tree, workdir)
            print(f"{arm}: {where}")
            if not where.startswith(str(tree) + os.sep):
                sys.exit(f"arm {arm} imports copyprof from {where}, not from {tree}")
        times: dict[str, list[float]] = {"A": [], "B": []}
        cpu: dict[str, list[float]] = {"A": [], "B": []}
        rss: dict[str, list[float]] = {"A": [], "B": []}
        for k in range(a.rounds):
            outputs = {}
            for arm, tree in trees.items():
                wall, used, peak, outputs[arm] = timed(a.python, tree, args, workdir)
                times[arm].append(wall)
                cpu[arm].append(used)
                rss[arm].append(peak)
            same = "same output" if outputs["A"] == outputs["B"] else "OUTPUT DIFFERS"
            print(f"round {k + 1}: A {times['A'][-1]:.2f} s  B {times['B'][-1]:.2f} s  "
                  f"B/A {times['B'][-1] / times['A'][-1]:.3f}  RSS A {rss['A'][-1]:.0f} MB  B {rss['B'][-1]:.0f} MB  {same}")
    ratios = [b / x for x, b in zip(times["A"], times["B"])]
    print(f"per-round B/A: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
          f"medians A {statistics.median(times['A']):.2f} s, B {statistics.median(times['B']):.2f} s; "
          f"CPU A {statistics.median(cpu['A']):.2f} s, B {statistics.median(cpu['B']):.2f} s; "
          f"peak RSS A {statistics.median(rss['A']):.1f} MB, B {statistics.median(rss['B']):.1f} MB")


if __name__ == "__main__":
    main()
