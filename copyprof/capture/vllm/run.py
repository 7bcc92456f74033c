"""One fixed-cohort, decode-only capture from a vLLM server, start to finish.

Sequence (each stage updates ``run.json`` so a crashed run still says how far it got):
probe the vLLM environment -> start the server (own process group, ``server.log``) -> wait for
``/health`` -> warm the prefix cache with one request -> send the cohort at once, streaming ->
when every stream has its first token (all prefills done, the batch is pure decode)
``POST /start_profile {"max_iterations": K}`` -> wait K+ tokens per stream ->
``POST /stop_profile`` -> wait until the trace files are complete -> cancel the streams, stop the
server -> ``client_metrics.json`` and ``status: complete``.

On any failure or Ctrl-C the server group is stopped, every file written so far is kept, and
``status`` becomes ``failed: <why>`` with the server log's tail at the failure in ``error_log_tail``
and what the server printed while copyprof stopped it in ``stop_log_tail``.
"""
from __future__ import annotations

import http.client
import json
import os
import platform
import shutil
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from copyprof import __version__
from copyprof.rundir.layout import (
    MODEL_CONFIG,
    STATUS_CAPTURING,
    STATUS_STARTING,
    failed_status,
    mark_complete,
    new_run_dir,
    update_run_json,
    utc_now_iso,
    write_error,
    write_run_json,
)
from copyprof.rundir.record import (
    AbTag,
    CohortRetry,
    Gpu,
    Model,
    RunRecord,
    Server,
    Torch,
    Vllm,
    Window,
    Workload,
    given,
)
from copyprof.capture.torch_backend import preflight, preflight_lines
from copyprof.capture.trace_check import check_capture
from copyprof.capture.vllm.client import (
    Cohort,
    build_prompts,
    completion_body,
    post_json,
    ran_ahead,
)
from copyprof.capture.vllm.command import (
    RunSpec,
    ServerCommand,
    build_server_command,
    is_cpu_backend,
    version_notes,
)
from copyprof.capture.vllm.probe import VllmInfo, kernel_env, probe_vllm
from copyprof.capture.vllm.server_log import engine_facts
from copyprof.capture.vllm.server import (
    SERVER_LOG,
    ServerProcess,
    ctrl_c_hurries,
    free_loopback_port,
    log_size,
    log_tail,
)
from copyprof.capture.vllm.traces import (
    describe_usable,
    list_files,
    nsys_export_sqlite,
    nsys_ready,
    rank_traces,
    rocprof_ready,
    torch_ready,
    wait_complete,
)
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

CLIENT_METRICS = "client_metrics.json"
HOOK_DIR = Path(__file__).resolve().parent / "rocprof_hook"
DEAD_ENGINE_STOP_S = 5.0  # a stop's grace per signal once an engine process of the server has died
COHORT_ATTEMPTS = 3  # a cohort whose requests did not start together is sent again, this many times in all


class Reporter(Protocol):
    def stage(self, name: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def info(self, text: str) -> None: ...


class QuietReporter:
    def stage(self, name: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def info(self, text: str) -> None: ...


@dataclass
class CaptureOptions:
    """How to run (not what to measure): environment, output, limits, provenance."""

    python: str
    out: str = "traces"
    label: str = "run"
    boot_timeout_s: float = 1800.0
    timeout_s: float = 1800.0
    seed: int = 0
    vocab_size: int | None = None
    model: Model = field(default_factory=Model)  # what run.json says of the model (``arg`` is added here)
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    ab: AbTag | None = None


@dataclass
class _Capture:
    """A capture in progress: what its stages share with the failure path that must clean up after them."""

    run_dir: Path
    rep: Reporter
    stage_now: str = "starting"
    server: ServerProcess | None = None
    cohort: Cohort | None = None
    trace_dir: Path | None = None
    window: Window | None = None  # the cohort's attempts, and the window's token counts once it got that far

    def stage(self, name: str) -> None:
        self.stage_now = name
        self.rep.stage(name)


def _server_env(cmd_env: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in cmd_env.items():
        if key == "PYTHONPATH" and env.get("PYTHONPATH"):
            value = value + os.pathsep + env["PYTHONPATH"]
        env[key] = value
    return env


def _rel_files(run_dir: Path) -> list[str]:
    return [str(p.relative_to(run_dir)) for p in list_files(run_dir) if p.name != "run.json"]


def _write_metrics(run_dir: Path, cohort: Cohort | None, extra: dict[str, Any]) -> None:
    if cohort is None:
        return
    per_request = cohort.metrics()
    ttfts = [m["ttft_ms"] for m in per_request if m["ttft_ms"] is not None]
    tpots = [m["tpot_ms"] for m in per_request if m["tpot_ms"] is not None]
    data = {"unit": "ms", "clock": "time.perf_counter (client side, includes HTTP/SSE latency)",
            "requests": len(per_request), "ttft_ms_max": max(ttfts) if ttfts else None,
            "tpot_ms_mean": sum(tpots) / len(tpots) if tpots else None, **extra, "per_request": per_request}
    path = run_dir / CLIENT_METRICS
    try:
        with open(path, "x" if not path.exists() else "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
    except OSError as exc:
        raise write_error(path, exc) from exc


def _window_json(window: Window | None) -> dict[str, Any]:
    """The window as client_metrics.json holds it, as in run.json ({} before the cohort stage)."""
    out: dict[str, Any] = msgspec.to_builtins(window) if window is not None else {}
    return out


def _post(server: ServerProcess, path: str, body: dict[str, Any] | None, timeout_s: float,
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


def _cohort_started_together(cohort: Cohort, spec: RunSpec, timeout_s: float, server: ServerProcess, attempt: int,
                             retries: list[CohortRetry], rep: Reporter) -> bool:
    """Send the cohort and wait for every first token; False (streams cancelled, the attempt noted
    in ``retries``) when one stream ran so far ahead of the last that the window might outlast it.
    A stream that already finished counts as far ahead (it has its first token, so the wait goes on)."""
    cohort.start()
    cohort.wait_all_tokens(1, timeout_s, "the first token of every request",
                           check=lambda grace_s=0.0: server.check_alive("the cohort's prefill", grace_s))
    counts = cohort.token_counts()
    lead = ran_ahead(counts, spec.max_tokens, spec.window_tokens)
    if lead is None:
        return True
    cohort.cancel()  # closing the connections makes vLLM abort the requests
    retries.append(CohortRetry(attempt=attempt, tokens_per_request=counts, request_ahead=lead))
    again = "; sending the cohort again" if attempt < COHORT_ATTEMPTS else ""
    rep.info(f"warning: cohort attempt {attempt} of {COHORT_ATTEMPTS}: request {lead} had {counts[lead]} of "
             f"{spec.max_tokens} tokens when the last request got its first token (tokens per request: {counts}); "
             f"the requests did not start together{again}")
    return False


def _record_failure(run: _Capture, why: str) -> str | None:
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
            cohort.cancel(join_s=5.0)
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
            _write_metrics(run_dir, cohort, {"window": _window_json(run.window), "partial": True})
        except CopyprofError as exc:
            problems.append(str(exc))
        fields["files"] = _rel_files(run_dir)
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


def _failure(run: _Capture, exc: BaseException) -> BaseException:
    """Record ``exc`` in run.json and return the error to raise: one line, exit code 3 once a server ran."""
    err: BaseException = exc
    if isinstance(exc, OSError):  # a write or a connection not explained above: still one line, exit 3
        err = CopyprofError(f"{run.stage_now}: {type(exc).__name__}: {exc}", exit_code=EXIT_CAPTURE_FAILED)
    why = ("interrupted (Ctrl-C); server stopped, files kept" if isinstance(exc, KeyboardInterrupt)
           else (str(err).splitlines() or [type(err).__name__])[0])
    unrecorded = _record_failure(run, why)
    if isinstance(err, CopyprofError):
        if err.exit_code != EXIT_CAPTURE_FAILED and run.server is not None:
            err.exit_code = EXIT_CAPTURE_FAILED
        if unrecorded and "run.json" not in str(err):
            err.args = (f"{err}; and run.json could not be updated: {unrecorded}",)
    return err


def _environment(spec: RunSpec, opts: CaptureOptions, rep: Reporter) -> tuple[VllmInfo, list[str], dict[str, Any] | None]:
    """The target vLLM environment (probed before the run directory: a missing vLLM leaves nothing
    behind), the version notes and, on ROCm, kineto's profiler back end and its known defects."""
    rep.stage("probing the vLLM environment")
    info = probe_vllm(opts.python)
    if spec.tp > max(1, len(info.gpus)) and info.gpus:
        raise CopyprofError(f"--tp {spec.tp} needs {spec.tp} GPUs; {opts.python} sees {len(info.gpus)}")
    if spec.tp > 1 and is_cpu_backend(info):
        raise CopyprofError(f"--tp {spec.tp}: {opts.python} has no GPU (vLLM's CPU backend); use --tp 1")
    notes = version_notes(info, str(given(opts.model.model_type) or given(opts.model.name) or ""))
    for note in notes:
        rep.info(f"note: {note}")
    backend = preflight(info.torch_lib, info.torch_hip)
    for line in preflight_lines(backend) if backend else []:
        rep.info(line)
    return info, notes, backend


def _starting_record(spec: RunSpec, opts: CaptureOptions, info: VllmInfo, notes: list[str],
                     backend: dict[str, Any] | None, has_config: bool) -> RunRecord:
    """run.json as the capture starts: what was asked, and the environment it runs in."""
    gpu = info.gpus[0] if info.gpus else None
    model = msgspec.structs.replace(opts.model, arg=spec.model, **({"config": MODEL_CONFIG} if has_config else {}))
    return RunRecord(
        copyprof_version=__version__, engine="vllm", status=STATUS_STARTING, label=opts.label,
        command=list(opts.command), model=model,
        tp=spec.tp, concurrency=spec.concurrency, prefix_len=spec.prefix_len,
        suffix_len=spec.suffix_len, steps=spec.steps, profiler=spec.profiler, dummy=spec.dummy,
        workload=Workload(max_tokens=spec.max_tokens, min_tokens=spec.max_tokens, ignore_eos=True,
                          max_model_len=spec.max_model_len, seed=opts.seed, warmup_requests=1,
                          prompt="token ids: shared prefix + distinct suffix per request"),
        spec=asdict(spec), host=socket.gethostname(), platform=platform.platform(),
        python=opts.python, env=kernel_env(dict(os.environ)), ab=opts.ab,
        started=utc_now_iso(), finished=None, files=[],
        vllm=Vllm(version=info.vllm_version, commit=info.commit, distribution=info.vllm_dist,
                  python_version=info.python_version),
        torch=Torch(version=info.torch_version, hip=info.torch_hip, cuda=info.torch_cuda),
        aiter_version=info.aiter_version,
        gpu=Gpu(name=gpu["name"], arch=gpu["arch"], count=len(info.gpus)) if gpu else None,
        probe=info.to_json(), notes=notes, profiler_backend=backend,
    )


def _new_run(spec: RunSpec, opts: CaptureOptions, info: VllmInfo, notes: list[str],
             backend: dict[str, Any] | None) -> Path:
    """The run directory, with the model's config.json (so `report RUN` needs no --model on another
    machine) and the starting run.json."""
    run_dir = new_run_dir(opts.out, opts.label)
    config = Path(spec.model) / "config.json"
    has_config = config.is_file()
    if has_config:
        shutil.copyfile(config, run_dir / MODEL_CONFIG)
    write_run_json(run_dir, _starting_record(spec, opts, info, notes, backend, has_config))
    return run_dir


def _boot(run: _Capture, spec: RunSpec, opts: CaptureOptions, info: VllmInfo) -> ServerCommand:
    """Start the server in its own process group and wait for ``/health``; run.json says the command,
    the group and the boot time, and ``status: capturing``."""
    port = free_loopback_port()
    cmd = build_server_command(spec, info, run.run_dir, port, hook_dir=HOOK_DIR)
    run.trace_dir = cmd.trace_dir
    cmd.trace_dir.mkdir()
    update_run_json(run.run_dir, server=Server(
        argv=cmd.argv, env_added=cmd.env, port=port, profiler_style=cmd.style, vllm_profiler=cmd.vllm_profiler,
        window_control=cmd.window_control, profiler_config=cmd.profiler_config, notes=cmd.notes, log=SERVER_LOG))
    if spec.profiler != "torch" and shutil.which(cmd.argv[0]) is None:
        raise CopyprofError(f"--profiler {spec.profiler}: `{cmd.argv[0]}` is not on PATH (ROCm: rocprofiler-sdk "
                            "ships rocprofv3; CUDA: Nsight Systems ships nsys)", exit_code=EXIT_CAPTURE_FAILED)
    server = run.server = ServerProcess(cmd.argv, _server_env(cmd.env), run.run_dir / SERVER_LOG, port)
    run.stage(f"server boot (vLLM {info.vllm_version}, port {port})")
    server.start()
    update_run_json(run.run_dir, server_pid=server.pid, server_pgid=server.pid)  # its own group: pgid == pid
    boot_s = server.wait_healthy(opts.boot_timeout_s, on_tick=run.rep.detail)
    server.watch_engine_processes()
    update_run_json(run.run_dir, status=STATUS_CAPTURING, server_pid=server.pid, boot_s=round(boot_s, 1))
    return cmd


def _warm_up(run: _Capture, prompt: list[int], opts: CaptureOptions) -> None:
    """One request that fills the prefix cache, so the cohort's prefills share it."""
    assert run.server is not None
    run.stage("warm-up: one request fills the prefix cache")
    status, body = _post(run.server, "/v1/completions", completion_body(prompt, 2, stream=False), opts.timeout_s,
                         "warm-up")
    if status != 200:
        raise CopyprofError(f"warm-up request failed: HTTP {status}: {body[:300].decode('utf-8', 'replace')}",
                            exit_code=EXIT_CAPTURE_FAILED)
    run.server.check_alive("warm-up")


def _admit_cohort(run: _Capture, spec: RunSpec, opts: CaptureOptions, prompts: list[list[int]]) -> Cohort:
    """The cohort, every stream past its first token and none far ahead (sent again when they did
    not start together, at most COHORT_ATTEMPTS times)."""
    assert run.server is not None
    run.stage(f"cohort: {spec.concurrency} streams, waiting for every first token")
    run.window = Window()
    retries = run.window.cohort_retries
    for attempt in range(1, COHORT_ATTEMPTS + 1):
        cohort = run.cohort = Cohort(run.server.port, prompts, spec.max_tokens, opts.timeout_s)
        if _cohort_started_together(cohort, spec, opts.timeout_s, run.server, attempt, retries, run.rep):
            return cohort
    last = retries[-1].tokens_per_request
    raise CopyprofError(f"the cohort's {spec.concurrency} requests did not start together in {COHORT_ATTEMPTS} "
                        f"attempts (tokens per request when the last got its first token: {last}, of "
                        f"{spec.max_tokens}): the client may be short of CPU; or raise --decode-tokens",
                        exit_code=EXIT_CAPTURE_FAILED)


def _profile_window(run: _Capture, cmd: ServerCommand, spec: RunSpec, opts: CaptureOptions, cohort: Cohort) -> None:
    """``/start_profile``, ``steps`` decode steps' worth of tokens on every stream, ``/stop_profile``;
    run.json's ``window`` says the token counts at each point."""
    server = run.server
    assert server is not None and run.window is not None
    at_start = cohort.token_counts()
    run.stage(f"profile window: {spec.steps} decode steps")
    body_req = {"max_iterations": spec.steps} if cmd.window_control == "max_iterations" else None
    t0 = time.monotonic()
    status, body = _post(server, "/start_profile", body_req, opts.timeout_s, "the profile window")
    if status != 200:
        server.check_alive("the profile window", grace_s=2.0)  # a 500 is what a dead engine gives: name it
        raise CopyprofError(f"POST /start_profile answered HTTP {status} (404 means vLLM did not get the profiler "
                            f"configuration): {body[:300].decode('utf-8', 'replace')}",
                            exit_code=EXIT_CAPTURE_FAILED)
    started = cohort.token_counts()
    cohort.wait_all_tokens([c + spec.window_tokens for c in started], opts.timeout_s,
                           f"{spec.steps} decode steps", check=lambda grace_s=0.0: server.check_alive("the profile window", grace_s))
    status, body = _post(server, "/stop_profile", None, opts.timeout_s, "the profile window")
    at_stop = cohort.token_counts()
    intact = all(c < spec.max_tokens for c in at_stop) and not any(r.finished for r in cohort.records)
    run.window = Window(control=cmd.window_control, tokens_at_first_token_barrier=at_start,
                        tokens_at_start_profile=started, tokens_at_stop_profile=at_stop,
                        stop_profile_http=status, window_s=round(time.monotonic() - t0, 3),
                        cohort_intact_through_window=intact, cohort_retries=run.window.cohort_retries,
                        client_longest_stall_s=round(cohort.longest_stall_s, 3))
    update_run_json(run.run_dir, window=run.window)
    if not intact:
        run.rep.info("warning: a request finished inside the window; raise --decode-tokens")


def _flush_traces(run: _Capture, cmd: ServerCommand, spec: RunSpec, opts: CaptureOptions, cohort: Cohort) -> str:
    """Wait until the profiler's files are complete and stop the server; returns how it stopped.
    torch writes its traces while the server runs; rocprofv3 and nsys write theirs when it exits."""
    server = run.server
    assert server is not None
    run.stage("trace flush")
    if spec.profiler == "torch":
        wait_complete(cmd.trace_dir, torch_ready(spec.tp), f"{spec.tp} complete rank trace(s)", opts.timeout_s,
                      check=lambda: server.check_alive("the trace flush"), on_tick=run.rep.detail)
        cohort.cancel()
        return server.stop()
    cohort.cancel()
    how = server.stop(graceful_s=max(60.0, opts.timeout_s))
    ready = rocprof_ready if spec.profiler == "rocprofv3" else nsys_ready
    wait_complete(cmd.trace_dir, ready, f"{spec.profiler} output", opts.timeout_s, on_tick=run.rep.detail)
    if spec.profiler == "nsys":
        nsys_export_sqlite(cmd.trace_dir, opts.timeout_s)
    return how


def _complete(run: _Capture, cmd: ServerCommand, cohort: Cohort, server_stop: str) -> None:
    """The client metrics, the completeness check of the traces, and ``status: complete``."""
    assert run.server is not None
    _write_metrics(run.run_dir, cohort, {"window": _window_json(run.window)})
    traces = [str(p.relative_to(run.run_dir)) for p in rank_traces(list_files(cmd.trace_dir))]
    run.stage("completeness check of the trace")
    completeness = check_capture(cmd.trace_dir)
    if completeness.get("message"):
        run.rep.info(f"warning: {completeness['message']}")
    mark_complete(run.run_dir, server_stop=server_stop, server_exit_code=run.server.exit_code, rank_traces=traces,
                  files=_rel_files(run.run_dir), completeness=completeness,
                  vllm_engine=engine_facts(run.run_dir / SERVER_LOG))


def capture_vllm(spec: RunSpec, opts: CaptureOptions, reporter: Reporter | None = None) -> Path:
    """Run one capture; return its run directory (``status: complete``) or raise (``failed: ...``)."""
    rep = reporter or QuietReporter()
    spec.validate()
    info, notes, backend = _environment(spec, opts, rep)
    run_dir = _new_run(spec, opts, info, notes, backend)
    rep.info(f"run directory: {run_dir}")
    run = _Capture(run_dir, rep)
    try:
        cmd = _boot(run, spec, opts, info)
        prefix, suffixes = build_prompts(spec.prefix_len, spec.suffix_len, spec.concurrency + 1,
                                         opts.vocab_size, seed=opts.seed)
        _warm_up(run, prefix + suffixes[-1], opts)
        cohort = _admit_cohort(run, spec, opts, [prefix + s for s in suffixes[:-1]])
        _profile_window(run, cmd, spec, opts, cohort)
        server_stop = _flush_traces(run, cmd, spec, opts, cohort)
        _complete(run, cmd, cohort, server_stop)
        return run_dir
    except BaseException as exc:
        err = _failure(run, exc)
        if err is exc:
            raise
        raise err from exc
    finally:
        if run.server is not None:
            run.server.stop(graceful_s=30.0)
