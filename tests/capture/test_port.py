"""The server's port: drawn at random, and a /health answer counts only from the server copyprof
started (copyprof/capture/vllm/port.py says why: two runs on one host were given the same port,
and one run's boot was answered by the other's server)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from copyprof.capture.vllm.port import free_loopback_port, listener_is_in_group
from copyprof.capture.vllm.server import ServerProcess
from copyprof.errors import CopyprofError

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

_LISTEN = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
           "print('up', flush=True); time.sleep(60)")


def test_ports_are_drawn_at_random_and_are_free() -> None:
    ports = {free_loopback_port() for _ in range(20)}
    assert len(ports) >= 19  # bind(0) gave the same port twice in a row; 20 random draws of ~28,000 rarely do
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when drawn (nothing else here binds them)


@pytest.fixture
def other_listener() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """A process in a session of its own listening on a port, as another run's server would."""
    port = free_loopback_port()
    proc = subprocess.Popen([sys.executable, "-c", _LISTEN, str(port)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    yield port, proc
    proc.kill()
    proc.wait()


def test_the_listener_is_found_in_its_own_group_only(other_listener) -> None:
    port, proc = other_listener
    assert listener_is_in_group(port, proc.pid) is True
    assert listener_is_in_group(port, os.getpgrp()) is False
    assert listener_is_in_group(free_loopback_port(), proc.pid) is None  # nobody listens there: cannot say


def test_a_health_answer_from_another_server_is_not_a_boot(tmp_path: Path) -> None:
    # Another program (here: this test process) answers /health on the port; the server copyprof
    # started (a sleeper in its own session) never binds it.
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=other.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = other.server_address[1]
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                           tmp_path / "server.log", port)
    server.start()
    try:
        with pytest.raises(CopyprofError, match=f"127.0.0.1:{port} answers GET /health, but the process listening "
                                                "there is not the server copyprof started"):
            server.wait_healthy(30.0)
    finally:
        server.stop(graceful_s=5.0)
        other.shutdown()
        other.server_close()
