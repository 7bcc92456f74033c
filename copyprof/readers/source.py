"""Opening trace files: gzip by magic bytes (ISA-L when available), streamed in blocks.

Why blocks: a rank trace can be several GB uncompressed; readers consume it block by block
and never hold the whole text. Truncated gzip streams are not fatal: the blocks read so far
are delivered and :class:`BlockStream` records how far it got, so a reader can return a
partial result that says how much it read.
"""
from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from copyprof.errors import CopyprofError

try:  # ISA-L inflate is ~3x faster than zlib's; fall back quietly when absent.
    from isal import igzip as _gzip_impl  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - isal is a core dependency
    _gzip_impl = gzip

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK_SIZE = 8 << 20


def is_gzip(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_binary(path: str) -> BinaryIO:
    """Open ``path`` for reading, transparently decompressing gzip (detected by content)."""
    try:
        if is_gzip(path):
            return _gzip_impl.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")
    except OSError as exc:
        raise CopyprofError(f"cannot open: {exc.strerror or exc}", path=path) from exc


def head_bytes(path: str, n: int = 65536) -> bytes:
    """The first ``n`` bytes of the (decompressed) content, for format detection."""
    with open_binary(path) as fh:
        try:
            return fh.read(n)
        except (EOFError, OSError, zlib.error):
            return b""


class BlockStream:
    """Iterate over a file's decompressed content in blocks; remember truncation."""

    def __init__(self, path: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = path
        self.block_size = block_size
        self.bytes_read = 0
        self.compressed_size = os.path.getsize(path)
        self.truncated: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        fh = open_binary(self.path)
        try:
            while True:
                try:
                    block = fh.read(self.block_size)
                except (EOFError, OSError, zlib.error) as exc:
                    # gzip.BadGzipFile is an OSError; a cut download raises EOFError.
                    self.truncated = f"compressed stream ends early ({type(exc).__name__}: {exc})"
                    return
                if not block:
                    return
                self.bytes_read += len(block)
                yield block
        finally:
            fh.close()

    def describe_partial(self) -> str:
        return f"read {self.bytes_read / 1e6:.1f} MB before the data ended: {self.truncated}"
