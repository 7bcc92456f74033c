"""Which CSV files are rocprofv3 traces, which domain each holds, and which of them belong together.

Why a module of its own: recognising a rocprofv3 CSV (by its ``<prefix>_<domain>.csv`` name,
or by its header where the file was renamed or hand-collected) and grouping a capture's
parts by prefix is what discovery and the format table need before anything is read; it
needs neither pandas nor numpy, so sniffing a folder stays light. Reading the rows of a
group into the event table is copyprof/readers/rocprofv3_csv.py.
"""
from __future__ import annotations

import csv
import os
import re
from collections import defaultdict

DOMAINS = ("kernel_trace", "memory_copy_trace", "hip_api_trace", "marker_api_trace",
           "regions_trace", "agent_info")
FILE_RE = re.compile(r"^(?P<prefix>.*?)(?P<domain>" + "|".join(DOMAINS) + r")\.csv(?:\.gz)?$", re.I)
REQUIRED = {"kernel": ("kernel_name", "agent_id", "start_timestamp", "end_timestamp"),
            "memcpy": ("direction", "start_timestamp", "end_timestamp"),
            "api": ("domain", "function", "start_timestamp", "end_timestamp"),
            "agents": ("node_id",)}


def header_fields(head: bytes) -> list[str]:
    """The first line's column names, lower-case (rocprofv3 and rocpd2csv differ in case)."""
    line = head.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff").strip()
    try:
        return [f.strip().lower() for f in next(csv.reader([line]))]
    except (StopIteration, csv.Error):
        return []


def domain_of(fields: list[str]) -> str | None:
    """Which of the column sets (kernel, memcpy, api, agents) a header is, by column name."""
    s = set(fields)
    if "kernel_name" in s and ("start_timestamp" in s or "agent_id" in s):
        return "kernel"
    if "direction" in s and ("source_agent_id" in s or "start_timestamp" in s):
        return "memcpy"
    if {"domain", "function"} <= s and "start_timestamp" in s:
        return "api"
    if "node_id" in s and ("agent_type" in s or "cu_count" in s):
        return "agents"
    return None


def is_rocprofv3_csv(head: bytes) -> bool:
    """True when the first bytes are a rocprofv3 / rocpd2csv trace CSV header (not agent_info)."""
    return domain_of(header_fields(head)) in ("kernel", "memcpy", "api")


# rocprofv3's outputs whose headers can look like a trace's but are not (kernel statistics,
# counter collection): never sniffed by header.
_OTHER_OUTPUT_RE = re.compile(r"^(?:.*_)?(?:[a-z_]*stats|counter_collection|summary)\.csv(?:\.gz)?$", re.I)
_DOMAIN_FILE = {"kernel": "kernel_trace", "memcpy": "memory_copy_trace", "agents": "agent_info"}


def domain_by_header(path: str) -> str | None:
    """The rocprofv3 domain (a DOMAINS name) a CSV holds, from its header and first row, for
    files whose names do not say it (renamed or hand-collected parts); None when it is none
    we read (API files of other domains than HIP and markers: HSA, RCCL, ...)."""
    from copyprof.readers.files import head_bytes

    try:
        head = head_bytes(path)
    except OSError:
        return None
    fields = header_fields(head)
    kind = domain_of(fields)
    if kind is None or any(c not in fields for c in REQUIRED[kind]):
        return None
    if kind != "api":
        return _DOMAIN_FILE[kind]
    lines = head.split(b"\n", 2)  # hip and marker API files share a header: the first row's Domain tells
    try:
        row = next(csv.reader([lines[1].decode("utf-8", "replace")])) if len(lines) > 2 else []
    except csv.Error:
        row = []
    domain = row[fields.index("domain")].strip().upper() if len(row) == len(fields) else ""
    return "marker_api_trace" if domain.startswith("MARKER") else "hip_api_trace" if domain.startswith("HIP") else None


def csv_groups(paths: list[str]) -> list[list[str]]:
    """Group CSV files (or the CSVs of given directories) by their ``<prefix>_`` (pid, host...).

    Files named otherwise (``kernels.csv``) are recognised by header: those of one directory
    form one group when no domain repeats among them, else each is a group of its own (which
    parts belong together cannot be told)."""
    files: list[str] = []
    for p in paths:
        files += [os.path.join(p, f) for f in sorted(os.listdir(p))] if os.path.isdir(p) else [p]
    groups: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    unnamed: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for f in files:
        name = os.path.basename(f)
        m = FILE_RE.match(name)
        if m:
            groups[(os.path.dirname(f), m["prefix"])].append((f, m["domain"].lower()))
        elif name.lower().endswith((".csv", ".csv.gz")) and not _OTHER_OUTPUT_RE.match(name):
            domain = domain_by_header(f)
            if domain:
                unnamed[os.path.dirname(f)].append((f, domain))
    out = [g for _, g in sorted(groups.items())]
    for _, parts in sorted(unnamed.items()):
        domains = [d for _, d in parts]
        out += [parts] if len(set(domains)) == len(domains) else [[p] for p in parts]
    ordered = [sorted(g, key=lambda fd: DOMAINS.index(fd[1])) for g in out]
    return [[f for f, _ in g] for g in ordered if any(d != "agent_info" for _, d in g)]
