"""The vLLM server child process: start in its own process group, wait for health, stop for sure.

Why this much care: a vLLM server is a tree (API process, engine core, one worker per TP rank,
and a profiler wrapper on top for rocprofv3/nsys) holding GPU memory. If copyprof died or was
interrupted and left it running, the next capture would fail or, worse, share the GPUs and
measure nonsense. So the server gets its own session (``start_new_session=True``: the terminal's
Ctrl-C does not reach it, copyprof decides), and stopping signals the whole group:
SIGINT (vLLM and nsys shut down cleanly and flush) -> SIGTERM -> SIGKILL, each with a timeout.
"""
from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

SERVER_LOG = "server.log"
LOG_TAIL_LINES = 30


def free_loopback_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (the OS picks it; a tiny race remains until vLLM binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log (decoded leniently: vLLM logs may hold any bytes)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return list(deque((ln.rstrip("\r") for ln in data.split("\n") if ln.strip()), maxlen=lines))


_ERROR_LINE = re.compile(r"\b[A-Z]\w*(Error|Exception): ")


def first_error_line(path: Path) -> str | None:
    """The first ``SomethingError: ...`` line of a log: usually the root cause, far above the tail."""
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                line = raw.decode("utf-8", "replace").strip()
                if _ERROR_LINE.search(line):
                    return line[:500]
    except FileNotFoundError:
        pass
    return None


class ServerProcess:
    """One server child; ``stop()`` is idempotent and safe to call from ``finally``."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, port: int) -> None:
        self.argv = list(argv)
        self.env = env
        self.log_path = Path(log_path)
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None
        self.stop_signal: str | None = None

    def start(self) -> None:
        # The log file is opened exclusively: a run directory is new, so an existing log would mean a bug.
        log = open(self.log_path, "xb")
        try:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except FileNotFoundError as exc:
            raise CopyprofError(f"cannot start the server: {exc.filename or self.argv[0]} not found",
                                exit_code=EXIT_CAPTURE_FAILED) from exc
        finally:
            log.close()  # the child has its own descriptor

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is not None:
            self.exit_code = code
        return code

    def tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return log_tail(self.log_path, lines)

    def check_alive(self, what: str) -> None:
        """Raise a capture error with the log tail (and the first error line) if the server has exited."""
        code = self.poll()
        if code is not None:
            tail = self.tail()
            cause = first_error_line(self.log_path)
            hint = f"\nfirst error in the log: {cause}" if cause and cause not in tail else ""
            raise CopyprofError(f"vLLM server exited with code {code} during {what}; last {len(tail)} lines of "
                                f"{self.log_path}:\n" + "\n".join(tail) + hint, exit_code=EXIT_CAPTURE_FAILED)

    def wait_healthy(self, timeout_s: float, on_tick: Callable[[str], None] | None = None,
                     interval_s: float = 1.0) -> float:
        """Poll ``GET /health`` until 200; return seconds waited. Fails fast if the server exits."""
        t0 = time.monotonic()
        while True:
            self.check_alive("boot")
            if health_ok(self.port):
                return time.monotonic() - t0
            waited = time.monotonic() - t0
            if waited > timeout_s:
                tail = self.tail()
                raise CopyprofError(f"timed out after {timeout_s:.0f} s waiting for the vLLM server to answer "
                                    f"GET /health on 127.0.0.1:{self.port}; last {len(tail)} lines of "
                                    f"{self.log_path}:\n" + "\n".join(tail), exit_code=EXIT_CAPTURE_FAILED)
            if on_tick:
                last = self.tail(1)
                on_tick(last[0] if last else "")
            time.sleep(interval_s)

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)  # the child leads its own session, so pgid == pid
        except ProcessLookupError:
            pass

    def _group_alive(self) -> bool:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _wait_group(self, timeout_s: float) -> bool:
        """Wait until the leader is reaped and no process of the group is left."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if self.exit_code is not None and not self._group_alive():
                return True
            time.sleep(0.2)
        self.poll()
        return self.exit_code is not None and not self._group_alive()

    def stop(self, graceful_s: float = 60.0, term_s: float = 30.0) -> str:
        """Stop the whole group; returns how: ``exited`` / ``SIGINT`` / ``SIGTERM`` / ``SIGKILL``."""
        if self.proc is None:
            return "not-started"
        if self.stop_signal is not None:
            return self.stop_signal
        if self.poll() is not None and not self._group_alive():
            self.stop_signal = "exited"
            return self.stop_signal
        for sig, wait_s in ((signal.SIGINT, graceful_s), (signal.SIGTERM, term_s), (signal.SIGKILL, 10.0)):
            self._signal_group(sig)
            if self._wait_group(wait_s):
                self.stop_signal = sig.name
                return self.stop_signal
        self.stop_signal = "SIGKILL (processes may remain)"
        return self.stop_signal


def health_ok(port: int, timeout_s: float = 5.0) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
