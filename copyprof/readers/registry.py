"""Format detection by content (magic bytes, top-level keys, CSV headers), never by extension.

Rules (../shared/docs/trace-formats.md §5): gzip magic → look inside; SQLite magic → rocpd
(``rocpd_metadata`` / ``kernels`` view) or nsys (``StringIds`` + ``CUPTI_ACTIVITY_KIND_*``);
JSON with ``rocprofiler-sdk-tool`` → rocprofv3 JSON; ``traceEvents`` or a top-level list →
Chrome trace (Kineto); CSV headers → rocprofv3 / rocpd2csv / rocprof v1. Perfetto, nsys-rep
and OTF2 files are recognised only to tell the user how to convert them.
"""
from __future__ import annotations

import importlib
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from copyprof.errors import CopyprofError, UnsupportedFormat
from copyprof.readers.files import DECOMPRESS_ERRORS, SQLITE_MAGIC, connect_readonly, head_bytes

if TYPE_CHECKING:
    from copyprof.events import Trace
Reader = Callable[[str], "list[Trace]"]

_CONVERT_HINTS = {
    ".pftrace": "Perfetto protobuf traces need trace_processor (which downloads a binary); "
    "re-run rocprofv3 with `-f json` or `-f csv`, or `--output-format rocpd`",
    ".nsys-rep": "export it first: `nsys export --type sqlite --output trace.sqlite FILE.nsys-rep`",
    ".qdrep": "export it first: `nsys export --type sqlite --output trace.sqlite FILE.qdrep`",
    ".otf2": "OTF2 archives are not read; re-run rocprofv3 with `-f json` or `-f csv`",
}


def sniff(path: str) -> str:
    """Return a format key: kineto, rocprofv3-json, rocprofv3-csv, rocprof-v1, rocpd, nsys-sqlite."""
    if os.path.isdir(path):
        raise CopyprofError("is a directory", path=path)
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise CopyprofError(f"cannot open: {exc.strerror or exc}", path=path) from exc
    if size == 0:
        raise CopyprofError("empty file", path=path)
    with open(path, "rb") as fh:
        raw = fh.read(16)
    if raw.startswith(SQLITE_MAGIC):
        return _sniff_sqlite(path)
    try:
        head = head_bytes(path)
    except DECOMPRESS_ERRORS:  # gzip damaged inside its first blocks
        head = b""
    if not head.strip() and raw.startswith(b"\x1f\x8b"):
        head = _inflate_head(path)
    if not head.strip():
        raise CopyprofError("no content (empty after decompression, or gzip stream damaged at the start)", path=path)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        if b'"rocprofiler-sdk-tool"' in text[:4096]:
            return "rocprofv3-json"
        return "kineto"
    first_line = text.split(b"\n", 1)[0]
    from copyprof.readers.rocprof_v1 import is_rocprof_v1_csv
    from copyprof.readers.rocprofv3_csv_files import is_rocprofv3_csv

    if is_rocprofv3_csv(head):
        return "rocprofv3-csv"
    if is_rocprof_v1_csv(head):
        return "rocprof-v1"
    hint = _hint(path, head)
    if hint:
        raise UnsupportedFormat(hint, path=path)
    shown = first_line[:60].decode("utf-8", "replace")
    raise CopyprofError(f"unknown trace format (starts with {shown!r})", path=path)


def _inflate_head(path: str, n: int = 65536) -> bytes:
    """What a gzip stream cut short (or damaged) inflates to before the damage, up to ``n`` bytes.

    A gzip file object raises at the cut and returns nothing, so a capture whose trace was cut
    inside its first 64 KB would not even be recognised as a trace; the readers themselves keep
    every event before a cut, so detection must not be stricter than they are.
    """
    dec = zlib.decompressobj(31)
    out = bytearray()
    with open(path, "rb") as fh:
        while len(out) < n and (comp := fh.read(4096)):
            try:
                out += dec.decompress(comp, n - len(out))
            except zlib.error:
                break
            if dec.eof:
                break
    return bytes(out)


def _hint(path: str, head: bytes) -> str | None:
    lower = path.lower()
    for ext, hint in _CONVERT_HINTS.items():
        if lower.endswith(ext) or lower.endswith(ext + ".gz"):
            return f"{ext} is not read directly: {hint}"
    if head.startswith(b"\x0a") and b"\x00" in head[:64] and lower.endswith(".pb"):
        return "protobuf traces are not read directly"
    return None


def _sniff_sqlite(path: str) -> str:
    import sqlite3  # only for SQLite traces: the module and its library are ~0.8 MB resident

    try:
        conn = connect_readonly(path)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise CopyprofError(f"SQLite file cannot be read ({' '.join(str(exc).split())})", path=path) from exc
    except UnicodeDecodeError as exc:  # sqlite3 decodes some names strictly
        raise CopyprofError("SQLite file cannot be read (a table name is not UTF-8: damaged file?)", path=path) from exc
    if "rocpd_metadata" in names or ("kernels" in names and any(n.startswith("rocpd_") for n in names)):
        return "rocpd"
    if "StringIds" in names and any(n.startswith("CUPTI_ACTIVITY_KIND_") for n in names):
        return "nsys-sqlite"
    if "StringIds" in names:
        return "nsys-sqlite"
    raise CopyprofError("SQLite database is neither a rocpd nor an Nsight Systems export", path=path)


@dataclass(frozen=True)
class Format:
    """One trace format: its key, what it is, and where its reader lives.

    The reader is named by module and function, imported on first use, so a format's
    dependencies (sqlite3 for rocpd/nsys, msgspec and numpy for Kineto) load only when one of
    its files is read — and no reader imports this registry back."""

    key: str
    description: str
    module: str
    function: str

    def reader(self) -> Reader:
        return getattr(importlib.import_module(self.module), self.function)


FORMATS: dict[str, Format] = {f.key: f for f in (
    Format("kineto", "Kineto / Chrome trace JSON (torch profiler, vLLM, SGLang)", "copyprof.readers.kineto", "read_kineto"),
    Format("rocprofv3-json", "rocprofv3 --output-format json", "copyprof.readers.rocprofv3_json", "read_rocprofv3_json"),
    Format("rocprofv3-csv", "rocprofv3 CSV (kernel, memory copy, API, marker traces of one process)",
           "copyprof.readers.rocprofv3_csv", "read_rocprofv3_csv_file"),
    Format("rocprof-v1", "rocprof v1 results.csv", "copyprof.readers.rocprof_v1", "read_rocprof_v1_csv"),
    Format("rocpd", "rocpd SQLite (rocprofv3 --output-format rocpd)", "copyprof.readers.rocpd", "read_rocpd"),
    Format("nsys-sqlite", "Nsight Systems SQLite export", "copyprof.readers.nsys_sqlite", "read_nsys"),
)}
"""Every format copyprof reads, by the key :func:`sniff` returns."""


def reader_for(fmt: str) -> Reader:
    """The reader function of a format key."""
    if fmt not in FORMATS:
        raise CopyprofError(f"no reader for format {fmt!r}")
    return FORMATS[fmt].reader()
