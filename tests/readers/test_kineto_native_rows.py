"""The native scanner's rows buffer (scan.c's Rows): sized from the chunk's length at a guess
of bytes per complete event, grown when a chunk of smaller events outnumbers the guess, and
returned as the bytearray the rows were written into, cut to its rows. Chunks of tiny events
(far more events than the guess), of one event, empty ones, and events around the first
growth, in every scanner mode, against the Python path.
"""
from __future__ import annotations

import json

import pytest

from copyprof.readers.kineto import native as kineto_native
from tests.readers.native_cases import check, needs_scanner, scan
from tests.readers.test_kineto_native_modes import (  # noqa: F401 - scan_in_every_mode: a fixture
    assert_one_result,
    exact_buffer,
    scan_in_every_mode,
)

TINY_X = '{"ph":"X","name":"k%d"}'  # ~22 bytes a row: ten times the scanner's guess of rows
TINY_I = '{"ph":"i"}'                 # no row at all


def tiny_chunk(n: int, every_i: int = 0) -> bytes:
    """n tiny complete events with distinct names (and, with every_i, an instant event after
    every every_i-th of them), compact as one line."""
    events = []
    for k in range(n):
        events.append(TINY_X % (k % 97))
        if every_i and k % every_i == 0:
            events.append(TINY_I)
    return ("[" + ",".join(events) + "]").encode()


def rows_of(data: bytes) -> int:
    return sum(1 for e in json.loads(data) if e.get("ph") == "X")


def assert_rows_cut(out: tuple, n: int) -> None:
    # the count and the bytearray's length agree, and the bytearray behaves as one
    row_size = kineto_native.native_scanner.row_size()[0]
    assert out[0] == n and isinstance(out[1], bytearray) and len(out[1]) == n * row_size
    rows = out[1]
    before = bytes(rows)
    rows += b"\0" * 1000
    del rows[len(before):]
    assert bytes(rows) == before


@needs_scanner
@pytest.mark.parametrize("n", [*range(48), 64, 65, 257, 5000, 40000])
def test_chunks_of_tiny_events_grow_the_rows(n, scan_in_every_mode):
    # The first guess (16 rows and one per 256 bytes) is reached and passed between 17 and
    # 20 tiny events; 40000 grow it again and again. Every mode gives the same rows, cut to
    # their number, and the Python path the same columns.
    data = tiny_chunk(n)
    results, _ = scan_in_every_mode(data)
    assert_one_result(results, f"{n} tiny events")
    assert_rows_cut(scan(data), n)
    assert check(data)


@needs_scanner
@pytest.mark.parametrize("every_i", [1, 3])
def test_rows_grow_among_events_without_rows(every_i, scan_in_every_mode):
    # Instant events between the complete ones: a row only for each complete one.
    data = tiny_chunk(3000, every_i)
    results, _ = scan_in_every_mode(data)
    assert_one_result(results, f"instant every {every_i}")
    assert_rows_cut(scan(data), 3000)
    assert check(data)


@needs_scanner
@pytest.mark.parametrize("text", [b"[]", b" [ ] ", b"[\n]\n", b'[{"ph":"i"}]', b'[{"ph":"i"},{"ph":"M","name":"x"}]',
                                  b'[{"ph":"X","name":"a"}]',
                                  b'[{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2}]'])
def test_empty_and_single_event_chunks(text, scan_in_every_mode):
    # No row or one: an empty bytearray or one row's bytes, in exact buffers too.
    results, _ = scan_in_every_mode(text)
    assert_one_result(results, repr(text))
    exact, _ = scan_in_every_mode(exact_buffer(text))
    assert_one_result({**results, **{("exact",) + k: v for k, v in exact.items()}}, repr(text))
    assert_rows_cut(scan(text), rows_of(text))
    assert check(text)


@needs_scanner
@pytest.mark.parametrize("n", [17, 5000])
def test_declined_after_the_rows_grew(n, scan_in_every_mode):
    # A chunk that fails after the buffer grew (an unterminated array, a bad last event)
    # gives the same one-line reason in every mode.
    for data in (tiny_chunk(n)[:-1], tiny_chunk(n)[:-1] + b',{"ph":"X"}]'):
        results, _ = scan_in_every_mode(data)
        assert_one_result(results, f"declined after {n}")
        assert isinstance(scan(data), str)
        check(data)
