"""What the reader property tests share: the input strategies, the contract, and the tally.

The inputs are *mostly valid*: real-shaped files (every cell in its domain: large clocks, zero
durations, any printable name, duplicates, any order) with a few cells, fields or events
damaged (wrong types, huge or negative numbers, NaN, empty strings, non-UTF-8 bytes). So each
property is checked on files a reader must accept, and the damage handling on files close to
those. Each test tallies its examples: a reader must accept at least MIN_ACCEPTED of them (one
that refuses everything fails), and every refusal must be exactly one line naming the file.
"""
from __future__ import annotations

import functools
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from copyprof.analysis.report import analyze_run
from copyprof.analysis.inspect.summary import summarize
from copyprof.errors import CopyprofError
from copyprof.events import CLOCK_COLUMNS, COLUMNS, INT_COLUMNS, Trace, compact_ints

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
MIN_ACCEPTED = 0.5  # share of a test's examples that must be read (observed: 0.90-1.00 of 60)
MIN_EXAMPLES = 40
MIN_EXACT = 10  # undamaged examples per test whose every row is checked
NON_UTF8 = "\udcff\udcfe"  # written with surrogateescape: raw 0xff 0xfe bytes in the file

weird_int = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63)]))
weird_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([1e308, -1e308, 1e19, 9.3e15, -0.0]))  # ns beyond int64 once x1000
weird_text = st.one_of(st.text(max_size=12), st.sampled_from(["", "nan", "12", "1e400", "../../evil", NON_UTF8]))
weird = st.one_of(st.none(), st.booleans(), weird_int, weird_float, weird_text, st.lists(weird_int, max_size=4))
weird_cell = st.one_of(weird_int.map(str), weird_float.map(str), weird_text, st.sampled_from(["Agent 2", "GPU 0"]))
# A kernel or annotation name as a profiler writes it: printable text, commas and quotes included.
name_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=24)
# About 40 % of the files are left undamaged (their exact expectations are checked), the rest get
# the damage drawn for them.
UNDAMAGED = st.integers(0, 9).map(lambda k: k < 4)
# Where damage goes: (row, column, value) with row/column taken modulo the table's shape; most
# files get none or one.
damage = st.lists(st.tuples(st.integers(0, 999), st.integers(0, 99), weird_cell), min_size=1, max_size=2)


def bounded(test: Callable[..., None]) -> Callable[..., None]:
    """A hang fails the example (30 s) instead of stalling CI."""
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        def boom(signum: int, frame: Any) -> None:
            raise TimeoutError("reader still running after 30 s")
        old = signal.signal(signal.SIGALRM, boom)
        signal.alarm(30)
        try:
            test(*args, **kwargs)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    return run


def fresh(tmp_path: Path) -> Path:
    """A new folder per hypothesis example (tmp_path is shared by all examples of a test)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def apply_damage(rows: list[list[str]], hits: list[tuple[int, int, str]]) -> list[list[str]]:
    out = [list(r) for r in rows]
    for r, c, value in hits:
        if out:
            row = out[r % len(out)]
            row[c % len(row)] = value
    return out


def check_contract(traces: list[Trace]) -> None:
    for t in traces:
        ev = t.events
        assert list(ev.columns) == list(COLUMNS)
        for col, dtype in INT_COLUMNS.items():  # the clock int64; the rest compacted (events.py)
            if col in CLOCK_COLUMNS:
                assert ev[col].dtype == np.dtype(dtype), col
            else:
                assert ev[col].dtype == compact_ints(ev[col].to_numpy()).dtype, col
                assert ev[col].dtype.kind == "i" and ev[col].dtype.itemsize <= np.dtype(dtype).itemsize, col
        assert (ev["dur_ns"] >= 0).all()
        assert ((ev["bytes"] < 0) == (ev["bytes_src"] == "none")).all()
        assert all(v >= 0 for v in t.meta.kind_counts.values())
        summarize(t)


def assert_one_line_naming(exc: CopyprofError, path: str) -> None:
    """copyprof's refusal: one non-empty line that names the file (the CLI prints it as is)."""
    msg = str(exc)
    assert msg.strip() and len(msg.splitlines()) == 1, f"not exactly one line: {msg!r}"
    assert "Traceback" not in msg, msg
    assert path in msg, f"does not name {path}: {msg!r}"


class Tally:
    """Accepted and refused examples of one property test."""

    def __init__(self) -> None:
        self.accepted = 0
        self.exact = 0  # undamaged examples whose exact expectations (nothing lost) were checked
        self.refused: list[str] = []

    def read(self, reader: Callable[[Any], list[Trace]], arg: Any, path: str) -> list[Trace] | None:
        """Reader + summary + report analysis; None when the reader refused (in one line)."""
        try:
            traces = reader(arg)
        except CopyprofError as exc:
            assert_one_line_naming(exc, path)
            self.refused.append(str(exc).replace(path, "<file>"))
            return None
        self.accepted += 1
        check_contract(traces)
        try:
            analyze_run(traces, path, None)
        except CopyprofError as exc:
            assert_one_line_naming(exc, path)
        return traces

    def check(self, min_share: float = MIN_ACCEPTED) -> None:
        total = self.accepted + len(self.refused)
        assert total >= MIN_EXAMPLES, f"only {total} examples ran"
        first = sorted(set(self.refused))[:3]
        assert self.accepted >= min_share * total, (
            f"{self.accepted} of {total} examples read (need {min_share:.0%}); refusals such as {first}")
        assert self.exact >= MIN_EXACT, f"only {self.exact} undamaged examples reached the exact checks"
