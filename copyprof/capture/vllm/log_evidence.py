"""What a vLLM server's log says when copyprof fails a capture: its tail (as a whole or cut at a
byte offset, so what the server said before copyprof stopped it stays apart from what the stop
made it print), quoted under copyprof's one error, and the first error line or native crash, the
root cause that is usually far above the tail."""
from __future__ import annotations

import os
import re
from collections import deque
from pathlib import Path

LOG_TAIL_LINES = 30


def quote_log(lines: list[str]) -> str:
    """Log lines as quoted under a copyprof error: indented, so the server's own tracebacks and
    error lines (the evidence a user needs) cannot be mistaken for copyprof's."""
    return "\n".join(f"    {line}" for line in lines)


def log_size(path: Path) -> int:
    """A log's size now, in bytes (0 when it is not there yet): a mark for log_tail's ``start``/``end``."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, start: int = 0, end: int | None = None) -> list[str]:
    """The last ``lines`` lines of a log between byte offsets ``start`` and ``end`` (default: its end),
    decoded leniently: vLLM logs may hold any bytes. The offsets let a failure's record keep what
    the server said before copyprof stopped it apart from what the stop itself made it print."""
    try:
        with open(path, "rb") as fh:
            stop = fh.seek(0, os.SEEK_END) if end is None else end
            first = max(start, stop - 256 * 1024)
            fh.seek(first)
            data = fh.read(max(0, stop - first)).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return list(deque((ln.rstrip("\r") for ln in data.split("\n") if ln.strip()), maxlen=lines))


_ERROR_LINE = re.compile(r"\b[A-Z]\w*(Error|Exception): ")
_NOT_AN_ERROR = re.compile(r"\b(WARNING|INFO|DEBUG)\b")  # a log line that merely mentions an error
# A process that died in native code: torch's handler prints "!!!!!!! Segfault encountered !!!!!!!"
# and the C frames below it (seen: vLLM 0.32's CPU worker, in kineto's transferCpuTrace as its
# profiler stopped); CPython's faulthandler prints "Fatal Python error: Segmentation fault".
_CRASH_LINE = re.compile(r"Segfault encountered|Fatal Python error|Segmentation fault")
_CRASH_FRAMES = 3  # the frames after the marker: where it crashed (the marker alone says nothing)


def first_error_line(path: Path) -> str | None:
    """The first ``SomethingError: ...`` line of a log, or the first native crash with the frames
    under it: usually the root cause, far above the tail (a crashed worker's server shuts down
    with errors of its own, e.g. ``RuntimeError: cancelled``)."""
    try:
        with open(path, "rb") as fh:
            crash: list[str] = []
            for raw in fh:
                line = raw.decode("utf-8", "replace").strip()
                if crash:
                    if line and not line.startswith(("!", "File \"./signal/", "File \"<unknown>\", line 0, in 0x")):
                        crash.append(line)
                    if len(crash) > _CRASH_FRAMES:
                        break
                elif _CRASH_LINE.search(line):
                    crash = [line.strip("! ")]
                elif _ERROR_LINE.search(line) and not _NOT_AN_ERROR.search(line):
                    return line[:500]
            if crash:
                return " | ".join(crash)[:500]
    except FileNotFoundError:
        pass
    return None
