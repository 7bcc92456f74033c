"""From user paths (files, trace directories, vLLM profile dirs, run dirs) to readable sources.

A directory is searched (a few levels deep) for files whose *content* is a trace; run.json,
client metrics, logs and vLLM's ``*.profiler_out.txt`` are skipped. rocprofv3 CSV files are
grouped per process. vLLM's API-process trace (``*.async_llm.*``) is read with
``role="frontend"`` so that analyses can leave it out of the per-rank figures.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from copyprof.errors import CopyprofError
from copyprof.readers.files import head_bytes
from copyprof.readers.registry import reader_for, sniff
from copyprof.rundir.record import given, load_run_record

MAX_DEPTH = 4
_SKIP_NAMES = re.compile(r"(^run\.json$|^timing\.json$|metrics.*\.json$|\.profiler_out\.txt$|\.log$|\.md$|\.py$|\.tmp$"
                         r"|\.(toml|cfg|ini|ya?ml|lock|sh|c|h|txt)$)")
_EVENT_ARRAY = re.compile(rb"^\s*\[\s*(\{|\])")  # a bare event array, not "[section]" of a TOML/INI file
if TYPE_CHECKING:
    from copyprof.events import Trace
    from copyprof.readers.kineto.pool import ChunkPool

_FRONTEND = re.compile(r"\.async_llm\b")


@dataclass(frozen=True)
class Source:
    """One readable unit: a file, or a group of rocprofv3 CSV files of one process."""

    fmt: str
    paths: tuple[str, ...]

    @property
    def path(self) -> str:
        return self.paths[0]


def discover(paths: Iterable[str]) -> list[Source]:
    sources: list[Source] = []
    for p in paths:
        if os.path.isdir(p):
            found = _discover_dir(p)
            if not found:
                raise CopyprofError(_no_trace(p))
            sources.extend(found)
        elif os.path.exists(p):
            fmt = sniff(p)
            if fmt == "rocprofv3-csv":
                sources.extend(_csv_sources([p], directory=os.path.dirname(p) or "."))
            else:
                sources.append(Source(fmt, (p,)))
        else:
            raise CopyprofError("no such file or directory", path=p)
    return sources


def _no_trace(directory: str) -> str:
    """Why a directory has nothing to read; for a copyprof run that stopped early, its run.json status."""
    try:
        status = given(load_run_record(directory).status)
    except CopyprofError:  # no run.json, or one that does not read: say what was looked for instead
        status = None
    if status is not None and status != "complete":
        return f"no trace in this run directory: the capture did not complete (run.json: {' '.join(status.split())[:300]})"
    looked = len(_walk(directory))
    return (f"no trace found in {directory} (looked at {looked} file(s) for Kineto JSON, rocprofv3 CSV/JSON/rocpd, "
            "nsys SQLite, rocprof v1 results.csv)")


def _walk(root: str) -> list[str]:
    out: list[str] = []
    base_depth = root.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if dirpath.count(os.sep) - base_depth >= MAX_DEPTH:
            dirnames[:] = []
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames) if not f.startswith("."))
    return out


def _discover_dir(root: str) -> list[Source]:
    sources: list[Source] = []
    csv_files: list[str] = []
    for path in _walk(root):
        if _SKIP_NAMES.search(os.path.basename(path)):
            continue
        try:
            fmt = sniff(path)
        except CopyprofError:
            continue  # not a trace: directories hold logs and other files too
        if fmt == "rocprofv3-csv":
            csv_files.append(path)
        elif fmt == "kineto" and not _looks_like_chrome_trace(path):
            continue
        else:
            sources.append(Source(fmt, (path,)))
    if csv_files:
        sources.extend(_csv_sources(csv_files))
    return sources


def _csv_sources(files: list[str], directory: str | None = None) -> list[Source]:
    from copyprof.readers.rocprofv3_csv_files import csv_groups

    if directory is not None:  # a single CSV named by the user: take its siblings too
        wanted = {os.path.abspath(f) for f in files}
        files = [os.path.join(directory, f) for f in sorted(os.listdir(directory)) if f.lower().endswith(".csv")]
        groups = [g for g in csv_groups(files) if wanted & {os.path.abspath(p) for p in g}]
        grouped = {os.path.abspath(p) for g in groups for p in g}
        groups += [[f] for f in sorted(wanted - grouped)]  # named by the user: read even if no group takes it
    else:
        groups = csv_groups(files)
    return [Source("rocprofv3-csv", tuple(g)) for g in groups]


def _looks_like_chrome_trace(path: str) -> bool:
    name = os.path.basename(path)
    if ".pt.trace.json" in name or name.endswith(".trace.json") or name.endswith(".trace.json.gz"):
        return True
    head = head_bytes(path, 1 << 20)
    return b'"traceEvents"' in head or bool(_EVENT_ARRAY.match(head))


def read_source(src: Source, pool: ChunkPool | None = None) -> list[Trace]:
    if src.fmt == "rocprofv3-csv":
        from copyprof.readers.rocprofv3_csv import read_rocprofv3_csv

        traces = read_rocprofv3_csv(list(src.paths))
    elif src.fmt == "kineto" and pool is not None:
        from copyprof.readers.kineto import read_kineto

        traces = read_kineto(src.path, pool)
    else:
        traces = reader_for(src.fmt)(src.path)
    for t in traces:
        if _FRONTEND.search(os.path.basename(t.meta.path)):
            t.meta.role = "frontend"
    return traces
