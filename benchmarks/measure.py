"""Running one command in a fresh process and measuring it (used by bench_parse.py).

Why a module of its own: how a run is timed decides what the benchmark's numbers mean, so it
sits apart from what is run. ``timed`` runs a command under GNU ``time -v`` (wall time, peak
RSS of the process) and, when asked, samples the RSS/PSS of its whole process tree;
``repeat`` takes the median of unsampled runs plus one sampled run; ``wait_quiet`` and the
``others`` share say how busy the rest of the machine was.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class TreeSampler(threading.Thread):
    """Peak RSS and PSS summed over a process and all its descendants (/proc, every 100 ms)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.stop, self.peak_rss, self.peak_pss, self.peak_procs = root, threading.Event(), 0, 0, 0

    def run(self) -> None:
        while not self.stop.wait(0.1):
            pids = descendants(self.root)
            rss = pss = 0
            for pid in pids:
                try:
                    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
                except OSError:
                    continue
                rss += int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1))
                pss += int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1))
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(pids))


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc: parent ids), not ``root`` itself."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(c for c, p in parent.items() if p == pid)
    return [p for p in out if p != root]  # not GNU time itself


def _cpu_snap() -> tuple[int, int]:
    """Machine-wide (total, idle + iowait) CPU ticks from /proc/stat."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(v), v[3] + v[4]


def _cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``seconds``, i.e. other people's load."""
    snap = _cpu_snap
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1 - (i1 - i0) / max(1, t1 - t0)


QUIET = {"wait_s": 0.0, "below": 0.15}


def wait_quiet() -> float:
    """Wait (up to QUIET["wait_s"]) until the machine is idle; returns the busy fraction seen."""
    deadline = time.monotonic() + QUIET["wait_s"]
    busy = _cpu_busy()
    while busy > QUIET["below"] and time.monotonic() < deadline:
        busy = _cpu_busy()
    return busy


def timed(cmd: list[str], env: dict[str, str] | None = None, sample: bool = True) -> dict[str, Any]:
    """Run ``cmd`` under GNU time -v; wall seconds, peak RSS (time -v) and, with ``sample``,
    tree RSS/PSS (0 without)."""
    load = round(wait_quiet(), 3)
    tick0, idle0 = _cpu_snap()
    proc = subprocess.Popen(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})}, cwd=REPO)
    sampler = TreeSampler(proc.pid)
    if sample:
        sampler.start()
    out, err = proc.communicate()
    tick1, idle1 = _cpu_snap()
    if sample:
        sampler.stop.set()
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", err).group(1)
    secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    user = float(re.search(r"User time \(seconds\): (\S+)", err).group(1))
    system = float(re.search(r"System time \(seconds\): (\S+)", err).group(1))
    inner = next((json.loads(line) for line in out.splitlines() if line.startswith('{"import_s"')), None)
    # CPU the rest of the machine used while we ran, as a fraction of all cores x wall time.
    hz, cores = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    others = max(0.0, ((tick1 - tick0) - (idle1 - idle0)) / hz - (user + system)) / max(1e-9, secs * cores)
    return {"wall_s": secs, "cpu_s": user + system, "others_cpu": round(others, 3), "max_rss_mb": rss_kb / 1024, "tree_rss_mb": sampler.peak_rss / 1024,
            "tree_pss_mb": sampler.peak_pss / 1024, "procs": sampler.peak_procs, "busy_before": load, "inner": inner,
            "stdout_bytes": len(out)}


CONTENDED = 0.10  # runs where other processes used more than this share of the CPUs


def repeat(n: int, cmd: list[str], env: dict[str, str] | None = None, before: Any = None) -> dict[str, Any]:
    """Median of the timed runs that were not contended (other processes < 10% of the CPUs);
    of all runs when every one was. Every run's wall time and contention is kept.

    The timed runs are not sampled: reading the whole of /proc and every descendant's
    smaps_rollup ten times a second used 2-4 % of this VM's two cores (seen as "others' CPU"
    in sampled runs) and takes each process's mmap lock while it walks the page tables: it
    slowed HTA's parse (3.3 GB mapped) by ~9 % (42.1 s unsampled, 46.2 s sampled) and
    copyprof's report, which keeps both cores busy, by ~5 % (2.75 / 2.90 s). Tree RSS / PSS come from one more, sampled run
    (its wall time is kept as ``sampled_wall_s``); the peak RSS compared with HTA's is GNU
    time's, from every run."""
    runs = []
    for _ in range(n):
        if before:
            before()
        runs.append(timed(cmd, env, sample=False))
    if before:
        before()
    sampled = timed(cmd, env, sample=True)
    clean = [r for r in runs if r["others_cpu"] < CONTENDED] or runs
    med = sorted(clean, key=lambda r: r["wall_s"])[len(clean) // 2]
    return {**med, "runs": [round(r["wall_s"], 3) for r in runs], "others": [r["others_cpu"] for r in runs],
            "clean_runs": sum(r["others_cpu"] < CONTENDED for r in runs),
            "max_rss_mb": max(r["max_rss_mb"] for r in [*runs, sampled]), "tree_pss_mb": sampled["tree_pss_mb"],
            "tree_rss_mb": sampled["tree_rss_mb"], "procs": sampled["procs"], "sampled_wall_s": round(sampled["wall_s"], 3)}
