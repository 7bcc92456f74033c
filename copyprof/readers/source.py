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
    from isal import isal_zlib as _zlib  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - isal is a core dependency
    _gzip_impl = gzip
    _zlib = zlib

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
    """Iterate over a file's decompressed content in blocks; remember truncation.

    gzip is inflated with an explicit decompress object (not a file wrapper) so that when a
    stream is cut short every byte inflated before the cut is still delivered.
    """

    def __init__(self, path: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = path
        self.block_size = block_size
        self.bytes_read = 0
        self.compressed_size = os.path.getsize(path)
        self.truncated: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise CopyprofError(f"cannot open: {exc.strerror or exc}", path=self.path) from exc
        with fh:
            gz = fh.read(2) == GZIP_MAGIC
            fh.seek(0)
            blocks = self._inflate(fh) if gz else iter(lambda: fh.read(self.block_size), b"")
            for block in blocks:
                self.bytes_read += len(block)
                yield block

    def _inflate(self, fh: BinaryIO) -> Iterator[bytes]:
        dec = _zlib.decompressobj(31)
        in_member = True  # a member has started and not reached its end marker
        read_size = max(1 << 20, self.block_size // 4)
        out = bytearray()
        while True:
            comp = fh.read(read_size)
            if not comp:
                break
            while comp:
                if not in_member:
                    if comp[:2] != GZIP_MAGIC:
                        break  # padding after the last member
                    dec, in_member = _zlib.decompressobj(31), True
                try:
                    out += dec.decompress(comp)
                except _zlib.error as exc:
                    self.truncated = f"gzip data is corrupt ({exc})"
                    if out:
                        yield bytes(out)
                    return
                comp = b""
                if dec.eof:  # multi-member gzip: the rest may start another member
                    in_member = False
                    comp = dec.unused_data
            if len(out) >= self.block_size:
                yield bytes(out)
                out.clear()
        if in_member:
            out += dec.flush()
            self.truncated = "gzip stream ends before its end marker (file cut short?)"
        if out:
            yield bytes(out)

    def describe_partial(self) -> str:
        return f"read {self.bytes_read / 1e6:.1f} MB before the data ended: {self.truncated}"
