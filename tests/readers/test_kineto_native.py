"""The native Kineto scanner against the Python path it stands in for.

The contract (copyprof/readers/kineto/low_level/scan.c): for any chunk, the scanner either declines
(returns a reason and the Python path decodes the chunk) or returns exactly the columns the
Python path gives. These tests hold it to that on real traces (where it must not decline:
that is the fast path users get), on damaged and retyped copies of real events, and on
generated numbers and strings, and check that it declines whatever msgspec rejects.
"""
from __future__ import annotations

import ctypes
import gzip
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copyprof.readers.files import BlockStream
from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto
from copyprof.readers.kineto.chunk import ChunkResult
from copyprof.readers.kineto.columns import decode_chunk
from copyprof.readers.kineto.native import ROW, native_available, scan_columns
from copyprof.readers.kineto.state import StreamState
from copyprof.readers.kineto.stream import stream_event_chunks
from tests.fuzz.mutate import ARG_FIELDS, BYTE_OPS, EVENT_FIELDS, WEIRD, byte_op

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "sample_traces"
# The comparisons below need the scanner; whether it *should* be there is
# test_the_scanner_is_built_and_in_use's question, which never skips for its absence alone.
needs_scanner = pytest.mark.skipif(kineto_native.native_scanner is None,
                                   reason="native scanner not built (see test_the_scanner_is_built_and_in_use)")


def scan(data: bytes):  # noqa: ANN201 - the extension's own return shapes
    return kineto_native.native_scanner.scan(data)


def python_path(data: bytes) -> ChunkResult | None:
    """The Python path's result, or None when it rejects the chunk as malformed JSON."""
    try:
        return decode_chunk(data)
    except msgspec.DecodeError:
        return None


def assert_same(got: ChunkResult, want: ChunkResult) -> None:
    assert got.names == want.names
    assert got.name_codes.dtype == want.name_codes.dtype and np.array_equal(got.name_codes, want.name_codes)
    assert np.array_equal(got.counts, want.counts)
    assert (got.other, got.bad, got.graph_launches) == (want.other, want.bad, want.graph_launches)
    assert got.odd.tolist() == want.odd.tolist()  # values of an unexpected type, per field
    assert got.cols.keys() == want.cols.keys()
    for key, want_col in want.cols.items():
        col = got.cols[key]
        assert col.dtype == want_col.dtype, key
        assert col.shape == want_col.shape and (col == want_col).all(), key


def check(data: bytes) -> bool:
    """Native and Python paths agree on ``data``; True when the scanner accepted it."""
    want = python_path(data)
    got = scan_columns(data)
    if want is None:  # malformed JSON: the scanner must not accept what msgspec rejects
        assert isinstance(got, str), data[:200]
        return False
    if isinstance(got, str):
        assert " at byte " in got or "kept event" in got  # a one-line reason
        return False
    assert_same(got, want)
    return True


def chunks(path: Path, limit: int) -> list[bytes]:
    """The first ``limit`` chunks the serial reader decodes from ``path`` (pieces, and the
    text after the last cut, which compact one-line files are made of)."""
    out: list[bytes] = []

    def record(data: bytes | memoryview) -> None:
        if len(out) < limit:
            out.append(bytes(data))

    stream = BlockStream(str(path))
    for _ in stream_event_chunks(stream, record, StreamState(), stream.block_size):
        pass
    assert out, f"{path.name}: no chunks"
    return out


SAMPLE_NAMES = ("kineto_cupti_a100_cudagraph_rank0.json.gz", "kineto_cupti_b200_eager.json.gz",
                "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz", "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz",
                "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz")


def real_traces() -> list[Path]:
    # The public samples by name (a missing one is a visible skip, not a case that vanishes),
    # then every capture in traces/ (part of the repository).
    return [SAMPLES / n for n in SAMPLE_NAMES] + sorted((REPO / "traces").rglob("*.pt.trace.json.gz"))


def missing_build_tools() -> str | None:
    """Why setup.py's optional build could not have compiled the scanner here, or None when it
    could: the C compiler setuptools uses ($CC, else the interpreter's build CC) and Python.h."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    compiler = shlex.split(cc)[0] if cc.strip() else "cc"
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler!r} is not on PATH)"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"no Python headers ({headers} is missing)"
    return None


def test_the_scanner_is_built_and_in_use(monkeypatch):
    # setup.py builds it wherever a C compiler and the Python headers are (CI has both). Without
    # them copyprof still works but reads Kineto ~2-3x slower; with them, a missing or stale
    # extension is a broken install, and this test fails on it.
    missing = missing_build_tools()
    if missing:
        pytest.skip(f"{missing}: pip could not build the native scanner; Kineto takes the Python path")
    if os.environ.get("COPYPROF_NATIVE") == "0":
        pytest.skip("COPYPROF_NATIVE=0 in this environment switches the scanner off on purpose")
    assert kineto_native.native_scanner is not None, (
        "a C compiler and Python.h are here, but copyprof.readers.kineto.low_level.scanner is not built: reinstall copyprof")
    assert native_available(), "the scanner is built but does not match kineto_native.ROW/SIDE: rebuild it"
    assert kineto_native._NATIVE
    # And the reader really hands chunks to it: a small capture of ours is read by the scanner.
    accepted: list[bool] = []
    real_scan = kineto_native.scan_columns

    def counting_scan(data: bytes) -> object:
        out = real_scan(data)
        accepted.append(not isinstance(out, str))  # a str is the scanner's reason for declining
        return out
    monkeypatch.setattr(kineto_native, "scan_columns", counting_scan)
    trace = next((REPO / "traces").glob("copies-eager-*/rank0.*.pt.trace.json.gz"))
    read_kineto(str(trace))
    assert accepted and all(accepted)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("COPYPROF_NATIVE", "0")
    assert not native_available()


@needs_scanner
@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name[:40])
def test_real_traces_take_the_native_path_and_match(path):
    # Every chunk of every real capture (public samples, our H200 captures) must be accepted
    # and give the Python path's columns exactly; the first chunks of big files suffice.
    if not path.is_file():
        pytest.skip(f"sample {path.name} not found (../shared/sample_traces is not next to this checkout)")
    for data in chunks(path, limit=4):
        assert check(data), f"{path.name}: declined: {scan_columns(data)}"


def _real_events(limit: int = 60) -> list[dict]:
    """A mix of real events: kernels, runtime, memcpy, annotations, flows, the Trace span."""
    out: list[dict] = []
    for name in ("kineto_cupti_b200_eager.json.gz", "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"):
        path = SAMPLES / name
        if not path.is_file():
            pytest.skip(f"sample {name} not found")
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        by_cat: dict[str, list[dict]] = {}
        for ev in events:
            by_cat.setdefault(f"{ev.get('ph')}/{ev.get('cat')}", []).append(ev)
        for group in by_cat.values():
            out.extend(group[:4])
    return out[: limit * 4]


def _dumps(events: list[dict], rng: random.Random) -> bytes:
    indent = rng.choice((None, None, 1, 4))
    return json.dumps(events, indent=indent, ensure_ascii=rng.random() < 0.5).encode()


@needs_scanner
def test_byte_damage_is_declined_or_matches():
    # Random byte damage of real events: either both paths agree, or the scanner declines;
    # where msgspec rejects the bytes as JSON, the scanner must decline (checked in `check`).
    rng = random.Random(7)
    events = _real_events()
    base = _dumps(events, rng)
    accepted = 0
    for i in range(600):
        data = byte_op(base, BYTE_OPS[i % len(BYTE_OPS)], rng)
        accepted += check(data)
    assert accepted > 20  # some damage leaves valid JSON (inside strings, digits): compared


@needs_scanner
def _retyped(events: list[dict], rng: random.Random) -> list[dict]:
    """A copy of ``events`` with one field of one event (or of its args) set to an odd value."""
    evs = [dict(e) for e in events]
    ev = rng.choice(evs)
    if rng.random() < 0.5 and isinstance(ev.get("args"), dict):
        ev["args"] = dict(ev["args"], **{rng.choice(ARG_FIELDS): rng.choice(WEIRD)})
    else:
        ev[rng.choice(EVENT_FIELDS)] = rng.choice(WEIRD)
    return evs


def test_retyped_fields_are_declined_or_match():
    # One field of one event replaced by an odd value (null, bool, huge int, NaN, numeric
    # string, array, object, long or non-UTF-8-looking string...): the shapes the Python path
    # has tolerant rules for. Most must still be accepted and match (odd values in rows the
    # reader drops, for instance).
    rng = random.Random(11)
    events = _real_events()
    accepted = 0
    for _ in range(800):
        evs = _retyped(events, rng)
        try:
            data = _dumps(evs, rng)
        except ValueError:
            continue
        accepted += check(data)
    assert accepted > 200


def _row_ts(text: str) -> float | None:
    out = scan(f'[{{"ph":"X","name":"k","ts":{text}}}]'.encode())
    if isinstance(out, str):
        return None
    return float(np.frombuffer(out[1], dtype=ROW)["ts"][0])


@needs_scanner
@settings(max_examples=400, deadline=None)
@given(st.integers(0, 10**17), st.integers(0, 19), st.sampled_from(["", "-"]))
def test_decimal_times_are_correctly_rounded(digits, frac, sign):
    # Kineto writes ts as microseconds with three decimals (16-17 significant digits): the
    # scanner's fast path must give exactly msgspec's value (the Python path's decoder), bit
    # for bit: correctly rounded, and integer -0 read as 0.0 as msgspec reads it.
    s = str(digits).rjust(frac + 1, "0")
    text = f"{sign}{s[:len(s) - frac]}.{s[len(s) - frac:]}" if frac else f"{sign}{s}"
    got, want = _row_ts(text), msgspec.json.decode(text, type=float)
    assert got is not None and got == want and str(got) == str(want)
    if frac:
        assert got == float(text)


@needs_scanner
@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["r", "e", "f"]))
def test_any_float_text_reads_as_python_reads_it(x, style):
    text = {"r": repr(x), "e": f"{x:.17e}", "f": f"{x:.6f}"}[style]
    want = msgspec.json.decode(text, type=float)
    assert str(_row_ts(text)) == str(want) and want == float(text)  # (texts here are < 400 bytes)


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(-2**70, 2**70).map(str),
                 st.sampled_from(["0", "-0", "00", "007", "-01", "1.0", "-0.0", "1e3", "1E3", "-", "1.", "12345678901234567890"])),
       st.sampled_from(["pid", "tid", "device", "stream", "correlation", "bytes", "grid"]), st.sampled_from(["", " ", "\n  "]))
def test_any_integer_text_in_an_id_field_is_declined_or_matches(text, field, ws):
    # Ids are read in one pass when they are plain integers of up to 18 digits; every other
    # text (longer integers, floats, leading zeros, a lone sign) must end exactly as the
    # validating path ends it: the Python path's value, or a decline where msgspec fails.
    value = f"[{text},1,1]" if field == "grid" else text
    args = f'"{field}":{ws}{value}{ws}' if field not in ("pid", "tid") else '"device":0'
    top = f'"{field}":{ws}{value}{ws},' if field in ("pid", "tid") else ""
    data = f'[{{"ph":"X","cat":"kernel","name":"k",{top}"ts":1.5,"dur":2,"args":{{{args}}}}}]'.encode()
    check(data)


# Between JSON tokens: the four whitespace bytes JSON allows, in short and long runs (the
# scanner skips a lone space in one test and runs 16 bytes at a time), and bytes that only
# look like whitespace (other control characters, NBSP, NEL), which msgspec rejects.
_GAP = st.lists(st.sampled_from([" ", " ", "\n", "\r", "\t", " " * 15, " " * 17, "\n" + " " * 33,
                                 "\x0b", "\x0c", "\x00", "\u00a0", "\u0085"]), max_size=4).map("".join)


@needs_scanner
@settings(max_examples=400, deadline=None)
@given(st.lists(_GAP, min_size=42, max_size=42), st.sampled_from(["k", "x" * 30]))
def test_any_whitespace_between_tokens_is_declined_or_matches(gaps, name):
    # Where every gap is JSON whitespace both paths read the same row, and the scanner must
    # accept it (its fast path); where one holds a byte that is not, msgspec rejects the
    # chunk and the scanner must decline it (check asserts both).
    tokens = ["[", "{", '"ph"', ":", '"X"', ",", '"cat"', ":", '"kernel"', ",", '"name"', ":", f'"{name}"', ",",
              '"ts"', ":", "1.5", ",", '"dur"', ":", "2", ",", '"args"', ":", "{", '"device"', ":", "0", ",",
              '"grid"', ":", "[", "36", ",", "1", ",", "1", "]", "}", "}", "]"]
    assert len(tokens) + 1 == len(gaps)
    text = "".join(gap + tok for gap, tok in zip(gaps, tokens)) + gaps[-1]
    valid = all(set(gap) <= set(" \n\r\t") for gap in gaps)
    assert check(text.encode()) == valid


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=12))
def test_any_name_or_category_is_declined_or_matches(name, cat):
    doc = [{"ph": "X", "cat": cat or "kernel", "name": name, "pid": 0, "tid": 1, "ts": 1.5, "dur": 2,
            "args": {"device": 0, "stream": 7, "kind": name}},
           {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 1, "ts": 2, "dur": 1,
            "args": {"kind": name, "bytes": 8}}]
    for ascii_only in (True, False):
        check(json.dumps(doc, ensure_ascii=ascii_only).encode())


@needs_scanner
@pytest.mark.parametrize("text,reason", [
    ('[{"ph":"X","name":"a","ph":"X"}]', "duplicate ph"),
    ('[{"ph":"X","name":"a","args":{"device":0,"device":1}}]', "duplicate args key"),
    ('[{"ph":"X","na\\u006de":"a"}]', "escaped key"),
    ('[{"ph":"X","name":"a\\"b"}]', "escaped string"),
    ('[{"ph":"Q","name":"a"}]', "unknown ph"),
    ('[{"name":"a"}]', "event without ph"),
    ('[{"ph":"X","name":"a","args":{"grid":[1.5,1,1]}}]', "expected an integer"),
    ('[{"ph":"X","name":"a","args":{"kind":1e400}}]', "args.kind is a float"),
    ('[{"ph":"X","name":"a","ts":1e400}]', "float out of range"),
    ('[{"ph":"X","name":"a","pid":[1e400]}]', "number out of range"),
    ('[{"ph":"X","name":"a","args":{"grid":-1e400}}]', "number out of range"),
    ('[{"ph":"X","name":"a"},]', "array item is not an object"),
    ('[{"ph":"X","name":"a","x":"\\ud800"}]', "surrogate escape"),
    ('[{"ph":"X","name":"a","x":"\xff"}]', "invalid UTF-8"),
    ('[1]', "not an object"),
    ('[{"ph":"X","name":"a"}] x', "text after the array"),
])
def test_declines_with_a_reason(text, reason):
    # Each of these is either rejected by msgspec or has a shape whose meaning the Python
    # path owns: the scanner must hand it over, saying why and where.
    out = scan(text.encode("latin-1") if "\xff" in text else text.encode())
    assert isinstance(out, str) and reason in out and " at byte " in out
    check(text.encode("latin-1") if "\xff" in text else text.encode())


@needs_scanner
def test_irregular_ids_in_kept_rows_follow_the_python_rules():
    # roctracer writes runtime args as strings ("bytes": "9216", "stream": "0x0"). A kept
    # column holding one goes through the Python path's tolerant conversion as a whole:
    # "9216" is 9216; "0x0" is unreadable (-1) and sends its column through float64, so an
    # integer above 2**53 in another row of that column is rounded as that path rounds it.
    big = 2**53 + 1
    data = json.dumps([
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 851, "tid": 851, "ts": 1.5, "dur": 2,
         "args": {"correlation": 5, "bytes": "9216", "stream": "0x0", "kind": "1"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "Spans", "tid": 3, "ts": 4, "dur": 1,
         "args": {"correlation": 6, "bytes": 64, "stream": big, "device": 0}},
    ]).encode()
    assert check(data)  # accepted, and equal to the Python path
    res = scan_columns(data)
    assert res.cols["bytes"].tolist() == [9216, 64]
    assert res.cols["stream"].tolist() == [851, int(float(big))] and int(float(big)) != big  # runtime: the thread
    assert res.cols["device"].tolist() == [-1, 0]
    # The dropped Trace span's string pid/tid change nothing, and are accepted too.
    data = (b'[{"ph":"X","cat":"Trace","name":"t","pid":"Spans","tid":"PyTorch Profiler","ts":0,"dur":9},'
            b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"device":0}}]')
    assert check(data)


def _report(env_native: str, *paths: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "copyprof", "report", "--no-cache", "--format", "json", *paths],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "COPYPROF_NATIVE": env_native})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_scanner
@pytest.mark.slow
@pytest.mark.parametrize("case", ["h200-k3-c16-pair", "mi300x-roctracer-sample"])
def test_whole_report_is_the_same_with_the_scanner_off(case):
    # End to end, in fresh processes as a user runs them: an A/B pair of our H200 captures and
    # the MI300X roctracer sample (string args), with the scanner (default) and without it
    # (COPYPROF_NATIVE=0: every chunk through the Python path) give byte-identical JSON.
    if case == "h200-k3-c16-pair":
        args = [str(p) for p in sorted((REPO / "traces").glob("replica-kimi-k3-tp8-c16-cuda-graph-*-20261130T*"))]
        assert len(args) == 2
        args += ["--model", "kimi-k3"]
    else:
        sample = SAMPLES / "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"
        if not sample.is_file():
            pytest.skip(f"sample {sample.name} not found (../shared/sample_traces is not next to this checkout)")
        args = [str(sample)]
    assert _report("1", *args) == _report("0", *args)


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
    base = _kineto_like(_real_events(), layout)
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
    events = _real_events()
    for _ in range(300):
        evs = _retyped(events, rng)
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
        text = _kineto_like(_real_events(limit=12), layout)
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
    text = _kineto_like(_real_events(limit=8), "kineto")
    want = scan(text)
    assert not isinstance(want, str), want
    for shift in range(64):
        buf = bytearray(shift) + bytearray(text)
        results, _ = scan_in_every_mode(memoryview(buf)[shift:])
        assert_one_result(results, f"shifted by {shift}")
        assert next(iter(results.values())) == want
