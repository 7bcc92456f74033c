"""Know when the profiler's files are complete, and finish them (nsys SQLite export).

Why: profilers write large files after the window closes — torch's trace handler while the
server keeps running, rocprofv3 and nsys only when the server process exits — and nothing
announces "done". A report read from a half-written file is silently wrong, and a server killed
mid-write loses the capture. So copyprof waits until every trace file is *complete*. A gzip
file proves it: the stream decompresses to its end, the trailer's CRC and length check out,
and its size held over one poll (torch writes the trailer as it closes the file, after every
byte). Any other file can only be judged by its size not changing for a while (STABLE_S): a
run with such files waits that long; one of gzip traces alone, the usual torch run, does not.
Only then is the server stopped (torch) or the run declared complete (rocprofv3/nsys).
"""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

STABLE_S = 3.0  # how long a file that cannot prove itself whole (not gzip) must keep its size
POLL_S = 0.5


def gzip_complete(path: Path) -> bool:
    """True when ``path`` is a whole gzip stream (read to the end; CRC and size verified by gzip)."""
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 22):
                pass
        return True
    except (EOFError, OSError, zlib.error):
        return False


def list_files(root: Path) -> list[Path]:
    """Regular files under ``root`` (recursively), skipping hidden and temporary names."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(Path(dirpath) / f for f in sorted(filenames)
                   if not f.startswith(".") and not f.endswith((".tmp", ".part")))
    return out


def rank_traces(files: list[Path]) -> list[Path]:
    """Worker (rank) Kineto traces; the API-process ``*.async_llm.*`` trace is not a rank trace."""
    return [f for f in files if ".pt.trace.json" in f.name and "async_llm" not in f.name]


def wait_complete(root: Path, ready: Callable[[list[Path]], bool], what: str, timeout_s: float,
                  check: Callable[[], None] | None = None, stable_s: float = STABLE_S,
                  on_tick: Callable[[str], None] | None = None) -> list[Path]:
    """Wait until ``ready(files)`` holds and every file under ``root`` is complete; return the files.

    Complete: unchanged in size and mtime for ``stable_s`` seconds, or, where every file is a
    gzip, for one poll and then read whole to its trailer."""
    deadline = time.monotonic() + timeout_s
    last: dict[Path, tuple[int, float]] = {}
    stable_since: float | None = None
    verified: dict[Path, int] = {}
    while True:
        files = list_files(root)
        sizes = {f: (f.stat().st_size, f.stat().st_mtime) for f in files if f.exists()}
        now = time.monotonic()
        if sizes != last:
            last, stable_since = sizes, now
        hold_s = min(POLL_S, stable_s) if all(f.name.endswith(".gz") for f in files) else stable_s
        if files and ready(files) and stable_since is not None and now - stable_since >= hold_s:
            bad = [f for f in files if f.name.endswith(".gz") and verified.get(f) != sizes[f][0]
                   and not gzip_complete(f)]
            for f in files:
                if f not in bad and f.name.endswith(".gz"):
                    verified[f] = sizes[f][0]
            if not bad:
                return files
            stable_since = now  # a gzip not yet whole: keep waiting for it to grow
        if check:
            check()
        if now > deadline:
            names = ", ".join(f.name for f in files) or "none"
            raise CopyprofError(f"timed out after {timeout_s:.0f} s waiting for {what} in {root} "
                                f"(files so far: {names})", exit_code=EXIT_CAPTURE_FAILED)
        if on_tick:
            total = sum(s for s, _ in sizes.values())
            on_tick(f"{len(files)} file(s), {total / 1e6:.1f} MB")
        time.sleep(POLL_S)


def describe_usable(run_dir: Path, trace_dir: Path | None) -> dict[str, object]:
    """What a run that stopped early still holds, for run.json's ``usable`` (read by people and tools).

    Every file under the trace folder is listed with its size (nothing is ever deleted) and
    the trace format its content has (``null``: not a trace copyprof reads); gzip files are
    checked to their end (``complete``: the stream and its CRC are whole); other files'
    completeness is not known (``null``). ``report`` says whether ``copyprof report``
    has something to read: ``yes``, ``partial: ...`` (it keeps the events before a cut), or
    ``no: ...`` with the reason.
    """
    from copyprof.readers.registry import sniff

    files = list_files(trace_dir) if trace_dir is not None else []
    traces = []
    for f in files:
        entry: dict[str, object] = {"file": str(f.relative_to(run_dir)), "bytes": f.stat().st_size}
        try:
            entry["format"] = sniff(str(f))  # by content, as report will; profiler_out.txt is not a trace
        except CopyprofError:
            entry["format"] = None
        entry["complete"] = gzip_complete(f) if f.name.endswith(".gz") else None
        traces.append(entry)
    metrics = (run_dir / "client_metrics.json").is_file()
    nonempty = [t for t in traces if t["bytes"] and t["format"]]
    cut = [t for t in nonempty if t["complete"] is False]
    if not nonempty:
        verdict = "no: no trace that copyprof reads was written before the run stopped"
    elif cut:
        verdict = (f"partial: {len(cut)} of {len(nonempty)} trace file(s) are cut short; copyprof report reads the "
                   "events before the cut (and says so where none of them is GPU work)")
    else:
        verdict = "yes"
    return {"traces": traces, "client_metrics": metrics, "report": verdict}


def torch_ready(tp: int) -> Callable[[list[Path]], bool]:
    """All ``tp`` rank traces are there (one file per rank per profiling run, vllm-and-kimi.md §8.3)."""
    return lambda files: len(rank_traces(files)) >= tp


def rocprof_ready(files: list[Path]) -> bool:
    """At least one rocprofv3 kernel-trace output (CSV, JSON or rocpd database) exists."""
    return any(f.name.endswith(("_kernel_trace.csv", "_results.json", "_results.db", "_results.pftrace"))
               or f.suffix == ".otf2" for f in files)


def nsys_ready(files: list[Path]) -> bool:
    return any(f.suffix == ".nsys-rep" for f in files)


def nsys_export_sqlite(trace_dir: Path, timeout_s: float) -> list[Path]:
    """``nsys export --type sqlite`` for each report (argument list); returns the new .sqlite files."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise CopyprofError("nsys not found on PATH for the SQLite export", exit_code=EXIT_CAPTURE_FAILED)
    out: list[Path] = []
    for rep in sorted(trace_dir.glob("*.nsys-rep")):
        target = rep.with_suffix(".sqlite")
        if target.exists():
            raise CopyprofError("refusing to overwrite an existing export", path=str(target),
                                exit_code=EXIT_CAPTURE_FAILED)
        proc = subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(target), str(rep)],
                              capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or not target.exists():
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise CopyprofError(f"nsys export failed (exit {proc.returncode}): {tail}", path=str(rep),
                                exit_code=EXIT_CAPTURE_FAILED)
        out.append(target)
    return out
