"""Cut damaged events out of a chunk of Chrome-trace events, so one bad byte costs one event.

Why: a trace is one JSON array; a flipped byte or a lost span in the middle of a multi-GB
capture used to make the rest of the array undecodable, so every event after the damage was
lost (and finding that out re-decoded the remainder hundreds of times). The decoder's error
offset says where the damage is; the events around it are found at candidate boundaries
(``}`` ``,`` ``{``, as in json_stream), the broken span between them is removed, and the
chunk is decoded again. A boundary that falls inside the broken event is recognised because
the prefix before it is then not a sequence of whole events (checked with a Raw decoder,
which validates syntax without building objects).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from copyprof.readers.json_stream import StreamState

_CANDIDATE_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
FAILED = object()  # PieceMerger.settle / repair: the chunk did not decode (yet)
MAX_EXCISIONS = 4096  # damaged events cut out of one chunk before it counts as undecodable
_WHOLE_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])  # checks JSON syntax without building objects
_MAX_BACKTRACK = 32  # candidate cuts tried to the left of an error for a prefix of whole events


def _excise(data: bytes, exc: Exception) -> tuple[bytes, int, int] | None:
    """``data`` ("[" + events + "]") without the event the decode error is in: (data, at, bytes cut).

    The kept prefix ends at the last candidate cut before the error whose prefix is whole
    events (checked: a cut inside the broken event is passed over); the kept rest starts at
    the first candidate cut after the error. None when the error is not before the last
    candidate cut (then it is the end of the chunk that is incomplete: a false cut, or a
    cut-off document, which merging handles) or no whole-event prefix is found nearby.
    """
    m = _BYTE_POS.search(str(exc))
    if m is None:  # "Input data was truncated": the end is incomplete
        return None
    err = int(m.group(1))
    before: list[re.Match[bytes]] = []
    after = None
    for cut in _CANDIDATE_CUT.finditer(data):
        if cut.end() - 1 <= err:  # the event starting here begins at or before the error
            before.append(cut)
            del before[:-_MAX_BACKTRACK]
        elif cut.start() >= err:
            after = cut
            break
    if after is None:
        return None
    hi = after.end() - 1  # the '{' of the first event after the damage
    for cut in reversed(before):
        lo = cut.start() + 1  # keep the '}' that ends the last good event
        try:
            _WHOLE_EVENTS.decode(data[:lo] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # this cut is inside the broken event (or an earlier one): look further left
        return data[:lo] + b"," + data[hi:], lo, hi - lo
    if len(before) < _MAX_BACKTRACK:  # the damage is in the first event
        return data[:1] + data[hi:], 1, hi - 1
    return None


def repair(data: bytes, exc: Exception, offset: int, decode_chunk: Callable[[bytes], Any],
           state: StreamState) -> Any:
    """Decode ``data`` with its damaged events cut out, or return FAILED (nothing recorded).

    ``offset`` is the document offset of ``data[1]``. Cut-out ranges go to ``state.skipped``
    only when the chunk then decodes.
    """
    removed: list[tuple[int, int]] = []
    shift = 0
    for _ in range(MAX_EXCISIONS):
        cut = _excise(data, exc)
        if cut is None:
            return FAILED
        data, at, n = cut
        removed.append((offset + at - 1 + shift, n))
        shift += n - (1 if at > 1 else 0)  # a ',' is put back between the events kept on either side
        try:
            result = decode_chunk(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            exc = err
            continue
        state.skipped.extend(removed)
        return result
    return FAILED
