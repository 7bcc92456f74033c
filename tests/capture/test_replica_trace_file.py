"""The replica's trace writer: kineto's plain JSON, compressed by ISA-L into the name vLLM's workers use.

What it expects: the ``.json.gz`` holds exactly the bytes the profiler exported, under
``rank0.<ns>.pt.trace.json.gz``, with no plain JSON or partial file left beside it; and when the
compression fails (a full disk), the exported JSON stays where it was written, readable, and no
``.gz`` or partial file is left to be mistaken for a trace. A stand-in profiler object does the
export (the real one is exercised by tests/capture/test_replica.py's CPU captures)."""
from __future__ import annotations

import errno
import gzip
import json
from pathlib import Path

import pytest

from copyprof.capture.replica import trace_file
from copyprof.capture.replica.trace_file import export_trace

# larger than one compression block, so the copy loops
TRACE = json.dumps({"traceEvents": [{"ph": "X", "name": f"aten::copy_ {i}", "ts": i, "dur": 1}
                                    for i in range(40_000)]}).encode()


class _Profiler:
    def __init__(self) -> None:
        self.exported: list[str] = []

    def export_chrome_trace(self, path: str) -> None:
        assert path.endswith(".pt.trace.json"), path  # plain JSON: kineto does no compression itself
        Path(path).write_bytes(TRACE)
        self.exported.append(path)


def test_the_gzip_file_holds_the_exported_json_and_nothing_else_is_left(tmp_path: Path) -> None:
    assert len(TRACE) > trace_file.BLOCK
    path = export_trace(_Profiler(), tmp_path)
    assert path.parent == tmp_path and path.name.startswith("rank0.") and path.name.endswith(".pt.trace.json.gz")
    assert gzip.decompress(path.read_bytes()) == TRACE
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_failed_compression_keeps_the_plain_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = trace_file.igzip.open

    class _Full:
        """The gzip file of a disk that fills after the first block."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            self._fh = real_open(*args, **kwargs)
            self._blocks = 0

        def write(self, data: bytes) -> int:
            self._blocks += 1
            if self._blocks > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._fh.write(data)

        def __enter__(self) -> _Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self._fh.close()

    monkeypatch.setattr(trace_file.igzip, "open", _Full)
    prof = _Profiler()
    with pytest.raises(OSError, match="No space left"):
        export_trace(prof, tmp_path)
    [exported] = prof.exported
    assert [p.name for p in tmp_path.iterdir()] == [Path(exported).name]
    assert Path(exported).read_bytes() == TRACE
