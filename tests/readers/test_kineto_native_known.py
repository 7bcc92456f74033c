"""The native scanner's shortcut for Kineto's own key texts and separators (low_level/known_keys.h):
events in Kineto's exact layout, and variants that leave that layout at each point the shortcut
relies on, read alike by every path of the scanner and by the Python path.
"""
from __future__ import annotations

import json

import pytest

from tests.readers.native_cases import check, needs_scanner
from tests.readers.test_kineto_native_modes import (  # noqa: F401 - scan_in_every_mode: a fixture
    assert_one_result,
    exact_buffer,
    scan_in_every_mode,
)

# One kernel event as Kineto writes it: ", " and ",\n    " between an event's members, the
# args indented by 12 and ",      " before half of their members.
KERNEL = (
    '  {\n'
    '    "ph": "X", "cat": "kernel", "name": "void k<8>(int, float*)", "pid": 0, "tid": 7,\n'
    '    "ts": 5155789669013.731, "dur": 1.120,\n'
    '    "args": {\n'
    '            "queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": 30494,      '
    '"registers per thread": 32,      "shared memory": 0,      "blocks per SM": 0.272727,      '
    '"warps per SM": 1.090909,      "grid": [36, 1, 1],      "block": [128, 1, 1],      '
    '"est. achieved occupancy %": 2\n'
    '    }\n'
    '  }')
MEMCPY = (
    '  {\n'
    '    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,\n'
    '    "ts": 5155789669020.5, "dur": 3,\n'
    '    "args": {\n'
    '            "device": 0, "context": 1,      "stream": 7, "correlation": 30495,      "bytes": 4096, '
    '"memory bandwidth (GB/s)": 1.5\n'
    '    }\n'
    '  }')
RUNTIME = (
    '  {\n'
    '    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11,\n'
    '    "ts": 5155789669000.1, "dur": 4.2,\n'
    '    "args": {\n'
    '            "External id": 12,      "cbid": 211, "correlation": 30494\n'
    '    }\n'
    '  }')


def chunk(*events: str) -> bytes:
    return ("[\n" + ",\n".join(events) + "\n]").encode()


def plain() -> bytes:
    # The kernel repeated (so that the one-pass reader is past the chunk's first block and
    # well before its end), a memcpy and a runtime event among them.
    return chunk(*([KERNEL] * 6 + [MEMCPY, RUNTIME] + [KERNEL] * 6))


# Variants of the kernel's text: (old, new) replaced once, at each point the shortcut checks
# bytes: the key texts (another key, one of a known key's prefix or extension, another case,
# an escape), the ": " after them, the separators and the args' opening, the values (not
# numbers, damaged numbers), missing and duplicate members, another order.
VARIANTS = [
    ('"queued": 0', '"queue": 0'), ('"queued": 0', '"queuedd": 0'), ('"queued": 0', '"Queued": 0'),
    ('"device": 0', '"devic\\u0065": 0'), ('"device": 0', '"device" : 0'), ('"device": 0', '"device":0'),
    ('"device": 0', '"device":  0'), ('"device": 0', '"device":\t0'), ('"device": 0', '"devices": 0'),
    ('"stream": 7', '"stream": 7, "stream": 8'), ('"queued": 0', '"queued": 0, "queued": 1'),
    ('"correlation": 30494', '"correlation": 30494, "device": 1'),
    ('"registers per thread": 32', '"registers per thread ": 32'),
    ('"registers per thread": 32', '"registers per threa\\u0064": 32'),
    ('"est. achieved occupancy %": 2', '"est. achieved occupancy %%": 2'),
    ('"est. achieved occupancy %": 2', '"est. achieved occupancy": 2'),
    ('"est. achieved occupancy %": 2', '"est. achieved occupancy \u00e9": 2'),
    ('"est. achieved occupancy %": 2', '"est. achieved occupancy %": 2e400'),
    ('"shared memory": 0', '"shared memory": "0"'), ('"shared memory": 0', '"shared memory": null'),
    ('"shared memory": 0', '"shared memory": true'), ('"shared memory": 0', '"shared memory": [0, {"a": 1}]'),
    ('"shared memory": 0', '"shared memory": 00'), ('"shared memory": 0', '"shared memory": 1.'),
    ('"shared memory": 0', '"shared memory": -'), ('"shared memory": 0', '"shared memory": .5'),
    ('"blocks per SM": 0.272727', '"blocks per SM": 0.272727.1'),
    ('"blocks per SM": 0.272727', '"blocks per SM": 0.272727e'),
    ('"blocks per SM": 0.272727', '"blocks per SM": 1e400'),
    ('"blocks per SM": 0.272727', '"blocks per SM": 0x1'),
    ('"correlation": 30494', '"correlation": "30494"'), ('"correlation": 30494', '"correlation": 30494.0'),
    ('"correlation": 30494', '"correlation": 99999999999999999999'),
    ('"grid": [36, 1, 1]', '"grid": [36, 1]'), ('"grid": [36, 1, 1]', '"grid": "grid(36,)"'),
    ('1,      "stream"', '1,     "stream"'), ('1,      "stream"', '1,       "stream"'),
    ('1,      "stream"', '1,\t     "stream"'), ('1,      "stream"', '1,\n      "stream"'),
    ('1,      "stream"', '1      ,"stream"'), ('0, "device"', '0,"device"'), ('0, "device"', '0 , "device"'),
    ('"context": 1,      ', ''), ('"queued": 0, ', ''), ('"device": 0, ', ''),
    (',      "est. achieved occupancy %": 2', ''),
    ('"queued": 0, "device": 0', '"device": 0, "queued": 0'),
    ('"ph": "X", ', ''), ('"ph": "X"', '"ph": "X", "ph": "X"'), ('"ph": "X"', '"p\\u0068": "X"'),
    ('"ph": "X"', '"ph" : "X"'), ('"ph": "X", "cat": "kernel", ', '"cat": "kernel", "ph": "X", '),
    ('"name": "void', '"name" : "void'), ('"name": "void k<8>(int, float*)"', '"name": "void k\\u003c8>()"'),
    ('"pid": 0', '"pid": "0"'), ('"pid": 0', '"pid": 0, "pid": 0'), ('"tid": 7,\n    "ts"', '"tid": 7,\n   "ts"'),
    ('"tid": 7,\n    "ts"', '"tid": 7,\n     "ts"'), ('"tid": 7,\n    "ts"', '"tid": 7,\r\n    "ts"'),
    ('"tid": 7,\n    "ts"', '"tid": 7\n    ,"ts"'), ('"ts": 5155789669013.731', '"ts ": 5155789669013.731'),
    ('"dur": 1.120,\n    "args"', '"dur": 1.120,\n    "arg": {}, "args"'), ('"args": {', '"args" : {'),
    ('"args": {\n', '"args": null, "x": {\n'), ('"args": {', '"args": {"args": 1,'),
    ('{\n            "queued"', '{\n           "queued"'), ('{\n            "queued"', '{\n             "queued"'),
    ('{\n            "queued"', '{\n\t           "queued"'), ('{\n            "queued"', '{            "queued"'),
    ('{\n            "queued"', '{\r            "queued"'),
    ('{\n            "queued"', '{\n            }, "x": {"queued"'),
]


@needs_scanner
def test_kineto_layout_takes_the_shortcut_and_reads_alike(scan_in_every_mode):
    # The plain layout: every mode the same rows, all but the last events read in one pass,
    # and the same columns as the Python path.
    data = plain()
    results, fast_read = scan_in_every_mode(data)
    assert_one_result(results, "kineto layout")
    n = len(json.loads(data))
    assert all(count >= n - 2 for mode, count in fast_read.items() if mode[1]), fast_read
    assert check(data)


@needs_scanner
@pytest.mark.parametrize(("old", "new"), VARIANTS, ids=[repr(v[1])[:40] for v in VARIANTS])
def test_kineto_layout_variants_read_alike(old, new, scan_in_every_mode):
    # Each variant in the middle of the chunk and in its last event (near the end, where the
    # one-pass reader stops): every mode gives one result, and native and Python paths the
    # same columns or the same refusal of damaged JSON.
    assert old in KERNEL
    changed = KERNEL.replace(old, new, 1)
    for data in (chunk(*([KERNEL] * 4 + [changed] + [KERNEL] * 4)), chunk(KERNEL, MEMCPY, changed)):
        results, _ = scan_in_every_mode(data)
        assert_one_result(results, f"{new!r}")
        check(data)


@needs_scanner
def test_kineto_layout_cut_at_every_length(scan_in_every_mode):
    # The key and separator compares read 32 and 8 bytes from a key's quote: cut the layout
    # at every length over its last events, so that each key and separator lies at every
    # distance from the buffer's end, and compare the modes (exact buffers: under ASan or
    # valgrind a read past the end shows).
    text = plain()
    start = len(text) - len(KERNEL) * 2 - 200
    for n in range(start, len(text) + 1):
        results, _ = scan_in_every_mode(exact_buffer(text[:n]))
        assert_one_result(results, f"cut at {n}")
