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

from copyprof.capture.vllm import port as port_module
from copyprof.capture.vllm.port import listener_is_in_group, reserve_loopback_port
from copyprof.capture.vllm.server import ServerProcess
from copyprof.errors import CopyprofError

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

_LISTEN = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
           "print('up', flush=True); time.sleep(60)")


def test_ports_are_drawn_at_random_and_are_free() -> None:
    held = [reserve_loopback_port() for _ in range(20)]
    ports = {r.port for r in held}
    assert len(ports) == 20  # each held against the others
    for r in held:
        with socket.socket() as s:
            s.bind(("127.0.0.1", r.port))  # free when drawn (nothing else here binds them)
        r.release()


def test_ports_are_drawn_where_the_kernel_never_assigns_one_by_itself() -> None:
    # Outgoing connections and bind(0) take their local ports from ip_local_port_range: a port
    # drawn there can be taken before vLLM binds it. Linux's default range leaves 10000-32767.
    assert port_module.draw_range((32768, 60999)) == (10000, 32767)
    assert port_module.draw_range((5000, 60000)) == (60001, 65535)  # too few below: above it
    assert port_module.draw_range((1024, 65535)) == (1024, 65535)  # nothing outside: inside it
    lo, hi = port_module._ephemeral_range()
    expected = port_module.draw_range((lo, hi))
    if expected != (lo, hi):
        held = [reserve_loopback_port() for _ in range(20)]
        assert all(expected[0] <= r.port <= expected[1] and not lo <= r.port <= hi for r in held)
        for r in held:
            r.release()


def test_a_port_another_copyprof_holds_is_not_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    first = reserve_loopback_port()
    # Every draw now gives that one port: held (by another descriptor, as another process holds
    # it), it is passed over each time, and given once it is released.
    monkeypatch.setattr(port_module, "draw_range", lambda ephemeral: (first.port, first.port))
    with pytest.raises(CopyprofError, match="no free loopback port in 8 random draws"):
        reserve_loopback_port(attempts=8)
    first.release()
    again = reserve_loopback_port(attempts=8)
    assert again.port == first.port
    again.release()


@pytest.fixture
def other_listener() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """A process in a session of its own listening on a port, as another run's server would."""
    reserved = reserve_loopback_port()
    port = reserved.port
    reserved.release()
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
    nobody = reserve_loopback_port()
    assert listener_is_in_group(nobody.port, proc.pid) is None  # nobody listens there: cannot say
    nobody.release()


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
