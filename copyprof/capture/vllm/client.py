"""The fixed-cohort workload: token-ID prompts, one streaming request per thread, per-token timing.

Why token IDs and a hand-rolled client: a config-only model directory (``--dummy``) has no
tokenizer, and bench clients need one; token IDs also make the prompt lengths exact, so the
prefix-cache hit and the cohort's decode shape are what the user asked for. The client is stdlib
``http.client`` to 127.0.0.1 only (copyprof talks to nothing but the server it started).

Timing: each stream records ``time.perf_counter()`` at send, at each chunk that carries tokens,
and the number of tokens in that chunk (``token_ids`` when the server returns them, else the
growth of ``usage.completion_tokens`` with ``continuous_usage_stats``, else 1). TTFT = first
chunk - send; ITLs = gaps between chunks; TPOT = (last - first) / (tokens - 1).
"""
from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from copyprof.capture.vllm.command import SERVED_MODEL_NAME
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError
from copyprof.rundir.record import CLIENT_STALL_NOTE_S

TOKEN_LO = 1000  # stay clear of special/control tokens that sit at low ids in common vocabularies


def build_prompts(prefix_len: int, suffix_len: int, count: int, vocab_size: int | None, seed: int = 0
                  ) -> tuple[list[int], list[list[int]]]:
    """A shared prefix and ``count`` distinct suffixes (token ids), deterministic for a seed.

    Suffix *i* starts with a token unique to *i*, so no two prompts share a block beyond the
    prefix (the prefix cache then serves exactly the shared part). Ids are drawn from
    ``[TOKEN_LO, vocab_size - 1000)`` (or ``[0, vocab)`` for tiny vocabularies).
    """
    vocab = int(vocab_size or 32000)
    lo, hi = (TOKEN_LO, vocab - 1000) if vocab >= 4 * TOKEN_LO else (0, vocab)
    if hi - lo < count:
        raise CopyprofError(f"vocabulary of {vocab} tokens is too small for {count} distinct suffixes")
    rng = random.Random(seed)
    prefix = [rng.randrange(lo, hi) for _ in range(prefix_len)]
    suffixes = []
    for i in range(count):
        r = random.Random(seed * 1_000_003 + i + 1)
        suffixes.append([lo + i] + [r.randrange(lo, hi) for _ in range(suffix_len - 1)])
    return prefix, suffixes


def completion_body(prompt: list[int], max_tokens: int, stream: bool = True) -> dict[str, Any]:
    """``/v1/completions`` body: ignore_eos with min_tokens = max_tokens, greedy, ids back.

    Fields verified in vLLM 0.32.0 ``entrypoints/openai/completion/protocol.py`` (``ignore_eos``,
    ``min_tokens``, ``return_token_ids``); unknown fields are ignored by vLLM's
    ``OpenAIBaseModel`` (``extra="allow"``, logged at debug) so older servers accept the body.
    """
    body: dict[str, Any] = {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                            "min_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0,
                            "return_token_ids": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return body


def post_json(port: int, path: str, body: dict[str, Any] | None, timeout_s: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@dataclass
class StreamRecord:
    """One request's timeline (perf_counter seconds) and outcome."""

    index: int
    prompt_tokens: int
    sent: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    tokens: int = 0
    finished: bool = False
    cancelled: bool = False
    error: str | None = None

    def metrics(self) -> dict[str, Any]:
        t = self.chunk_times
        itls = [(b - a) * 1000.0 for a, b in zip(t, t[1:])]
        return {
            "index": self.index, "prompt_tokens": self.prompt_tokens, "output_tokens": self.tokens,
            "finished": self.finished, "cancelled": self.cancelled, "error": self.error,
            "ttft_ms": (t[0] - self.sent) * 1000.0 if t else None,
            "tpot_ms": (t[-1] - t[0]) * 1000.0 / (self.tokens - 1) if len(t) > 1 and self.tokens > 1 else None,
            "itl_ms": itls, "tokens_per_chunk": self.chunk_tokens,
        }


def ran_ahead(counts: list[int], max_tokens: int, window_tokens: int) -> int | None:
    """The stream that ran more than half of its spare tokens ahead of the last one, if any.

    Spare: what a stream may generate before the window and still cover it (``max_tokens -
    window_tokens``). Asked when the last stream gets its first token: a stream far ahead then
    was not admitted with the others; its client thread sent or read late, or the server took the
    requests in one by one (seen on a 2-core host short of CPU: one stream ran 3721 tokens while
    the other three sat in ``send``). Such a cohort may run out inside the window; sent again on
    an idle server, it usually starts together. Streams that are all far along together are not
    flagged: sending them again would not give them more room (a budget too small for the
    window is a ``--decode-tokens`` matter, said when the window runs out).
    """
    limit = max(1, (max_tokens - window_tokens) // 2)
    last = min(counts, default=0)
    ahead = [i for i, c in enumerate(counts) if c - last > limit]
    return max(ahead, key=lambda i: counts[i]) if ahead else None


class Cohort:
    """N concurrent streaming requests; the main thread watches their progress."""

    def __init__(self, port: int, prompts: list[list[int]], max_tokens: int, timeout_s: float) -> None:
        self.port = port
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.records = [StreamRecord(i, len(p)) for i, p in enumerate(prompts)]
        self._prompts = prompts
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._conns: list[http.client.HTTPConnection] = []
        self.longest_stall_s = 0.0  # the longest time copyprof's watch over the streams did not run

    def stall_note(self) -> str:
        """Why a stream may have run out although the budget looked ample: copyprof itself was not
        scheduled (seen on a loaded 2-core host: 17 s without a poll while vLLM decoded ~950 tokens/s)."""
        if self.longest_stall_s < CLIENT_STALL_NOTE_S:
            return ""
        return (f"; copyprof's watch over the streams did not run for {self.longest_stall_s:.1f} s while vLLM "
                "decoded on (a host short of CPU for the client)")

    def start(self) -> None:
        for rec, prompt in zip(self.records, self._prompts):
            th = threading.Thread(target=self._run, args=(rec, prompt), name=f"copyprof-req-{rec.index}", daemon=True)
            self._threads.append(th)
        for th in self._threads:  # started together: the cohort is admitted in one scheduler pass if it fits
            th.start()

    def _run(self, rec: StreamRecord, prompt: list[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        with self._lock:
            self._conns.append(conn)
        usage_seen = 0
        try:
            body = json.dumps(completion_body(prompt, self.max_tokens)).encode()
            rec.sent = time.perf_counter()
            conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {resp.read(2000).decode('utf-8', 'replace').strip()}"
                return
            while not self._cancel.is_set():
                raw = resp.readline()
                if not raw:
                    break
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    rec.finished = True
                    break
                now = time.perf_counter()
                chunk = json.loads(payload)
                if "error" in chunk:
                    rec.error = str(chunk["error"])[:500]
                    break
                n, usage_seen = _chunk_tokens(chunk, usage_seen)
                if n:
                    with self._lock:
                        rec.chunk_times.append(now)
                        rec.chunk_tokens.append(n)
                        rec.tokens += n
            if self._cancel.is_set() and not rec.finished:
                rec.cancelled = True  # closing the connection makes vLLM abort the request
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not self._cancel.is_set():
                rec.error = f"{type(exc).__name__}: {exc}"
            else:
                rec.cancelled = True
        finally:
            conn.close()

    def token_counts(self) -> list[int]:
        with self._lock:
            return [r.tokens for r in self.records]

    def errors(self) -> list[str]:
        return [f"request {r.index}: {r.error}" for r in self.records if r.error]

    def done(self) -> bool:
        return all(not th.is_alive() for th in self._threads)

    def wait_all_tokens(self, at_least: list[int] | int, timeout_s: float, what: str,
                        check: Any = None, interval_s: float = 0.05,
                        and_then: Callable[[], bool] | None = None) -> float:
        """Block until every stream has at least ``at_least`` tokens (per stream or one value) and,
        from then on, ``and_then()`` holds (asked only once the counts are there: it may cost the
        server a request). Returns the longest time this wait's polling did not run."""
        want = at_least if isinstance(at_least, list) else [at_least] * len(self.records)
        deadline = time.monotonic() + timeout_s
        polled = time.monotonic()
        longest = 0.0
        while True:
            now = time.monotonic()
            longest = max(longest, now - polled - interval_s)
            self.longest_stall_s = max(self.longest_stall_s, longest)
            polled = now
            counts = self.token_counts()
            if all(c >= w for c, w in zip(counts, want)) and (and_then is None or and_then()):
                return round(longest, 3)
            short = [r.index for r, c, w in zip(self.records, counts, want) if r.finished and c < w]
            if short:
                raise CopyprofError(f"request {short[0]} finished after {counts[short[0]]} tokens, before {what}; "
                                    f"raise --decode-tokens{self.stall_note()}", exit_code=EXIT_CAPTURE_FAILED)
            errs = self.errors()
            if (errs or self.done()) and check:
                check(grace_s=2.0)  # a broken stream usually means the server died: that error says why
            if errs:
                raise CopyprofError(f"a request failed while waiting for {what}: {errs[0]}",
                                    exit_code=EXIT_CAPTURE_FAILED)
            if self.done():
                raise CopyprofError(f"the streams ended before {what} (tokens per request: {counts})",
                                    exit_code=EXIT_CAPTURE_FAILED)
            if check:
                check()
            if time.monotonic() > deadline:
                after = "; the server's count of decoded tokens did not follow" if all(
                    c >= w for c, w in zip(counts, want)) else ""
                raise CopyprofError(f"timed out after {timeout_s:.0f} s waiting for {what} "
                                    f"(tokens per request: {counts}{after})", exit_code=EXIT_CAPTURE_FAILED)
            time.sleep(interval_s)

    def cancel(self, join_s: float = 30.0) -> None:
        """Stop every stream: the socket shutdown wakes a reader blocked between chunks."""
        self._cancel.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        deadline = time.monotonic() + join_s
        for th in self._threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def metrics(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.metrics() for r in self.records]


def _chunk_tokens(chunk: dict[str, Any], usage_seen: int) -> tuple[int, int]:
    """Tokens carried by one SSE chunk, and the running ``usage.completion_tokens``."""
    usage = chunk.get("usage") or {}
    total = usage.get("completion_tokens")
    choices = chunk.get("choices") or []
    if choices:
        ids = choices[0].get("token_ids")
        if isinstance(ids, list):
            return len(ids), (total if isinstance(total, int) else usage_seen + len(ids))
        if isinstance(total, int):
            return max(0, total - usage_seen), total
        return 1, usage_seen + 1
    return 0, (total if isinstance(total, int) else usage_seen)  # the final usage-only chunk
