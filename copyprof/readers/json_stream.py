"""Split a Chrome-trace JSON document into header, event-array chunks, and tail — streaming.

Why: a Kineto trace is one JSON object whose ``traceEvents`` array holds millions of events.
Decoding it whole costs ~6x its size in RAM (HTA, orjson). Instead we cut the array into
chunks at event boundaries and let msgspec decode each chunk on its own.

How boundaries are found without a per-byte Python scanner: a candidate cut is a ``}`` that is
followed (after whitespace) by ``,`` and ``{``. A cut inside a nested object or a string
leaves the chunk unbalanced, so decoding that chunk fails; the chunk is then merged with the
next one and tried again. A chunk that decodes is therefore a whole sequence of top-level
events. Only a document that is really malformed keeps failing, and is reported as such.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*([\[{])')
_CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
MAX_HEADER = 64 << 20  # header bigger than this: not a streaming-friendly document
MAX_PENDING = 512 << 20  # one undecodable run this long means the document is malformed


class NotStreamable(Exception):
    """The document is not a Chrome trace with a top-level event array; decode it whole."""


class MalformedChunk(Exception):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


@dataclass
class StreamState:
    header: dict[str, Any] = field(default_factory=dict)
    tail: dict[str, Any] = field(default_factory=dict)
    bare_list: bool = False
    events_offset: int = 0  # uncompressed byte offset where the event array starts
    consumed: int = 0  # uncompressed bytes whose events were decoded
    truncated: str | None = None  # why the array ended early, if it did


def stream_event_chunks(
    blocks: Iterable[bytes],
    decode_chunk: Callable[[bytes], Any],
    state: StreamState,
) -> Iterator[Any]:
    """Yield ``decode_chunk(b"[" + events + b"]")`` results for consecutive event runs.

    ``decode_chunk`` must raise ``msgspec.DecodeError`` (or ValidationError) on bad input.
    Sets ``state.header``/``state.tail`` from the surrounding object. Raises
    :class:`NotStreamable` when no top-level event array is found near the start.
    """
    it = iter(blocks)
    buf = bytearray()
    for block in it:
        buf += block
        start = _find_array_start(buf, state)
        if start is not None:
            break
        if len(buf) > MAX_HEADER:
            raise NotStreamable("no traceEvents array near the start")
    else:
        start = _find_array_start(buf, state, final=True)
        if start is None:
            raise NotStreamable("no traceEvents array")
    state.events_offset = start
    pending = bytearray(buf[start:])
    base = start  # offset of pending[0] in the document
    del buf
    scan_from = 0
    for block in it:
        pending += block
        cut = _last_cut(pending, scan_from)
        if cut is None:
            scan_from = max(0, len(pending) - 16)
            continue
        chunk = bytes(pending[: cut + 1])
        try:
            result = decode_chunk(b"[" + chunk + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if len(pending) > MAX_PENDING:
                raise MalformedChunk(base, str(exc)) from exc
            scan_from = max(0, len(pending) - 16)
            continue  # cut was inside a nested value: merge with the next block
        after = _after_comma(pending, cut)
        state.consumed = base + cut + 1
        del pending[:after]
        base += after
        scan_from = 0
        yield result
    yield from _finish(pending, base, decode_chunk, state)


def _after_comma(buf: bytearray, cut: int) -> int:
    """Index just after the ',' that follows the '}' at ``cut``."""
    return buf.index(b",", cut) + 1


def _last_cut(buf: bytearray, scan_from: int) -> int | None:
    """Position of the '}' of the last candidate boundary at or after ``scan_from``."""
    last = None
    # Search only the tail: earlier candidates were already rejected or consumed.
    for m in _CANDIDATE_CUT.finditer(buf, max(0, scan_from)):
        last = m.start()
    return last


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


def _finish(
    pending: bytearray, base: int, decode_chunk: Callable[[bytes], Any], state: StreamState
) -> Iterator[Any]:
    """Decode the last events and the object tail after the array's closing ']'."""
    data = bytes(pending)
    del pending
    tries = 0
    pos = len(data)
    while tries < 64:
        pos = data.rfind(b"]", 0, pos)
        if pos < 0:
            break
        tries += 1
        tail = data[pos + 1 :].strip()
        tail_obj = _parse_tail(tail, state.bare_list)
        if tail_obj is None:
            continue
        body = data[:pos].rstrip()
        try:
            result = decode_chunk(b"[" + body + b"]") if body else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        state.tail = tail_obj
        state.consumed = base + pos
        if result is not None:
            yield result
        return
    # No well-formed end. Either the document was cut off, or it is complete but malformed.
    # Keep every whole event before the damage either way.
    end = data.rstrip()[-1:]
    if end in (b"}", b"]"):
        state.truncated = f"invalid JSON in the event array ({_first_error(data, end, base)})"
    else:
        state.truncated = "the JSON document ends before its event array is closed"
    yield from _salvage(data, base, decode_chunk, state)


def _first_error(data: bytes, end: bytes, base: int) -> str:
    pos = data.rfind(b"]")
    body = data[:pos] if pos >= 0 and end == b"}" else data.rstrip()[:-1]
    try:
        msgspec.json.decode(b"[" + body + b"]")
    except msgspec.DecodeError as exc:
        # msgspec counts from the '[' we prepended; report the offset in the document.
        return _BYTE_POS.sub(lambda m: f"at byte {int(m.group(1)) - 1 + base:,}", str(exc))
    return "unbalanced document"


def _parse_tail(tail: bytes, bare_list: bool) -> dict[str, Any] | None:
    if bare_list:
        return {} if tail == b"" else None
    if tail == b"}":
        return {}
    if not (tail.startswith(b",") and tail.endswith(b"}")):
        return None
    try:
        obj = msgspec.json.decode(b"{" + tail[1:])
    except msgspec.DecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _salvage(data: bytes, base: int, decode_chunk: Callable[[bytes], Any], state: StreamState) -> Iterator[Any]:
    cuts = [m.start() for m in _CANDIDATE_CUT.finditer(data)]
    for cut in reversed(cuts[-256:]):
        try:
            result = decode_chunk(b"[" + data[: cut + 1] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        state.consumed = base + cut + 1
        yield result
        return
    state.consumed = base
