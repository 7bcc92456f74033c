"""What the stream has learnt about one Kineto document while splitting it (shared by the
splitter, the damage repair and the tail reader, which all update it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamState:
    header: dict[str, Any] = field(default_factory=dict)
    tail: dict[str, Any] = field(default_factory=dict)
    bare_list: bool = False
    events_offset: int = 0  # uncompressed byte offset where the event array starts
    consumed: int = 0  # uncompressed bytes whose events were decoded
    truncated: str | None = None  # why the array ended early, if it did
    rest: bytes = b""  # what follows the last candidate cut (set when splitting ends)
    rest_offset: int = 0
    skipped: list[tuple[int, int]] = field(default_factory=list)  # (document offset, bytes) cut out as damaged
    after_array: bytes | None = None  # text after the event array's ']' found inside a chunk (json_repair)
