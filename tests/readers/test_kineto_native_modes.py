"""The native Kineto scanner's own paths against each other: every byte-scan level this CPU
has (scalar, SSE2, AVX2) with its one-pass reader on and off, on the same inputs.
"""
from __future__ import annotations

import ctypes
import json
import random

import msgspec
import pytest

from copyprof.readers.kineto import native as kineto_native
from tests.fuzz.mutate import BYTE_OPS, byte_op
from tests.readers.native_cases import chunks, needs_scanner, real_events, real_traces, retyped, scan


# ---------------------------------------------------------------- the scanner's own paths
# The scanner reads the common events in one pass over the chunk's bytes classified 64 at a
# time (SSE2 or AVX2, chosen at run time) and leaves the rest to its general reader, which
# also reads everything where the byte scans are scalar (other CPUs). Whatever path reads a
# chunk, the result must be the same bytes: rows, side table, names, odd counts, or the same
# reason for declining. These tests run every path this CPU has on the same inputs.

def _modes() -> list[tuple[str, bool]]:
    """(byte-scan level, one-pass reader on) pairs this CPU can run: scalar always."""
    have = []
    for level in ("scalar", "sse2", "avx2"):
        try:
            kineto_native.native_scanner.simd(level)
        except ValueError:  # not on this CPU
            continue
        have.append(level)
    return [(level, fast) for level in have for fast in (True, False) if level != "scalar" or not fast]


@pytest.fixture
def scan_in_every_mode():
    """scan_all(data) -> {mode: scan(data)} over _modes(), and each mode's fast_count(); the
    module's defaults are put back afterwards."""
    mod = kineto_native.native_scanner
    level, fast = mod.simd(), mod.fast_events()
    modes = _modes()

    def scan_all(data: bytes | memoryview) -> tuple[dict, dict]:
        out, fast_read = {}, {}
        for lv, on in modes:
            mod.simd(lv)
            mod.fast_events(on)
            out[(lv, on)] = mod.scan(data)
            fast_read[(lv, on)] = mod.fast_count()
        return out, fast_read

    yield scan_all
    mod.simd(level)
    mod.fast_events(fast)


def exact_buffer(data: bytes) -> memoryview:
    """data in a buffer of exactly its size (a ctypes array: no trailing NUL as bytes have,
    no spare capacity as a bytearray has), so that under ASan or valgrind (PYTHONMALLOC=malloc)
    a read even one byte past the end is reported."""
    return memoryview(ctypes.create_string_buffer(data, len(data))).cast("B")


def assert_one_result(results: dict, what: str) -> None:
    first_mode, first = next(iter(results.items()))
    for mode, got in results.items():
        assert got == first, f"{what}: {mode} gives another result than {first_mode}"


@needs_scanner
def test_scan_levels_are_known_and_checked():
    # simd() names the level in use (by default the best the CPU has) and refuses a level
    # the CPU lacks or that does not exist, leaving the level as it was.
    mod = kineto_native.native_scanner
    level = mod.simd()
    assert level in ("scalar", "sse2", "avx2")
    with pytest.raises(ValueError):
        mod.simd("avx512")
    assert mod.simd() == level


@needs_scanner
@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name[:40])
def test_every_path_reads_real_traces_alike(path, scan_in_every_mode):
    # Real chunks (Kineto's own layouts: one line per member group, indented args, compact
    # roctracer files): every mode the same result, and the one-pass reader, where this CPU
    # has it, reads most events of the chunks that are plain Kineto (our H200 captures).
    if not path.is_file():
        pytest.skip(f"sample {path.name} not found (../shared/sample_traces is not next to this checkout)")
    events, fast_read = 0, {}
    for data in chunks(path, limit=3):
        results, read = scan_in_every_mode(data)
        assert_one_result(results, path.name)
        events += len(msgspec.json.decode(data))
        fast_read = {m: fast_read.get(m, 0) + n for m, n in read.items() if m[1]}
    if "rank0" in path.name and path.parent.parent.name == "traces":
        assert all(n > 0.9 * events for n in fast_read.values()), (fast_read, events)


def _kineto_like(events: list[dict], layout: str) -> bytes:
    """The events as Kineto writes them (one event per block, ", " and ": "), compact, or
    indented as json.dumps does."""
    if layout == "kineto":
        return ("[\n" + ",\n".join("  " + json.dumps(e) for e in events) + "\n]").encode()
    if layout == "compact":
        return json.dumps(events, separators=(",", ":")).encode()
    return json.dumps(events, indent=int(layout)).encode()


@needs_scanner
@pytest.mark.parametrize("layout", ["kineto", "compact", "1", "4", "12"])
def test_every_path_reads_damaged_events_alike(layout, scan_in_every_mode):
    # Real events in several layouts, then byte damage (truncation, flips, inserted and
    # deleted bytes, invalid UTF-8, zeros): whatever the damage, every mode gives the same
    # result, accepting or declining; and on the undamaged text the one-pass reader is used.
    rng = random.Random(23)
    base = _kineto_like(real_events(), layout)
    results, fast_read = scan_in_every_mode(base)
    assert_one_result(results, f"{layout}, undamaged")
    assert all(fast_read[m] > 0 for m in results if m[1]), fast_read
    for i in range(300):
        data = byte_op(base, BYTE_OPS[i % len(BYTE_OPS)], rng)
        results, _ = scan_in_every_mode(data)
        assert_one_result(results, f"{layout}, damage {i} ({BYTE_OPS[i % len(BYTE_OPS)]})")


@needs_scanner
def test_every_path_reads_retyped_fields_alike(scan_in_every_mode):
    # One field of one event replaced by an odd value (the shapes the one-pass reader leaves
    # to the general reader: nulls, bools, strings for ids, containers, escapes, non-ASCII):
    # the same result in every mode, the event read by whichever reader takes it.
    rng = random.Random(29)
    events = real_events()
    for _ in range(300):
        evs = retyped(events, rng)
        try:
            data = _kineto_like(evs, rng.choice(("kineto", "compact", "4")))
        except ValueError:
            continue
        results, _ = scan_in_every_mode(data)
        assert_one_result(results, "retyped field")


@needs_scanner
def test_every_path_stops_alike_at_every_end_offset(scan_in_every_mode):
    # The chunk's end may fall anywhere: inside a name, a number, a key, a run of
    # indentation. The byte scans read 16, 32 or 64 bytes at a time and must neither read
    # past the end nor stop elsewhere than the byte loops: cut Kineto texts at every length
    # over spans of 4 x 64 bytes (every offset mod 64, at several places) and compare the
    # modes. (Run under ASan or valgrind, this also shows no read past the buffer.)
    for layout in ("kineto", "compact"):
        text = _kineto_like(real_events(limit=12), layout)
        cuts = set()
        for start in (1, 64, len(text) // 3, len(text) // 2, len(text) - 256):
            cuts.update(range(start, start + 256))
        for n in sorted(c for c in cuts if 0 < c <= len(text)):
            results, _ = scan_in_every_mode(exact_buffer(text[:n]))
            assert_one_result(results, f"{layout} cut at {n}")


@needs_scanner
@pytest.mark.parametrize("tail", ['"name": "', '"name": "void k<', '"ts": 1', '"ts": 12.5', '"args": {"grid": [1, ',
                                  '"cat": "kernel",', '"name": "k"', '"args": {"Input Dims": [[1, 2], [',
                                  '"x": {"a": [1, {"b": "'])
def test_every_path_declines_alike_at_the_buffer_end(tail, scan_in_every_mode):
    # Texts that end inside a token: a string, a number, a key, indentation, a nested
    # value, for lengths that put the end at every offset mod 64 of the byte scans' blocks.
    # Every mode must decline with the same reason (the scanner declines an unterminated
    # array).
    for pad in range(0, 140):
        for filler in ("x" * pad, " " * pad, "7" * pad):
            data = ('[{"ph": "X", ' + tail + filler).encode()
            results, _ = scan_in_every_mode(exact_buffer(data))
            assert_one_result(results, f"{tail!r} + {len(filler)} x {filler[:1]!r}")
            assert all(isinstance(r, str) for r in results.values())


@needs_scanner
def test_every_path_reads_a_chunk_at_any_alignment(scan_in_every_mode):
    # The blocks are counted from the chunk's first byte, wherever it lies in memory: a
    # chunk seen through a memoryview at each offset of a 64-byte line gives one result.
    text = _kineto_like(real_events(limit=8), "kineto")
    want = scan(text)
    assert not isinstance(want, str), want
    for shift in range(64):
        buf = bytearray(shift) + bytearray(text)
        results, _ = scan_in_every_mode(memoryview(buf)[shift:])
        assert_one_result(results, f"shifted by {shift}")
        assert next(iter(results.values())) == want
