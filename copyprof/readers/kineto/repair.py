"""Cut damaged events out of a chunk of Chrome-trace events, so one bad byte costs one event.

Why: a trace is one JSON array; to a plain decoder, a flipped byte or a lost span in the
middle of a multi-GB capture makes the rest of the array undecodable, so every event after the
damage would be lost (and finding that out would re-decode the remainder hundreds of times).
The decoder's error offset says where the damage is; the events around it are found at
candidate boundaries (``}`` ``,`` ``{``, as in json_stream), the broken span between them is
removed, and the chunk is decoded again. A boundary that falls inside the broken event is
recognised because the prefix before it is then not a sequence of whole events (checked with
a Raw decoder, which validates syntax without building objects).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from copyprof.readers.kineto.state import StreamState

_CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
FAILED = object()  # PieceMerger.settle / repair: the chunk did not decode (yet)
MAX_EXCISIONS = 16  # broken spans cut out of one chunk; past that the chunk's rest is dropped
_MAX_BACKTRACK = 8  # candidate cuts tried to the left of an error for the end of the last whole event
_WHOLE_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])  # checks JSON syntax without building objects


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_MEMBER = re.compile(rb'\s*"(?:[^"\\]|\\.)*"\s*:')


def array_end(data: bytes | memoryview, exc: Exception, closing: bool = False) -> int | None:
    """Just past the ``]`` that closed the event array of ``data`` (``[`` + events ...), when
    the decoder stopped at what can only follow a closed top-level array: an object member
    (``, "key":``) or, with ``closing``, the document's final ``}``. Valid JSON has that
    whenever the trace object has keys after ``traceEvents`` (``"INFO": []``, SGLang's merged
    traces put ``deviceProperties`` there): it is the array's end, never damage. None otherwise.
    """
    m = _TRAILING.search(str(exc))
    if m is None:
        return None
    at = int(m.group(1)) - 1  # msgspec reports the byte after the first trailing character
    if not 1 <= at < len(data):
        return None
    ch = bytes(data[at:at + 1])
    if not ((ch == b"," and _MEMBER.match(data, at + 1)) or (closing and ch == b"}")):
        return None
    end = at
    while end > 1 and data[end - 1] in b" \t\r\n":
        end -= 1
    return end if bytes(data[end - 1:end]) == b"]" else None


def _error_at(exc: Exception) -> int | None:
    """Where the decoder stopped; None for "Input data was truncated" (the end is incomplete)."""
    m = _BYTE_POS.search(str(exc))
    return int(m.group(1)) if m else None


def _boundary_before(data: bytes, err: int, known: int) -> int:
    """End (exclusive) of the last whole event before ``err``, at or after ``known``.

    ``known`` is a true boundary (the chunk start, or the end of a kept event). A candidate cut
    between it and the error is true when the text from ``known`` to it is whole events: a cut
    inside the broken event (a nested ``}, {``) fails that check and is passed over. Each
    check reads only from ``known``, so cutting out many spans stays linear in the chunk.
    """
    cuts = [m.start() for m in _CANDIDATE_CUT.finditer(data, known, err)]
    for cut in reversed(cuts[-_MAX_BACKTRACK:]):
        body = data[known:cut + 1].lstrip(b", \t\r\n")
        try:
            _WHOLE_EVENTS.decode(b"[" + body + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        return cut + 1
    return known


def repair(data: bytes, exc: Exception, offset: int, decode_chunk: Callable[[bytes], Any],
           state: StreamState, final: bool = False, ends_array: Callable[[bytes], bool] | None = None) -> Any:
    """Decode ``data`` ("[" + events + "]") with its broken events cut out, or return FAILED.

    An error before the chunk's last candidate cut is damage: the span from the end of the
    last whole event before it to the next candidate cut after it is removed and the chunk
    decoded again (at most MAX_EXCISIONS times; then the events before the current error are
    kept and the rest of the chunk is dropped). An error in the last event means the chunk's
    end is incomplete (a false cut), which merging with the next piece handles: FAILED;
    unless ``final`` (no more text will come), when the whole events before it are kept.
    ``offset`` is the document offset of ``data[1]``; the removed ranges go to
    ``state.skipped`` only when something is returned. With ``ends_array`` (the document's end
    is in ``data``), an error that is the array's end — :func:`array_end`, and ``ends_array``
    accepts the text from there as the rest of the document — is not cut out: the events
    before it are returned and the text from it on is left in ``state.after_array``.
    """
    removed: list[tuple[int, int]] = []
    shift = 0  # bytes removed so far, all to the left of the current error
    known = 1
    for attempt in range(MAX_EXCISIONS + 1):
        end = array_end(data, exc) if ends_array is not None else None
        # the events before are whole; the rest is the tail
        if end is not None and ends_array is not None and ends_array(bytes(data[end:])):
            try:
                result = decode_chunk(data[:end])
            except (msgspec.DecodeError, msgspec.ValidationError):
                return FAILED
            state.skipped.extend(r for r in removed if r[1] > 0)
            state.after_array = bytes(data[end:])
            return result
        err = _error_at(exc)
        after = _CANDIDATE_CUT.search(data, err) if err is not None else None
        if err is None or after is None or attempt == MAX_EXCISIONS:  # keep the whole events before the error, drop the rest
            if not final and attempt < MAX_EXCISIONS:
                return FAILED
            lo = _boundary_before(data, len(data) - 1 if err is None else err, known)
            if lo <= 1:
                return FAILED
            removed.append((offset + lo - 1 + shift, len(data) - 1 - lo))
            data = data[:lo] + b"]"
        else:
            lo = _boundary_before(data, err, known)
            hi = after.end() - 1  # the '{' of the first event after the damage
            removed.append((offset + lo - 1 + shift, hi - lo))
            glue = b"," if lo > 1 else b""
            data = data[:lo] + glue + data[hi:]
            shift += hi - lo - len(glue)
            known = lo
        try:
            result = decode_chunk(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as again:
            if after is None or attempt == MAX_EXCISIONS:
                return FAILED
            exc = again
            continue
        state.skipped.extend(r for r in removed if r[1] > 0)
        return result
    return FAILED
