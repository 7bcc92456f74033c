"""The native scanner's guess of a kernel's name from the name before it (low_level/name_guess.h):
names that recur in a cycle (the guess holds), and names that differ from the guess at its end,
by a byte more or less, by an escape or a non-ASCII byte, with closing quotes at every offset of
the 64-byte blocks the one-pass reader classifies; every mode of the scanner reads them alike,
and as the Python path does.
"""
from __future__ import annotations

import json

import pytest

from tests.readers.native_cases import check, needs_scanner
from tests.readers.test_kineto_native_known import KERNEL, chunk
from tests.readers.test_kineto_native_modes import (  # noqa: F401 - scan_in_every_mode: a fixture
    assert_one_result,
    exact_buffer,
    scan_in_every_mode,
)

NAME = "void k<8>(int, float*)"
assert f'"name": "{NAME}"' in KERNEL


def kernel(name: str) -> str:
    return KERNEL.replace(json.dumps(NAME), json.dumps(name, ensure_ascii=False) if "\\" not in name else f'"{name}"')


def cycle(names: list[str], rounds: int) -> list[str]:
    return [n for _ in range(rounds) for n in names]


def assert_read_alike(events: list[str], scan_in_every_mode, fast_at_least: int) -> bool:
    """Every mode reads the chunk alike, the one-pass reader at least fast_at_least events;
    whether the scanner took the chunk (then with the Python path's columns)."""
    data = chunk(*events)
    results, fast_read = scan_in_every_mode(data)
    assert_one_result(results, "names")
    exact, _ = scan_in_every_mode(exact_buffer(data))
    assert_one_result({**results, **{("exact",) + k: v for k, v in exact.items()}}, "names, exact buffer")
    assert all(count >= fast_at_least for mode, count in fast_read.items() if mode[1]), fast_read
    return check(data)


# Names sharing their first 32 bytes and more (as kernels' templates do), of lengths that put
# the closing quote at every offset of a 64-byte block, some long enough to span blocks.
PREFIX = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
NAMES = [PREFIX + "x" * k + ">" for k in range(0, 70, 3)] + ["short", "s", "", PREFIX[:31], PREFIX[:32], PREFIX[:33]]


@needs_scanner
def test_names_in_a_cycle_read_alike(scan_in_every_mode):
    # The cycle repeats, so from its second round on every guess holds; all but the chunk's
    # last events are read in one pass.
    events = [kernel(n) for n in cycle(NAMES, 4)]
    assert assert_read_alike(events, scan_in_every_mode, len(events) - 3)


# The guessed name (the one that followed last time) against what comes instead: a byte less
# or more at its end, another last byte, an escape or a non-ASCII byte where it ended or inside.
MISSES = [
    lambda n: n[:-1], lambda n: n + "y", lambda n: n[:-1] + "z", lambda n: n + "\\u0041", lambda n: n[:-1] + "\\n",
    lambda n: n + "\u00e9", lambda n: n[:5] + "\u00e9" + n[6:], lambda n: n[:10] + "\\t" + n[12:],
]


@needs_scanner
@pytest.mark.parametrize("miss", range(len(MISSES)))
@pytest.mark.parametrize("name", [NAMES[0], NAMES[-4], NAMES[10], NAMES[-7]])
def test_names_unlike_the_guess_read_alike(miss, name, scan_in_every_mode):
    # A cycle of two names learnt, then the second one changed where the guess expects it,
    # then the cycle again (the guess must not stick to the changed name's code).
    other = MISSES[miss](name)
    learnt = cycle(["first", name], 3)
    events = [kernel(n) for n in learnt + ["first", other] + learnt + ["first", other, "first"] + learnt]
    plain = all(0x20 <= ord(ch) < 0x7F and ch not in '"\\' for ch in other)
    escaped = "\\" in other  # the scanner declines an escaped name; a non-ASCII one its general reader reads
    assert assert_read_alike(events, scan_in_every_mode, len(events) - 3 if plain else 0) is not escaped
