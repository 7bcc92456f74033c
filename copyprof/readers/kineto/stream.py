"""Split a Chrome-trace JSON document into header, event-array chunks, and tail — streaming.

Why: a Kineto trace is one JSON object whose ``traceEvents`` array holds millions of events.
Decoding it whole costs ~6x its size in RAM (HTA, orjson). Instead we cut the array into
chunks at event boundaries and let msgspec decode each chunk on its own.

How boundaries are found without a per-byte Python scanner: a candidate cut is a ``}`` that is
followed (after whitespace) by ``,`` and ``{``. A cut inside a nested object or a string
leaves the chunk unbalanced, so decoding that chunk fails; the chunk is then merged with the
next one and tried again. A chunk that decodes is therefore a whole sequence of top-level
events. Only a document that is really malformed keeps failing, and is reported as such.

Damage inside the array (a flipped byte, a lost span) is told apart from a false cut by where
the decoder stops: before the chunk's last candidate boundary means a broken event, which is
cut out (from the boundary before the error to the first one after it) and the chunk decoded
again; the skipped byte ranges are recorded in ``StreamState.skipped``. So one bad byte costs
the event it is in, not every event after it.
"""
from __future__ import annotations

import mmap
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from copyprof.readers.files import fill_from_blocks
from copyprof.readers.kineto.repair import FAILED, array_end, repair
from copyprof.readers.kineto.state import StreamState
from copyprof.readers.kineto.tail import finish_document, read_tail

_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*([\[{])')
_CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
MAX_HEADER = 64 << 20  # header bigger than this: not a streaming-friendly document
_HEADER_STEP = 64 << 10  # the first read while looking for the event array (then doubled)
MAX_PENDING = 512 << 20  # one undecodable run this long means the document is malformed


class NotStreamable(Exception):
    """The document is not a Chrome trace with a top-level event array; decode it whole."""


class MalformedChunk(Exception):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


@dataclass
class Piece:
    """A run of events ending at a candidate cut, ready to decode.

    ``data`` is ``b"[" + events + b"]"``; ``sep`` is the text between the cut's ``}`` and
    the next piece (``,`` and whitespace), kept so that pieces merged after a false cut are
    byte-exact (the cut may sit inside a string). ``data`` from :func:`split_pieces` is a view
    into a reused buffer: valid until the next piece is asked for (copy it to keep it).
    """

    offset: int  # document offset of the first event byte
    data: bytes | memoryview
    sep: bytes

    @property
    def body(self) -> bytes | memoryview:
        return self.data[1:-1]


class PieceMerger:
    """Serial semantics for pieces decoded in any order or place (parent or worker).

    A piece is accepted when it starts at an accepted boundary and decodes. When one fails
    (its end cut was inside a value), it is carried and merged with the next piece, which is
    then decoded here, as one; what is left at the end goes to :meth:`finish`.
    """

    def __init__(self, decode_chunk: Callable[[bytes], Any], state: StreamState) -> None:
        self.decode_chunk = decode_chunk
        self.state = state
        self.carry: bytearray | None = None
        self.carry_offset = 0
        self.repair_tried = 0  # size of the chunk json_repair last failed on (0: none since the last accept)
        self.after: bytearray | None = None  # once the array has ended: the document's text after it

    def accepted(self, piece: Piece) -> None:
        self.state.consumed = piece.offset + len(piece.data) - 2

    def failed(self, piece: Piece, exc: Exception) -> None:
        if self.carry is None:
            self.carry, self.carry_offset = bytearray(), piece.offset
        self.carry += piece.body
        self.carry += piece.sep
        if len(self.carry) > MAX_PENDING:
            raise MalformedChunk(self.carry_offset, str(exc))

    def settle(self, piece: Piece, decoded: Callable[[], Any]) -> Any:
        """The result for ``piece``, or ``FAILED``. ``decoded()`` returns the piece's own
        decode (or raises DecodeError); it is not called when text is carried from a failed
        piece: then carried text and piece are decoded here, as one. Once the event array has
        closed inside a piece (keys follow ``traceEvents``), later pieces are the document's
        tail: kept as text for :meth:`finish`, not decoded."""
        if self.after is not None:
            self.after += piece.body
            self.after += piece.sep
            return FAILED
        data = None
        if self.carry is not None:
            data = b"[" + self.carry + piece.body + b"]"
            decoded = lambda: self.decode_chunk(data)  # noqa: E731
        try:
            result = decoded()
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            chunk = bytes(piece.data) if data is None else data
            end = array_end(chunk, exc)
            if end is not None:
                return self._array_closed(piece, chunk, end)
            result = FAILED
            size = len(piece.data) + (len(self.carry) if self.carry is not None else 0)
            if size >= 2 * self.repair_tried:  # a chunk repair gave up on is retried once it has doubled
                start = self.carry_offset if self.carry is not None else piece.offset
                result = repair(chunk, exc, start, self.decode_chunk, self.state)
            if result is FAILED:
                self.repair_tried = max(self.repair_tried, size)
                self.failed(piece, exc)
                return FAILED
        self.carry = None
        self.repair_tried = 0
        self.accepted(piece)
        return result

    def _array_closed(self, piece: Piece, chunk: bytes, end: int) -> Any:
        """The events of ``chunk`` before the array's ``]`` at ``end``; the text after it (and
        after every later piece) is the document's tail."""
        try:
            result = self.decode_chunk(chunk[:end])
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.failed(piece, ValueError("undecodable events before the array's end"))
            return FAILED
        start = self.carry_offset if self.carry is not None else piece.offset
        self.after = bytearray(chunk[end:-1])  # the last byte is the "]" put in place of the cut's ","
        self.after += piece.sep
        self.carry = None
        self.repair_tried = 0
        self.state.consumed = start + end - 2
        return result

    def finish(self) -> Iterator[Any]:
        state = self.state
        if self.after is not None:
            read_tail(bytes(self.after) + state.rest, state)
            return
        if self.carry is None:
            yield from finish_document(state.rest, state.rest_offset, self.decode_chunk, state)
        else:
            yield from finish_document(bytes(self.carry) + state.rest, self.carry_offset, self.decode_chunk, state)


class _IterReader:
    """``readinto`` over an iterable of byte blocks (for callers without a BlockStream)."""

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self._it = iter(blocks)
        self._held = b""

    def readinto(self, view: memoryview) -> int:
        filled, self._held = fill_from_blocks(view, self._held, lambda: next(self._it, b""))
        return filled


def split_pieces(source: Any, state: StreamState, block_size: int = 8 << 20,
                 next_buffer: Callable[[], mmap.mmap] | None = None) -> Iterator[Piece]:
    """Cut the event array into pieces of about ``block_size`` at candidate boundaries.

    ``source`` has ``readinto`` (a BlockStream) or is an iterable of byte blocks. Pieces are
    assembled in one reused buffer that the source inflates into (fresh multi-MB allocations
    cost a page fault per 4 KiB on a VM: 0.5 s/GB measured): each ``Piece.data`` is a view
    valid until the next piece is asked for. With ``next_buffer`` (buffers of at least ``2 *
    block_size + 2`` bytes the caller hands out, e.g. the decode pool's shared slots) the
    text after each cut starts the next buffer: pieces are inflated where they are decoded.
    Sets ``state.header`` (and ``bare_list``) first, ``state.rest`` / ``rest_offset`` (the text
    after the last cut) at the end. Raises NotStreamable without an event array near the start."""
    readinto = source.readinto if hasattr(source, "readinto") else _IterReader(source).readinto
    work = next_buffer() if next_buffer is not None else _buffer(2 * block_size + 2)
    work[0] = 0x5B  # work[0] is a "[" so that a piece is one view: b"[" + events + b"]"
    used = 1
    start = None
    while start is None:  # the header: up to the '[' of the event array
        if used == len(work):
            if used > MAX_HEADER:
                raise NotStreamable("no traceEvents array near the start")
            work = _grown(work, used, 2 * used)
        # Read the header in growing steps, not a whole buffer at once: what is read past the
        # array's '[' becomes the first piece, and a first piece of two blocks made the buffer
        # grow and the slot that takes it stay 12 MB resident (measured on a 1 GB trace).
        n = readinto(memoryview(work)[used : used + min(block_size, max(_HEADER_STEP, used))])
        used += n
        start = _find_array_start(bytearray(work[1:used]), state, final=n == 0)
        if start is None and n == 0:
            raise NotStreamable("no traceEvents array")
    state.events_offset = start
    work[1 : used - start] = bytes(work[1 + start : used])
    used -= start
    base = start  # document offset of work[1]
    scan_from = 1
    while True:
        if used + block_size + 1 > len(work):  # a new buffer: views of the old one may be alive
            work = _grown(work, used, 2 * (used + block_size))
        n = readinto(memoryview(work)[used : used + block_size])
        if n == 0:
            break
        used += n
        cut = _last_cut(work, scan_from, used)
        if cut is None:
            scan_from = max(1, used - 16)
            continue
        after = _after_comma(work, cut, used)
        sep = bytes(work[cut + 1 : after])
        work[cut + 1] = 0x5D  # "]"
        yield Piece(base, memoryview(work)[: cut + 2], sep)
        rest = bytes(work[after:used])
        if next_buffer is not None:  # the piece keeps its buffer; the rest starts the next one
            work = next_buffer()
            work[0] = 0x5B
        work[1 : 1 + len(rest)] = rest
        used = 1 + len(rest)
        base += after - 1
        scan_from = 1
    state.rest = bytes(work[1:used])
    state.rest_offset = base


def _buffer(size: int) -> mmap.mmap:
    """Anonymous memory: unlike bytearray(size) it is not zero-filled up front, so only the
    pages a piece reaches are resident."""
    return mmap.mmap(-1, size)


def _grown(work: mmap.mmap, used: int, size: int) -> mmap.mmap:
    bigger = _buffer(size)
    bigger[:used] = work[:used]
    return bigger


def stream_event_chunks(
    blocks: Iterable[bytes],
    decode_chunk: Callable[[bytes | memoryview], Any],
    state: StreamState,
    block_size: int = 8 << 20,
) -> Iterator[Any]:
    """Yield ``decode_chunk(b"[" + events + b"]")`` results for consecutive event runs.

    ``decode_chunk`` must raise ``msgspec.DecodeError`` (or ValidationError) on bad input.
    Sets ``state.header``/``state.tail`` from the surrounding object. Raises
    :class:`NotStreamable` when no top-level event array is found near the start.
    """
    merger = PieceMerger(decode_chunk, state)
    for piece in split_pieces(blocks, state, block_size):
        result = merger.settle(piece, lambda: decode_chunk(piece.data))  # noqa: B023 - called at once
        if result is not FAILED:
            yield result
    yield from merger.finish()


def _after_comma(buf: mmap.mmap, cut: int, end: int) -> int:
    """Index just after the ',' (and whitespace) that follows the '}' at ``cut``."""
    i = buf.find(b",", cut, end) + 1
    while i < end and buf[i] in b" \t\r\n":
        i += 1
    return i


_TAIL_WINDOW = 1 << 12  # the first window holds a few events (a 64 KB one cost the parent 12 ms per GB); it grows x4


def _last_cut(buf: mmap.mmap, scan_from: int, end: int) -> int | None:
    """Position of the '}' of the last candidate boundary in ``buf[scan_from:end]``.

    Searched from the end in growing windows: a block holds thousands of candidates and only
    the last one matters (earlier text was already scanned or consumed).
    """
    window = _TAIL_WINDOW
    while True:
        lo = max(scan_from, end - window)
        last = None
        for m in _CANDIDATE_CUT.finditer(buf, lo, end):
            last = m.start()
        if last is not None or lo == scan_from:
            return last
        window *= 4


def _find_array_start(buf: bytearray, state: StreamState, final: bool = False) -> int | None:
    """Offset just after the '[' that opens the event array; parses the header."""
    i = 0
    n = len(buf)
    while i < n and buf[i] in b" \t\r\n":
        i += 1
    if i >= n:
        return None
    if buf[i : i + 3] == b"\xef\xbb\xbf":
        i += 3
    if buf[i : i + 1] == b"[":
        state.bare_list = True
        return i + 1
    if buf[i : i + 1] != b"{":
        raise NotStreamable("document is not a JSON object or array")
    m = _TRACE_EVENTS_KEY.search(buf)
    if m is None:
        return None
    if m.group(1) == b"{":
        raise NotStreamable("traceEvents is an object, not an array")
    head = bytes(buf[: m.start()]).rstrip()
    if head.endswith(b","):
        head = head[:-1]
    try:
        header = msgspec.json.decode(head + b"}")
    except msgspec.DecodeError as exc:
        raise NotStreamable(f"header before traceEvents does not parse: {exc}") from exc
    if not isinstance(header, dict):
        raise NotStreamable("header is not an object")
    state.header = header
    return m.end()
