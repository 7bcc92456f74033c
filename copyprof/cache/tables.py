"""On-disk cache of parsed event tables, one entry per source (a trace file, or a CSV group).

Why: parsing a GB-sized trace takes seconds; a repeated report on an unchanged run should
not pay them again. An entry holds the source's tables and metadata exactly as the reader
returned them, so a report from the cache is the report from the file (tests/readers/test_cache.py).

Where: ``$COPYPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/copyprof``, else ``~/.cache/copyprof``
— never next to the user's traces. If the directory cannot be created or written, caching is
silently off (a cache is an optimisation, never a reason to fail).

Format: one ``.npz`` per source (numpy's zip of ``.npy`` arrays, written uncompressed and
read with ``allow_pickle=False``): every numeric column as an array, every categorical column
as its integer codes, and one ``meta`` member holding UTF-8 JSON (categories, trace metadata,
what the entry was made from). Nothing in an entry is executable: no pickle anywhere.

Validity: an entry is used only when every file of the source still has the recorded size,
mtime and content hash (SHA-256 of the bytes on disk, the compressed bytes for .gz), and the
entry was written by the same reader code (a hash of copyprof's reader sources and version).
Anything else — stale, truncated, corrupt, foreign — is a miss: the source is read again and
the entry rewritten (atomically: temp file + rename, so concurrent runs never see half an entry).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from copyprof.cache.files import PACKAGE, cache_dir, code_hash_of, file_hash, hasher, identify
from copyprof.cache.files import file_stat as _stat
from copyprof.columns import Categorical, Columns
from copyprof.events import Trace, TraceMeta

FORMAT_VERSION = 2  # 2: inputs identified by SHA-256 (was blake2b)
MAX_BYTES_DEFAULT = 8 << 30  # older entries are evicted beyond this (COPYPROF_CACHE_MAX_MB)
_CODE_DIRS = ("readers", "taxonomy")  # whose sources (all levels), with events.py and reading.py, key the entries


def code_hash() -> str:
    """Hash of the code that produces tables: a reader change must not serve old tables (the
    native scanner's C sources included, where installed)."""
    files = [PACKAGE / "events.py", PACKAGE / "reading.py"]
    for d in _CODE_DIRS:
        files.extend(sorted((PACKAGE / d).rglob("*.py")))
        files.extend(sorted((PACKAGE / d).rglob("*.[ch]")))
    return code_hash_of(files)


class TableCache:
    """Lookup and store of a source's traces. ``paths`` are the source's files in order."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir()
        self.hits = self.misses = 0

    def _entry(self, fmt: str, paths: tuple[str, ...]) -> Path:
        key = json.dumps([FORMAT_VERSION, fmt, [os.path.abspath(p) for p in paths], code_hash()])
        return self.root / f"{hasher('blake2b', key.encode(), digest_size=16).hexdigest()}.npz"

    def load(self, fmt: str, paths: tuple[str, ...]) -> list[Trace] | None:
        """The cached traces, or None (missing, stale or unreadable entry)."""
        entry = self._entry(fmt, paths)
        try:
            traces = self._load(entry, fmt, paths)
        except Exception:  # noqa: BLE001 - any damage to an entry is a miss, never an error
            traces = None
        if traces is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            os.utime(entry)  # recently used: evicted last
        except OSError:
            pass
        return traces

    def fresh(self, fmt: str, paths: tuple[str, ...]) -> bool:
        """Whether :meth:`load` would hit (reads the entry's metadata only)."""
        try:
            with np.load(self._entry(fmt, paths), allow_pickle=False) as npz:
                return _valid(json.loads(npz["meta"].tobytes().decode()), fmt, paths)
        except Exception:  # noqa: BLE001 - a damaged entry is simply not fresh
            return False

    def _load(self, entry: Path, fmt: str, paths: tuple[str, ...]) -> list[Trace] | None:
        if not entry.is_file():
            return None
        with np.load(entry, allow_pickle=False) as npz:
            meta = json.loads(npz["meta"].tobytes().decode())
            if not _valid(meta, fmt, paths):
                return None
            traces = []
            for i, t in enumerate(meta["traces"]):
                tm = TraceMeta(**t["meta"])
                tm.path = _current_path(tm.path, meta["given"], paths)
                traces.append(Trace(meta=tm, events=_frame(npz, i, t["columns"], t["rows"])))
            return traces

    def store(self, fmt: str, paths: tuple[str, ...], traces: list[Trace], before: list[dict[str, Any]]) -> bool:
        """Write the entry; ``before`` is :func:`snapshot` taken before the source was read
        (a file that changed while it was read is not cached). False when not cacheable."""
        if [_stat(p) for p in paths] != [{k: b[k] for k in ("path", "size", "mtime_ns")} for b in before]:
            return False
        meta: dict[str, Any] = {"version": FORMAT_VERSION, "code": code_hash(), "fmt": fmt, "files": before,
                                "given": list(paths), "traces": []}
        arrays: dict[str, np.ndarray] = {}
        for i, t in enumerate(traces):
            tmeta = dataclasses.asdict(t.meta)
            if TraceMeta(**json.loads(json.dumps(tmeta))) != t.meta:
                return False  # metadata that JSON would change (tuples, non-str keys...): not cached
            cols = _columns(t.table, i, arrays)
            if cols is None:
                return False
            meta["traces"].append({"meta": tmeta, "columns": cols, "rows": len(t.table)})
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as fh:
                    _write_npz(fh, arrays)
                os.replace(tmp, self._entry(fmt, paths))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            return False
        self._evict()
        return True

    def _evict(self) -> None:
        try:
            limit = int(float(os.environ.get("COPYPROF_CACHE_MAX_MB", MAX_BYTES_DEFAULT >> 20)) * (1 << 20))
            entries = sorted((e.stat().st_mtime_ns, e.stat().st_size, e) for e in self.root.glob("*.npz"))
            total = sum(size for _, size, _ in entries)
            for _, size, e in entries[:-1]:  # never the newest (just written)
                if total <= limit:
                    break
                e.unlink(missing_ok=True)
                total -= size
        except (OSError, ValueError):
            pass


def _write_npz(fh: Any, arrays: dict[str, np.ndarray]) -> None:
    """What ``np.savez`` writes (an uncompressed zip of ``.npy`` members, read by ``np.load``),
    but each array's bytes go to the zip straight from its buffer. Why: ``np.savez`` into a zip
    member copies every array through ``tobytes`` in chunks of up to 16 MiB, and on a first
    report that copy of the largest column (start_ns, 8.8 MB on the 1 GB trace) was the peak."""
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(arr))
                member.write(arr.data.cast("B"))


def snapshot(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    """Size, mtime and content hash of each file, taken before reading it."""
    return [identify(p) for p in paths]


def _valid(meta: dict[str, Any], fmt: str, paths: tuple[str, ...]) -> bool:
    return (meta.get("version") == FORMAT_VERSION and meta.get("code") == code_hash() and meta.get("fmt") == fmt
            and _same_files(meta.get("files"), paths))


def _same_files(recorded: Any, paths: tuple[str, ...]) -> bool:
    if not isinstance(recorded, list) or len(recorded) != len(paths):
        return False
    for rec, p in zip(recorded, paths):
        now = _stat(p)
        if any(rec.get(k) != now[k] for k in ("path", "size", "mtime_ns")) or rec.get("sha256") != file_hash(p):
            return False
    return True


def _current_path(path: str, given: list[str], paths: tuple[str, ...]) -> str:
    """meta.path as the reader set it from the paths given now (the user may spell them
    differently from the run that wrote the entry)."""
    return paths[given.index(path)] if path in given else path


def _columns(table: Columns, i: int, arrays: dict[str, np.ndarray]) -> list[dict[str, Any]] | None:
    """Describe and collect ``table``'s columns; None when one cannot be stored without pickle."""
    out = []
    for j, name in enumerate(table.names):
        col = table[name]
        key = f"t{i}c{j}"
        if isinstance(col, Categorical):
            values = col.categories.tolist()
            if not all(isinstance(v, (str, int)) for v in values):
                return None
            arrays[key] = col.codes
            out.append({"name": name, "key": key, "categories": values, "cat_dtype": "str", "ordered": False})
        elif col.dtype.kind in "biuf":
            arrays[key] = col
            out.append({"name": name, "key": key})
        else:
            return None
    return out


def _frame(npz: Any, i: int, columns: list[dict[str, Any]], rows: int) -> Columns:
    data: dict[str, Any] = {}
    for c in columns:
        arr = npz[c["key"]]
        if len(arr) != rows:
            raise ValueError("column length differs from the recorded row count")
        if "categories" in c:
            cats = c["categories"]
            if len(set(cats)) != len(cats) or not all(isinstance(v, str) for v in cats) or c.get("ordered"):
                raise ValueError("categories are not unique unordered strings")
            if len(arr) and (arr.max(initial=-1) >= len(cats) or arr.min(initial=0) < -1):
                raise ValueError("categorical codes out of range")
            data[c["name"]] = Categorical(arr, cats)
        else:
            data[c["name"]] = arr
    return Columns(data, rows)


def cached_read(cache: TableCache | None, fmt: str, paths: tuple[str, ...],
                read: Callable[[], list[Trace]], background: bool = False) -> list[Trace]:
    """``read()``, served from / stored into ``cache`` when one is given; with ``background``
    the entry is written by a thread (see :func:`wait_for_writes`)."""
    if cache is None:
        return read()
    hit = cache.load(fmt, paths)
    if hit is not None:
        return hit
    before = snapshot(paths)
    traces = read()
    if not background:
        cache.store(fmt, paths, traces, before)
        return traces
    # Written by a thread while the caller analyses the tables (the write is I/O and numpy
    # copies; ~0.3 s for a 1 GB trace on 2 cores). Callers wait with wait_for_writes().
    writer = threading.Thread(target=_store_quietly, args=(cache, fmt, paths, traces, before),
                              name="copyprof-cache-write")
    _writers.append(writer)
    if not _held:
        writer.start()
    return traces


_writers: list[threading.Thread] = []
_held = 0  # while > 0, background writes wait, unstarted, for start_writes


@contextlib.contextmanager
def writes_held() -> Iterator[Callable[[], None]]:
    """Background writes asked for inside the block wait, unstarted, until the function it
    yields (:func:`start_writes`) is called, or the block ends. Why: a process that may fork
    (analysis/rank_pool.py forks after the read) must run no other thread at the fork."""
    global _held
    _held += 1
    try:
        yield start_writes
    finally:
        _held -= 1
        start_writes()


def start_writes() -> None:
    """Start the background writes that wait (see :func:`writes_held`)."""
    for writer in _writers:
        if writer.ident is None:
            writer.start()


def _store_quietly(cache: TableCache, fmt: str, paths: tuple[str, ...], traces: list[Trace],
                   before: list[dict[str, Any]]) -> None:
    try:
        cache.store(fmt, paths, traces, before)
    except Exception:  # noqa: BLE001 - a cache is an optimisation: never an error, never a traceback
        pass


def wait_for_writes() -> None:
    """Wait until every table this process handed to the cache is written (or given up)."""
    start_writes()
    while _writers:
        _writers.pop().join()

