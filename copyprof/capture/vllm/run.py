"""One fixed-cohort, decode-only capture from a vLLM server, start to finish.

Sequence (each stage updates ``run.json`` so a crashed run still says how far it got):
probe the vLLM environment -> start the server (own process group, ``server.log``) -> wait for
``/health`` -> warm the prefix cache with one request -> send the cohort at once, streaming ->
when every stream has its first token (all prefills done, the batch is pure decode)
``POST /start_profile {"max_iterations": K}`` -> wait K+ tokens per stream ->
``POST /stop_profile`` -> cancel the streams -> wait until the trace files are complete, stop the
server -> ``client_metrics.json`` and ``status: complete``.

On any failure or Ctrl-C the server group is stopped, every file written so far is kept, and
``status`` becomes ``failed: <why>`` with the server log's tail at the failure in ``error_log_tail``
and what the server printed while copyprof stopped it in ``stop_log_tail``.
"""
from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from copyprof import __version__
from copyprof.rundir.layout import (
    MODEL_CONFIG,
    STATUS_CAPTURING,
    STATUS_STARTING,
    mark_complete,
    new_run_dir,
    update_run_json,
    utc_now_iso,
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
    ran_ahead,
)
from copyprof.capture.vllm.command import (
    RunSpec,
    ServerCommand,
    build_server_command,
    is_cpu_backend,
    version_notes,
)
from copyprof.capture.vllm.drain import close_streams
from copyprof.capture.vllm.failure import failure
from copyprof.capture.vllm.port import reserve_loopback_port
from copyprof.capture.vllm.probe import VllmInfo, kernel_env, probe_vllm
from copyprof.capture.vllm.progress import Capture, QuietReporter, Reporter, rel_files, window_json, write_metrics
from copyprof.capture.vllm.server_log import engine_facts
from copyprof.capture.vllm.server_metrics import WindowCount
from copyprof.capture.vllm.server import (
    SERVER_LOG,
    ServerProcess,
)
from copyprof.capture.vllm.traces import (
    list_files,
    nsys_export_sqlite,
    nsys_ready,
    rank_traces,
    rocprof_ready,
    torch_ready,
    wait_complete,
)
from copyprof.capture.vllm.watched_post import post_watched
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

HOOK_DIR = Path(__file__).resolve().parent / "rocprof_hook"
COHORT_ATTEMPTS = 3  # a cohort whose requests did not start together is sent again, this many times in all


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


def _server_env(cmd_env: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in cmd_env.items():
        if key == "PYTHONPATH" and env.get("PYTHONPATH"):
            value = value + os.pathsep + env["PYTHONPATH"]
        env[key] = value
    return env


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


def _boot(run: Capture, spec: RunSpec, opts: CaptureOptions, info: VllmInfo) -> ServerCommand:
    """Start the server in its own process group and wait for ``/health``; run.json says the command,
    the group and the boot time, and ``status: capturing``."""
    run.port = reserve_loopback_port()
    port = run.port.port
    cmd = build_server_command(spec, info, run.run_dir, port, hook_dir=HOOK_DIR)
    run.trace_dir = cmd.trace_dir
    cmd.trace_dir.mkdir()
    update_run_json(run.run_dir, server=Server(
        argv=cmd.argv, env_added=cmd.env, port=port, profiler_style=cmd.style, vllm_profiler=cmd.vllm_profiler,
        window_control=cmd.window_control, profiler_config=cmd.profiler_config, notes=cmd.notes, log=SERVER_LOG))
    if spec.profiler != "torch" and shutil.which(cmd.argv[0]) is None:
        raise CopyprofError(f"--profiler {spec.profiler}: `{cmd.argv[0]}` is not on PATH (ROCm: rocprofiler-sdk "
                            "ships rocprofv3; CUDA: Nsight Systems ships nsys)", exit_code=EXIT_CAPTURE_FAILED)
    # nsys starts the application through its own launcher, whose process group is not known here:
    # its server's listener is not looked for in the group
    server = run.server = ServerProcess(cmd.argv, _server_env(cmd.env), run.run_dir / SERVER_LOG, port,
                                        own_listener=spec.profiler != "nsys")
    run.stage(f"server boot (vLLM {info.vllm_version}, port {port})")
    server.start()
    update_run_json(run.run_dir, server_pid=server.pid, server_pgid=server.pid)  # its own group: pgid == pid
    boot_s = server.wait_healthy(opts.boot_timeout_s, on_tick=run.rep.detail)
    server.watch_engine_processes()
    update_run_json(run.run_dir, status=STATUS_CAPTURING, server_pid=server.pid, boot_s=round(boot_s, 1))
    return cmd


def _warm_up(run: Capture, prompt: list[int], opts: CaptureOptions) -> None:
    """One request that fills the prefix cache, so the cohort's prefills share it."""
    assert run.server is not None
    run.stage("warm-up: one request fills the prefix cache")
    status, body = post_watched(run.server, "/v1/completions", completion_body(prompt, 2, stream=False), opts.timeout_s,
                         "warm-up")
    if status != 200:
        raise CopyprofError(f"warm-up request failed: HTTP {status}: {body[:300].decode('utf-8', 'replace')}",
                            exit_code=EXIT_CAPTURE_FAILED)
    run.server.check_alive("warm-up")


def _admit_cohort(run: Capture, spec: RunSpec, opts: CaptureOptions, prompts: list[list[int]]) -> Cohort:
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


def _profile_window(run: Capture, cmd: ServerCommand, spec: RunSpec, opts: CaptureOptions, cohort: Cohort) -> None:
    """``/start_profile``, ``steps`` decode steps' worth of tokens on every stream, ``/stop_profile``;
    run.json's ``window`` says the token counts at each point."""
    server = run.server
    assert server is not None and run.window is not None
    at_start = cohort.token_counts()
    run.stage(f"profile window: {spec.steps} decode steps")
    body_req = {"max_iterations": spec.steps} if cmd.window_control == "max_iterations" else None
    t0 = time.monotonic()
    status, body = post_watched(server, "/start_profile", body_req, opts.timeout_s, "the profile window")
    if status != 200:
        server.check_alive("the profile window", grace_s=2.0)  # a 500 is what a dead engine gives: name it
        raise CopyprofError(f"POST /start_profile answered HTTP {status} (404 means vLLM did not get the profiler "
                            f"configuration): {body[:300].decode('utf-8', 'replace')}",
                            exit_code=EXIT_CAPTURE_FAILED)
    started = cohort.token_counts()
    served = WindowCount(server.port, spec.window_tokens * len(started))
    stall = cohort.wait_all_tokens([c + spec.window_tokens for c in started], opts.timeout_s,
                                   f"{spec.steps} decode steps", and_then=served.reached,
                                   check=lambda grace_s=0.0: server.check_alive("the profile window", grace_s))
    status, body = post_watched(server, "/stop_profile", None, opts.timeout_s, "the profile window")
    at_stop = cohort.token_counts()
    intact = all(c < spec.max_tokens for c in at_stop) and not any(r.finished for r in cohort.records)
    run.window = Window(control=cmd.window_control, tokens_at_first_token_barrier=at_start,
                        tokens_at_start_profile=started, tokens_at_stop_profile=at_stop,
                        stop_profile_http=status, window_s=round(time.monotonic() - t0, 3),
                        cohort_intact_through_window=intact, cohort_retries=run.window.cohort_retries,
                        client_longest_stall_s=round(cohort.longest_stall_s, 3),
                        end_judged_by=served.judged_by, server_tokens_at_start_profile=served.at_start,
                        server_tokens_at_window_end=served.latest, client_longest_stall_in_window_s=stall)
    update_run_json(run.run_dir, window=run.window)
    if not intact:
        run.rep.info("warning: a request finished inside the window; raise --decode-tokens")
    for line in run.window.stall_warnings():
        run.rep.info(f"warning: {line}")


def _flush_traces(run: Capture, cmd: ServerCommand, spec: RunSpec, opts: CaptureOptions, cohort: Cohort) -> str:
    """Close the cohort's streams, wait until the profiler's files are complete and stop the
    server; returns how it stopped. torch writes its traces while the server runs; rocprofv3 and
    nsys write theirs when it exits.

    The streams close first: the window is over once /stop_profile has answered, and streams left
    open keep the server decoding their tokens at full speed and copyprof's reader threads
    parsing them, beside the worker that writes the trace. On a 2-core host that held the trace's
    own completeness check (a 0.6 MB gzip read by a main thread that the readers' GIL kept
    waiting) for 3.5-20 s, against 0.5 s with the streams closed."""
    server = run.server
    assert server is not None
    run.stage("trace flush")
    close_streams(cohort, server)
    if spec.profiler == "torch":
        wait_complete(cmd.trace_dir, torch_ready(spec.tp), f"{spec.tp} complete rank trace(s)", opts.timeout_s,
                      check=lambda: server.check_alive("the trace flush"), on_tick=run.rep.detail)
        return server.stop()
    how = server.stop(graceful_s=max(60.0, opts.timeout_s))
    ready = rocprof_ready if spec.profiler == "rocprofv3" else nsys_ready
    wait_complete(cmd.trace_dir, ready, f"{spec.profiler} output", opts.timeout_s, on_tick=run.rep.detail)
    if spec.profiler == "nsys":
        nsys_export_sqlite(cmd.trace_dir, opts.timeout_s)
    return how


def _complete(run: Capture, cmd: ServerCommand, cohort: Cohort, server_stop: str) -> None:
    """The client metrics, the completeness check of the traces, and ``status: complete``."""
    assert run.server is not None
    write_metrics(run.run_dir, cohort, {"window": window_json(run.window)})
    traces = [str(p.relative_to(run.run_dir)) for p in rank_traces(list_files(cmd.trace_dir))]
    run.stage("completeness check of the trace")
    completeness = check_capture(cmd.trace_dir)
    if completeness.get("message"):
        run.rep.info(f"warning: {completeness['message']}")
    mark_complete(run.run_dir, server_stop=server_stop, server_exit_code=run.server.exit_code, rank_traces=traces,
                  files=rel_files(run.run_dir), completeness=completeness,
                  vllm_engine=engine_facts(run.run_dir / SERVER_LOG))


def capture_vllm(spec: RunSpec, opts: CaptureOptions, reporter: Reporter | None = None) -> Path:
    """Run one capture; return its run directory (``status: complete``) or raise (``failed: ...``)."""
    rep = reporter or QuietReporter()
    spec.validate()
    info, notes, backend = _environment(spec, opts, rep)
    run_dir = _new_run(spec, opts, info, notes, backend)
    rep.info(f"run directory: {run_dir}")
    run = Capture(run_dir, rep)
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
        err = failure(run, exc)
        if err is exc:
            raise
        raise err from exc
    finally:
        if run.server is not None:
            run.server.stop(graceful_s=30.0)
        if run.port is not None:
            run.port.release()
