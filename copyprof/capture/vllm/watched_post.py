"""A POST to the vLLM server that watches the server while the answer is awaited.

Why a module of its own: a request the engine was handling when it died is never answered
(vLLM 0.32 keeps the connection open), so every POST of a capture (warm-up, start and stop of
the profile window) runs in a thread while the server and its engine processes are checked;
a death ends the wait with its cause, and a broken connection is explained by the server's
exit when that is the cause.
"""
from __future__ import annotations

import http.client
import threading
from typing import Any

from copyprof.capture.vllm.client import post_json
from copyprof.capture.vllm.server import ServerProcess
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError


def post_watched(server: ServerProcess, path: str, body: dict[str, Any] | None, timeout_s: float,
          what: str) -> tuple[int, bytes]:
    """POST to the server, watching it while the answer is awaited; a broken connection is
    explained by the server's exit when that is the cause.

    Why a watch: a request the engine was handling when it died is never answered (vLLM 0.32
    keeps the connection open), so a plain blocking POST waited out its whole timeout before
    anyone looked at the server. The request runs in a thread; every 0.2 s the server and its
    engine processes are checked, and a death ends the wait with its cause."""
    answer: list[tuple[int, bytes] | BaseException] = []

    def ask() -> None:
        try:
            answer.append(post_json(server.port, path, body, timeout_s))
        except BaseException as exc:  # handed to the waiting thread, which raises or explains it
            answer.append(exc)

    asking = threading.Thread(target=ask, name=f"copyprof POST {path}", daemon=True)
    asking.start()
    while True:
        asking.join(0.2)
        if not asking.is_alive():
            break
        server.check_alive(what)
    got = answer[0]
    if isinstance(got, (OSError, http.client.HTTPException)):
        server.check_alive(what, grace_s=2.0)  # the usual cause: the server died; say so, with its log
        raise CopyprofError(f"POST {path} failed during {what}: {type(got).__name__}: {got}",
                            exit_code=EXIT_CAPTURE_FAILED) from got
    if isinstance(got, BaseException):
        raise got
    return got
