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
from copyprof.readers.kineto.native import ROW, native_available, scan_columns
from tests.fuzz.mutate import BYTE_OPS, byte_op
from tests.readers.native_cases import (
    REPO,
    SAMPLES,
    check,
    chunks,
    needs_scanner,
    real_events,
    real_traces,
    retyped,
    scan,
)


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
