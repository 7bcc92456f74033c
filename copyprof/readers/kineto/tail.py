"""The end of a Chrome-trace document: the last events, the event array's end, and the keys after it.

Why a module of its own: json_stream cuts the event array into pieces and decodes them; what is
left after the last piece holds the last events, the array's ``]`` and the object's other keys
(``traceName``, ``"INFO": []``, a merger's ``deviceProperties``: any JSON, in any order). Finding
where the array really ends in that text, telling damage in the last events from keys after
them, and keeping every whole event when the document is cut off, is this module's work.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from copyprof.readers.kineto.repair import FAILED, array_end, repair

if TYPE_CHECKING:
    from copyprof.readers.kineto.state import StreamState

_CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")


def finish_document(
    pending: bytes | bytearray, base: int, decode_chunk: Callable[[bytes], Any], state: StreamState
) -> Iterator[Any]:
    """Decode the last events and the object tail after the array's closing ']'."""
    data = bytes(pending)
    del pending
    tries = 0
    repaired = probed = False
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
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if not probed:  # this "]" may be in the tail ("INFO": [] after traceEvents): find the real end
                probed = True
                found = _after_clean_end(data, base, decode_chunk, state)
                if found is not None:
                    yield from found
                    return
            if repaired:  # cutting out damage is tried at the array's end once, not at every ']'
                continue
            repaired = True
            after = data[pos + 1 :]  # this "]" may be in the tail: after the damage the array's real end may come
            result = repair(b"[" + body + b"]", exc, base, decode_chunk, state, final=True,
                            ends_array=lambda rest: _parse_tail((rest + after).strip(), state.bare_list) is not None)  # noqa: B023
            if result is FAILED:
                continue
            if state.after_array is not None:
                reparsed = _parse_tail((state.after_array + after).strip(), state.bare_list)
                if reparsed is not None:  # always: ends_array accepted this same text
                    tail_obj = reparsed
        state.tail = tail_obj
        state.consumed = base + pos
        if result is not None:
            yield result
        return
    if not probed:  # no "]" is followed by a readable tail: is the damage after the array?
        found = _after_clean_end(data, base, decode_chunk, state)
        if found is not None:
            yield from found
            return
    # No well-formed end. Either the document was cut off, or it is complete but malformed.
    # Keep every whole event before the damage either way.
    end = data.rstrip()[-1:]
    if end in (b"}", b"]"):
        state.truncated = f"invalid JSON in the event array ({_first_error(data, end, base)})"
    else:
        state.truncated = "the JSON document ends before its event array is closed"
    yield from _salvage(data, base, decode_chunk, state)


_WHOLE_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])  # syntax only: no objects built


def _clean_end(probe: bytes, bare_list: bool) -> int | None:
    """Just past the event array's ``]`` in ``probe`` (``[`` + the rest of the document), when
    every event before it is whole JSON; None when the array is damaged or cut off. One syntax
    pass finds it whatever the tail holds (arrays after ``traceEvents``, ``]`` in strings)."""
    try:
        _WHOLE_EVENTS.decode(probe)
    except msgspec.DecodeError as exc:
        return None if bare_list else array_end(probe, exc, closing=True)
    return len(probe) if bare_list else None


def _after_clean_end(data: bytes, base: int, decode_chunk: Callable[[bytes], Any],
                     state: StreamState) -> list[Any] | None:
    """The decoded events of ``data`` (the rest of the document) when they are whole JSON up
    to the array's end, with the tail read into ``state``; None when the array is damaged or
    cut off (then the caller's repair rules apply)."""
    probe = b"[" + data
    end = _clean_end(probe, state.bare_list)
    if end is None:
        return None
    try:  # the syntax pass does not check everything the decoder does (UTF-8 inside strings)
        result = [decode_chunk(probe[:end])] if probe[1:end - 1].strip() else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not read_tail(probe[end:], state):
        return None
    state.consumed = base + end - 1
    return result


def read_tail(text: bytes, state: StreamState) -> bool:
    """Parse the document's text after the event array into ``state.tail``. Text that is not
    the rest of the object (damage after the array) sets ``state.truncated``; every event
    was read. False when ``text`` is not even the start of such a rest (the caller looks on)."""
    text = text.strip()
    tail = _parse_tail(text, state.bare_list)
    if tail is not None:
        state.tail = tail
        return True
    if state.bare_list or not text.startswith((b",", b"}")):
        return False
    state.truncated = f"the {len(text):,} bytes after the event array are not valid JSON and were not read"
    return True


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
    """The whole events of the text after the last accepted piece, when the array has no good end."""
    last = None
    for last in _CANDIDATE_CUT.finditer(data):
        pass
    state.consumed = base
    if last is None:
        return
    chunk = b"[" + data[: last.start() + 1] + b"]"  # the last cut may be false (inside the cut-off event)
    try:
        result = decode_chunk(chunk)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        result = repair(chunk, exc, base, decode_chunk, state, final=True)  # keeps the whole events before damage
        if result is FAILED:
            return
    state.consumed = base + last.start() + 1
    yield result
