"""On-disk cache of a run's analysis (the ``runs[i]`` object a report renders), stdlib only.

Why: the table cache (copyprof/cache/tables.py) saves the parse, but a repeated report would still
import pandas and redo the analysis (seconds on a GB trace). Served from here, a repeated
report on an unchanged run costs the interpreter, the content hashes and one JSON read —
no numpy, no pandas.

Key: copyprof's version and the hash of all its Python sources (any code change is a miss),
the path as given (it is printed), the options that change the analysis (model layout, rank,
--all-steps), and for every file the analysis reads — each trace source, and the small files
at the top of a run directory (run.json, timing.json, …) — its path, size, mtime and SHA-256.

Entries are JSON (never pickle) of the typed ``RunReport`` (analysis/results.py), decoded
straight back into it by msgspec, written atomically (temp file + rename); a damaged,
foreign or unreadable entry is a miss, never an error. A report that does not read back
exactly as written is simply not cached.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import msgspec

from copyprof.analysis.results import RunReport
from copyprof.cache.files import PACKAGE, cache_dir, code_hash_of, hasher, identify

FORMAT_VERSION = 2  # 2: the typed RunReport
SIDECAR_MAX_BYTES = 16 << 20  # small files at the top of a run directory are hashed too
MAX_ENTRIES = 256


def package_hash() -> str:
    """Hash of every source of copyprof — Python (the analysis, readers and renderers alike)
    and the native scanner's C, so a scanner change cannot serve a stale analysis."""
    return code_hash_of(sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.[ch]")))


def result_key(path: str, source_paths: list[tuple[str, ...]], options: dict[str, Any]) -> str | None:
    """Key of the analysis of ``path`` read from ``source_paths``; None when a file cannot be
    identified (then nothing is cached)."""
    try:
        files = [identify(p) for paths in source_paths for p in paths]
        files += [identify(p) for p in _sidecars(path, {p for paths in source_paths for p in paths})]
    except OSError:
        return None
    opts = {k: (asdict(v) if is_dataclass(v) and not isinstance(v, type) else v) for k, v in options.items()}
    doc = json.dumps([FORMAT_VERSION, package_hash(), path, os.path.abspath(path), opts, files],
                     sort_keys=True, default=str)
    return hasher("blake2b", doc.encode(), digest_size=20).hexdigest()


def _sidecars(path: str, sources: set[str]) -> list[str]:
    """Small regular files directly in a run directory that are not trace sources."""
    if not os.path.isdir(path):
        return []
    out = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_file() and entry.path not in sources and entry.stat().st_size <= SIDECAR_MAX_BYTES:
            out.append(entry.path)
    return out


def load_result(key: str | None) -> RunReport | None:
    if key is None:
        return None
    entry = cache_dir() / "results" / f"{key}.json"
    try:
        with open(entry, "rb") as fh:
            doc = msgspec.json.decode(fh.read(), type=_Entry)
        if doc.key != key:
            return None
        os.utime(entry)  # recently used: evicted last
        return doc.result
    except (OSError, msgspec.DecodeError):
        return None


class _Entry(msgspec.Struct):
    key: str
    result: RunReport


def store_result(key: str | None, result: RunReport) -> bool:
    """Write the entry when ``result`` reads back unchanged; False otherwise."""
    if key is None:
        return False
    try:
        text = msgspec.json.encode(_Entry(key=key, result=result))
        if msgspec.json.decode(text, type=_Entry).result != result:
            return False
    except (TypeError, ValueError, msgspec.MsgspecError):
        return False
    root = cache_dir() / "results"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(text)
            os.replace(tmp, root / f"{key}.json")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    _evict(root)
    return True


def _evict(root: Path) -> None:
    try:
        entries = sorted(root.glob("*.json"), key=lambda e: e.stat().st_mtime_ns)
        for e in entries[:-MAX_ENTRIES]:
            e.unlink(missing_ok=True)
    except OSError:
        pass
