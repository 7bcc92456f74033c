"""The native Kineto scanner against the Python path it stands in for.

The contract (copyprof/readers/kineto/low_level/scan.c): for any chunk, the scanner either declines
(returns a reason and the Python path decodes the chunk) or returns exactly the columns the
Python path gives. These tests hold it to that on real traces (where it must not decline:
that is the fast path users get), on damaged and retyped copies of real events, and on
generated numbers and strings, and check that it declines whatever msgspec rejects.
"""
from __future__ import annotations

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

from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto
from copyprof.readers.kineto.chunk import CATMAP, ChunkResult
from copyprof.readers.kineto.columns import decode_chunk
from copyprof.readers.kineto.native import ROW, native_available, scan_columns
from tests.fuzz.mutate import BYTE_OPS, byte_op
from tests.readers.native_cases import (
    REPO,
    SAMPLES,
    TYPE_EDGES,
    chunks,
    kept_rule_events,
    needs_scanner,
    real_events,
    real_traces,
    retyped,
    scan,
)


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
    assert got.rank_counts.keys() == want.rank_counts.keys()
    for key, counts in want.rank_counts.items():
        assert np.array_equal(got.rank_counts[key], counts), key
    assert list(got.shapes.items()) == list(want.shapes.items())


def check(data: bytes) -> bool:
    """Native and Python paths agree on ``data``; True when the scanner accepted it. Where
    it did, the scanner's C twin of chunk.py's rules (low_level/kept.h) and those rules in
    numpy give the same chunk too."""
    want = python_path(data)
    got = scan_columns(data)
    if want is None:  # malformed JSON: the scanner must not accept what msgspec rejects
        assert isinstance(got, str), data[:200]
        return False
    if isinstance(got, str):
        assert " at byte " in got or "kept event" in got  # a one-line reason
        return False
    assert_same(got, want)
    assert_same(scan_columns(data, finish_in_c=False), got)
    return True


def finished_in_c(data: bytes) -> bool:
    """Whether the scanner's C twin (kept.h) made the chunk's columns, not the numpy rules."""
    scanned = scan(data)
    facts = [CATMAP(c) for c in scanned[3]] + [(-1, False)]
    return kineto_native._kept_columns(data, scanned, facts) is not None


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


def _dumps(events: list[dict], rng: random.Random) -> bytes:
    indent = rng.choice((None, None, 1, 4))
    return json.dumps(events, indent=indent, ensure_ascii=rng.random() < 0.5).encode()


@needs_scanner
def test_byte_damage_is_declined_or_matches():
    # Random byte damage of real events: either both paths agree, or the scanner declines;
    # where msgspec rejects the bytes as JSON, the scanner must decline (checked in `check`).
    rng = random.Random(7)
    events = real_events()
    base = _dumps(events, rng)
    accepted = 0
    for i in range(600):
        data = byte_op(base, BYTE_OPS[i % len(BYTE_OPS)], rng)
        accepted += check(data)
    assert accepted > 20  # some damage leaves valid JSON (inside strings, digits): compared


@needs_scanner
def test_retyped_fields_are_declined_or_match():
    # One field of one event replaced by an odd value (null, bool, huge int, NaN, numeric
    # string, array, object, long or non-UTF-8-looking string...): the shapes the Python path
    # has tolerant rules for. Most must still be accepted and match (odd values in rows the
    # reader drops, for instance).
    rng = random.Random(11)
    events = real_events()
    accepted = 0
    for _ in range(800):
        evs = retyped(events, rng)
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


@needs_scanner
def test_the_c_columns_follow_chunk_rules_at_their_edges():
    # The scanner's C twin of chunk.py's rules (low_level/kept.h) takes these chunks and gives
    # the Python path's columns, dtypes, names, counts and shapes (check), whichever events
    # are there and in whatever order: names first seen on dropped or bad rows, all rows
    # bad, none kept, nothing at all.
    rng = random.Random(5)
    events = kept_rule_events()
    cases = [events, events[::-1], [], events[:2], [events[10], events[11]], [events[1]]]
    cases += [rng.sample(events, rng.randrange(1, len(events))) for _ in range(60)]
    for evs in cases:
        data = json.dumps(evs).encode()
        assert finished_in_c(data), evs
        assert check(data), evs


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(TYPE_EDGES), st.integers(-2**63, 2**63 - 1)), min_size=12, max_size=12),
       st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0005, 0.0015, -0.0025])),
                min_size=2, max_size=2))
def test_any_ids_and_times_give_the_same_c_columns(ids, times):
    # Every narrowed column at and beyond each type's edge, any ts and dur: the C twin's
    # derivations, int32 casts, rint and narrowing against chunk.py's.
    fields = ("device", "fromDevice", "stream", "correlation", "External id", "external id", "bytes", "size",
              "graph id", "graph node id")
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": ids[10], "tid": ids[11], "ts": times[0],
              "dur": times[1], "args": {**dict(zip(fields, ids)), "grid": ids[:3], "block": ids[3:6]}}
    runtime = {**kernel, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1.5, "dur": 2.0}
    data = json.dumps([kernel, runtime]).encode()
    if check(data):
        assert finished_in_c(data)


@needs_scanner
@pytest.mark.parametrize("change", ["rank", "rank on a dropped row", "rank pid", "string id", "string ts"])
def test_chunks_the_c_twin_leaves_to_numpy_match(change):
    # Rank marks (per-rank counts) and irregular values in kept rows (the Python path's
    # tolerant conversions) are assembled by chunk.py's rules in numpy; the result is the
    # same either way, and a dropped row's irregular value leaves the chunk to the twin.
    events = kept_rule_events()
    if change == "rank":
        events[3]["args"]["rank"] = 2
    elif change == "rank on a dropped row":
        events[1]["args"] = {"rank": 1}
    elif change == "rank pid":
        events[1]["pid"] = "[TP01-DP00] 1234"
    elif change == "string id":
        events[5]["args"]["bytes"] = "9216"
    else:
        events[4]["ts"] = "3.5"
    data = json.dumps(events).encode()
    assert not finished_in_c(data)
    assert check(data)
    events[0]["args"]["bytes"] = "9216"  # a dropped cpu_op's odd value: the twin could take that one
    assert check(json.dumps(events).encode())
    events = kept_rule_events()
    events[0]["args"]["bytes"] = "9216"
    events[1]["pid"] = "Spans"
    assert finished_in_c(json.dumps(events).encode())


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
