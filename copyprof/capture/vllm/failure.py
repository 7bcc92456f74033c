"""The failure record of a capture: stop what runs, keep every file, say in run.json what happened.

Why a module of its own: whatever stage fails (or is interrupted by Ctrl-C), the same cleanup
follows, and it must finish: the streams are cancelled, the server group stopped, the server
log's tail at the failure kept apart from what it printed while being stopped, the partial
client metrics written, and run.json told the failed stage and what is usable. The stages in
run.py hand the exception here and raise what it returns.
"""
from __future__ import annotations

from typing import Any

from copyprof.capture.vllm.drain import close_streams
from copyprof.capture.vllm.log_evidence import log_size, log_tail
from copyprof.capture.vllm.progress import Capture, rel_files, window_json, write_metrics
from copyprof.capture.vllm.server import SERVER_LOG, ctrl_c_hurries
from copyprof.capture.vllm.server_log import engine_facts
from copyprof.capture.vllm.traces import describe_usable
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError
from copyprof.rundir.layout import failed_status, update_run_json, utc_now_iso

DEAD_ENGINE_STOP_S = 5.0  # a stop's grace per signal once an engine process of the server has died


def record_failure(run: Capture, why: str) -> str | None:
    """Stop the streams and the server group, then say in run.json what happened and what is usable.

    Every step is best effort and none can abort the others: a further Ctrl-C only makes the
    server stop escalate sooner (ctrl_c_hurries), and a full disk costs the client metrics or
    the run.json update, never the stop. Returns why run.json could not be updated, if so.
    """
    run_dir, server, cohort = run.run_dir, run.server, run.cohort
    fields: dict[str, Any] = {"status": failed_status(why), "failed_stage": run.stage_now, "finished": utc_now_iso()}
    problems: list[str] = []
    log = run_dir / SERVER_LOG
    at_failure = log_size(log)  # what the server said until now is the evidence; the stop's noise is apart
    with ctrl_c_hurries(server.hurry if server is not None else lambda: None) as presses:
        if cohort is not None:
            close_streams(cohort, server, join_s=5.0)
        if server is not None:
            # With its engine dead the server has nothing left to finish or write (a killed process
            # writes no trace), and vLLM 0.32's HTTP server then waits for the dead engine's requests
            # through SIGINT and SIGTERM: do not wait out 30 s for each.
            grace = DEAD_ENGINE_STOP_S if server.engine_died else 30.0
            fields["server_stop"] = server.stop(graceful_s=grace, term_s=min(grace, 30.0))
            fields["server_exit_code"] = server.exit_code
        if run.window is not None:
            fields["window"] = run.window
        fields["vllm_engine"] = engine_facts(log)
        fields["error_log_tail"] = log_tail(log, end=at_failure)
        fields["stop_log_tail"] = log_tail(log, start=at_failure)
        try:
            write_metrics(run_dir, cohort, {"window": window_json(run.window), "partial": True})
        except CopyprofError as exc:
            problems.append(str(exc))
        fields["files"] = rel_files(run_dir)
        try:
            fields["usable"] = describe_usable(run_dir, run.trace_dir)
        except OSError as exc:  # an unreadable trace folder must not hide the failure being recorded
            problems.append(f"could not list what is usable: {exc}")
        if pressed := (server.hurries if server is not None else len(presses)):
            problems.append(f"Ctrl-C pressed {pressed} more time(s) during cleanup: the server stop was hurried")
        if problems:
            fields["cleanup_problems"] = problems
        try:
            update_run_json(run_dir, **fields)
        except CopyprofError as exc:
            return str(exc)
    return None


def failure(run: Capture, exc: BaseException) -> BaseException:
    """Record ``exc`` in run.json and return the error to raise: one line, exit code 3 once a server ran."""
    err: BaseException = exc
    if isinstance(exc, OSError):  # a write or a connection not explained above: still one line, exit 3
        err = CopyprofError(f"{run.stage_now}: {type(exc).__name__}: {exc}", exit_code=EXIT_CAPTURE_FAILED)
    why = ("interrupted (Ctrl-C); server stopped, files kept" if isinstance(exc, KeyboardInterrupt)
           else (str(err).splitlines() or [type(err).__name__])[0])
    unrecorded = record_failure(run, why)
    if isinstance(err, CopyprofError):
        if err.exit_code != EXIT_CAPTURE_FAILED and run.server is not None:
            err.exit_code = EXIT_CAPTURE_FAILED
        if unrecorded and "run.json" not in str(err):
            err.args = (f"{err}; and run.json could not be updated: {unrecorded}",)
    return err
