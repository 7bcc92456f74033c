"""Where cache entries live and how a file's content is identified (stdlib only).

Kept apart from the table cache so that a report served from the result cache
(copyprof/cache/results.py) never imports numpy or pandas.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from copyprof import __version__

PACKAGE = Path(__file__).resolve().parents[1]  # the copyprof package, whose sources key the entries


def hasher(algorithm: str, data: bytes = b"", **options: int) -> Any:
    """A new ``hashlib`` hash object (``hashlib.<algorithm>(data, **options)``). hashlib is
    imported on first use: it loads OpenSSL's libcrypto, 3.3 MB of resident memory that a
    report which makes no cache key never needs."""
    import hashlib

    return getattr(hashlib, algorithm)(data, **options)


def cache_dir() -> Path:
    env = os.environ.get("COPYPROF_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "copyprof" if xdg else Path.home() / ".cache" / "copyprof"


_hashes: dict[tuple[str, int, int, int, int], str] = {}


def file_hash(path: str) -> str:
    """SHA-256 of the file's bytes; remembered within this process per (path, inode, size,
    mtime, ctime) — any write changes ctime, which utime cannot set back — so checking an entry
    and then loading it reads the file once. SHA-256, not blake2b: OpenSSL's uses the CPU's SHA
    instructions where present (1.56 vs 0.83 GB/s on this project's VM: 42 vs 80 ms for a 1 GB
    trace's 66 MB gzip, paid before every cached or first report)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _hashes:
        h = hasher("sha256")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def file_stat(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def identify(path: str) -> dict[str, Any]:
    """What a cache entry records of an input file: path, size, mtime and content hash."""
    return {**file_stat(path), "sha256": file_hash(path)}


_code_hashes: dict[tuple[Path, ...], str] = {}


def code_hash_of(files: list[Path]) -> str:
    """Hash of copyprof's version and these source files (names relative to the package, and
    bytes): an entry written by other code is never served. Computed once per process."""
    key = tuple(files)
    if key not in _code_hashes:
        h = hasher("blake2b", __version__.encode(), digest_size=16)
        for f in files:
            h.update(str(f.relative_to(PACKAGE)).encode())
            h.update(f.read_bytes())
        _code_hashes[key] = h.hexdigest()
    return _code_hashes[key]
