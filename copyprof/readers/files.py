"""Opening trace files: gzip by magic bytes (ISA-L when available), streamed in blocks.

Why blocks: a rank trace can be several GB uncompressed; readers consume it block by block
and never hold the whole text. Truncated gzip streams are not fatal: the blocks read so far
are delivered and :class:`BlockStream` records how far it got, so a reader can return a
partial result that says how much it read.

Speed: :meth:`BlockStream.readinto` inflates straight into the caller's buffer with ISA-L's C
gzip reader (3 GB/s on the 1 GB benchmark trace, no allocation per block). Fresh multi-MB
``bytes`` per block cost a page fault per 4 KiB on the VM we measured (~0.5 s/GB of system
time). If that reader meets damage it raises without saying how much it inflated, so the
stream then switches to the careful decompress-object path, which re-inflates from the start,
skips what was already delivered and keeps every byte before the damage.
"""
from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, BinaryIO

from copyprof.errors import CopyprofError

if TYPE_CHECKING:
    import sqlite3

# ISA-L's modules or the standard library's, whichever imports: the same calls either way.
try:  # ISA-L inflate is ~3x faster than zlib's; fall back quietly when absent.
    from isal import igzip as _isal_gzip  # type: ignore[import-not-found]
    from isal import isal_zlib as _isal_zlib  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - isal is a core dependency
    _gzip_impl: ModuleType = gzip
    _zlib: ModuleType = zlib
else:
    _gzip_impl, _zlib = _isal_gzip, _isal_zlib
_FastGzipReader = getattr(_zlib, "_GzipReader", None)  # python-isal's C reader (has readinto)

try:  # ISA-L's inflate raises its own error type, not zlib.error
    from isal import isal_zlib as _isal_errors  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - isal is a core dependency
    _IsalError: type[BaseException] = zlib.error
else:  # read through ModuleType: python-isal's stub declares `error` an instance, not the class it is
    _errors_module: ModuleType = _isal_errors
    _IsalError = _errors_module.error
# What reading a damaged or cut-off gzip stream can raise (gzip/igzip file objects).
DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, _IsalError)

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK_SIZE = 4 << 20  # the unit readers decode at once (one piece of the event array)
# Larger documents are cut into larger pieces: each piece costs the reader a fixed share (its
# cut, its result's message, its columns joined to the table), and a 1 GB trace in 6 MB pieces
# read 0.977x the time in 4 MB ones (16 alternating rounds, same output and peak RSS); 125 MB
# ranks in 6 MB pieces were 1.03x slower (fewer pieces to keep the decode workers busy at a
# file's start and end), so smaller documents keep 4 MB.
LARGE_BLOCK_SIZE = 6 << 20
LARGE_DOCUMENT = 768 << 20


def piece_size(uncompressed: int) -> int:
    """The piece size for a document of ``uncompressed`` bytes (json_size's hint)."""
    return LARGE_BLOCK_SIZE if uncompressed >= LARGE_DOCUMENT else BLOCK_SIZE
READ_SIZE = 1 << 20  # uncompressed bytes per read (plain files); gzip reads 1/16 of it


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


def json_size(path: str) -> int:
    """Uncompressed size of a file: gzip's ISIZE trailer (mod 4 GiB, so a wrapped value is
    replaced by 16x the compressed size), else the size on disk. A hint for buffer sizing.

    The trailer of a cut-short gzip is whatever 4 bytes the cut left at the end, up to 4 GiB:
    a value over 64x the compressed size (traces inflate 10-30x) is not believed either, or
    a truncated 30 kB upload reserves gigabytes of columns and starts a decode pool."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == GZIP_MAGIC and size >= 18:
                fh.seek(-4, os.SEEK_END)
                isize = int.from_bytes(fh.read(4), "little")
                return isize if size <= isize <= 64 * size else 16 * size
    except OSError:
        pass
    return size


def head_bytes(path: str, n: int = 65536) -> bytes:
    """The first ``n`` bytes of the (decompressed) content, for format detection."""
    with open_binary(path) as fh:
        try:
            return fh.read(n)
        except (EOFError, OSError, zlib.error):
            return b""


def fill_from_blocks(view: memoryview, held: bytes, next_block: Callable[[], bytes]) -> tuple[int, bytes]:
    """Fill ``view`` from ``held`` and then from ``next_block()`` until it is full or a block is
    empty (the end); returns the bytes written and what is left of the last block."""
    filled = 0
    while filled < len(view):
        if not held:
            held = next_block()
            if not held:
                break
        take = min(len(view) - filled, len(held))
        view[filled : filled + take] = held[:take]
        held = held[take:]
        filled += take
    return filled, held


class BlockStream:
    """A file's decompressed content, by iteration (blocks) or :meth:`readinto`; remembers
    truncation. Use one of the two ways per instance.

    gzip is inflated with an explicit decompress object (not a file wrapper) so that when a
    stream is cut short every byte inflated before the cut is still delivered.
    """

    def __init__(self, path: str, block_size: int | None = None) -> None:
        self.path = path
        self.block_size = block_size or BLOCK_SIZE
        self.bytes_read = 0
        self.compressed_size = os.path.getsize(path)
        self.truncated: str | None = None
        self._fh: BinaryIO | None = None
        self._fast: object | None = None  # ISA-L _GzipReader, or the plain file
        self._careful: Iterator[bytes] | None = None
        self._held = b""  # careful-path output not yet handed out

    def __iter__(self) -> Iterator[bytes]:
        """Pieces of the content in order (about 1 MB each; sizes vary with the gzip ratio)."""
        with self._open() as fh:
            size = min(self.block_size, READ_SIZE)
            blocks = self._inflate(fh, max(1024, size // 16)) if self._gz else iter(lambda: fh.read(size), b"")
            for block in blocks:
                self.bytes_read += len(block)
                yield block

    def _open(self) -> BinaryIO:
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise CopyprofError(f"cannot open: {exc.strerror or exc}", path=self.path) from exc
        self._gz = fh.read(2) == GZIP_MAGIC
        fh.seek(0)
        return fh

    def readinto(self, view: memoryview) -> int:
        """Fill ``view`` with the next bytes (fewer only at the end); 0 when done."""
        if self._fh is None:
            self._fh = self._open()
            if not self._gz:
                self._fast = self._fh
            elif _FastGzipReader is not None:
                self._fast = _FastGzipReader(self._fh, 1 << 17)
            else:  # pragma: no cover - no ISA-L
                self._careful = self._inflate(self._fh, 1 << 16)
        if self._fast is not None:
            try:
                n = self._fast.readinto(view)  # type: ignore[attr-defined]
            except (EOFError, OSError, ValueError, zlib.error, _zlib.error):
                self._fast = None  # damaged: redo it carefully, skipping what was delivered
                self._fh.seek(0)
                self._careful = self._inflate(self._fh, 1 << 16, skip=self.bytes_read)
            else:
                self.bytes_read += n
                if n == 0:
                    self.close()
                return n
        return self._careful_readinto(view)

    def _careful_readinto(self, view: memoryview) -> int:
        blocks = self._careful if self._careful is not None else iter(())
        filled, self._held = fill_from_blocks(view, self._held, lambda: next(blocks, b""))
        self.bytes_read += filled
        if filled == 0:
            self.close()
        return filled

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._careful = None

    def _inflate(self, fh: BinaryIO, read_size: int, skip: int = 0) -> Iterator[bytes]:
        dec = _zlib.decompressobj(31)
        in_member = True  # a member has started and not reached its end marker
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
                    out = dec.decompress(comp)
                except _zlib.error as exc:
                    self.truncated = f"gzip data is corrupt ({exc})"
                    return
                if skip and out:
                    drop = min(skip, len(out))
                    out, skip = out[drop:], skip - drop
                if out:
                    yield out
                comp = b""
                if dec.eof:  # multi-member gzip: the rest may start another member
                    in_member = False
                    comp = dec.unused_data
        if in_member:
            tail = dec.flush()[skip:]
            self.truncated = "gzip stream ends before its end marker (file cut short?)"
            if tail:
                yield tail

    def describe_partial(self) -> str:
        return f"read {self.bytes_read / 1e6:.1f} MB before the data ended: {self.truncated}"


def connect_readonly(path: str) -> sqlite3.Connection:
    """Open a SQLite trace read-only and immutable, decoding damaged text leniently.

    ``immutable=1``: SQLite takes no locks and creates no ``-wal``/``-shm``/journal files next
    to the user's trace (``mode=ro`` alone still does for a database whose header says WAL).
    The path goes through ``as_uri`` so that ``?`` or ``#`` in a file name cannot add URI
    parameters. Text that is not UTF-8 (a damaged page, a blob in a name column) is decoded
    with replacement characters instead of raising UnicodeDecodeError mid-query.
    """
    import sqlite3  # only for SQLite traces: the module and its library are ~0.8 MB resident
    from pathlib import Path

    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return conn
