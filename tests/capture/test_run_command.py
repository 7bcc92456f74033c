"""Server command construction per vLLM version and per profiler (no processes started)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from copyprof.capture.vllm.command import RunSpec, build_server_command, parse_version, profiler_style
from copyprof.capture.vllm.probe import VllmInfo
from copyprof.errors import CopyprofError

FIELDS_NEW = ["profiler", "torch_profiler_dir", "torch_profiler_with_stack", "ignore_frontend", "delay_iterations",
              "max_iterations"]
OLD_ENV = ["VLLM_PROFILER_DELAY_ITERS", "VLLM_PROFILER_MAX_ITERS", "VLLM_TORCH_CUDA_PROFILE",
           "VLLM_TORCH_PROFILER_DIR", "VLLM_TORCH_PROFILER_DISABLE_ASYNC_LLM", "VLLM_TORCH_PROFILER_WITH_STACK"]
HOOK = Path("/hook")


def info(version: str, fields: list[str] | None = None, env: list[str] | None = None) -> VllmInfo:
    return VllmInfo(python="/venv/bin/python", vllm_importable=True, vllm_version=version,
                    profiler_config_fields=fields, profiler_env_vars=env)


def build(spec: RunSpec, inf: VllmInfo, tmp_path: Path):
    return build_server_command(spec, inf, tmp_path, 8123, hook_dir=HOOK)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("text, expected", [
    ("0.32.0", (0, 32, 0)), ("0.11.1rc2.dev5+g1234abc.rocm700", (0, 11, 1)), ("v0.13", (0, 13, 0)),
    ("dev", None), (None, None),
])
def test_parse_version(text, expected) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("version, style", [
    ("0.12.0", "env"), ("0.11.2", "env"), ("0.13.0", "profiler-config"), ("0.32.0", "profiler-config"),
    ("0.33.0+g4ba787ec9", "profiler-config"),
])
def test_style_follows_the_0_13_boundary(version: str, style: str) -> None:
    assert profiler_style(info(version)) == style


def test_probe_fields_win_over_version() -> None:
    # A dev build whose version string is unparsable but which has ProfilerConfig
    assert profiler_style(info("dev", fields=FIELDS_NEW)) == "profiler-config"
    with pytest.raises(CopyprofError, match="cannot tell the vLLM version"):
        profiler_style(info("dev"))


def test_new_vllm_torch_profiler(tmp_path: Path) -> None:
    spec = RunSpec(model="/models/k3", tp=8, concurrency=16, steps=64, extra_args=("--enforce-eager",))
    cmd = build(spec, info("0.32.0", FIELDS_NEW), tmp_path)
    argv = cmd.argv
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == "/models/k3" and flag(argv, "--tensor-parallel-size") == "8"
    assert flag(argv, "--max-num-seqs") == "16" and flag(argv, "--cudagraph-capture-sizes") == "16"
    assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == "8123"
    assert "--enable-prefix-caching" in argv and "--load-format" not in argv
    assert int(flag(argv, "--max-model-len")) >= 63911 + 4089 + spec.max_tokens
    cfg = json.loads(flag(argv, "--profiler-config"))
    assert cfg == {"profiler": "torch", "torch_profiler_dir": str(tmp_path.resolve() / "torch"),
                   "torch_profiler_with_stack": False, "ignore_frontend": True, "max_iterations": 64}
    assert argv[-1] == "--enforce-eager" and cmd.env == {} and cmd.window_control == "max_iterations"
    assert not any("VLLM_TORCH" in k for k in cmd.env)


def test_new_vllm_without_max_iterations_field_lets_copyprof_stop(tmp_path: Path) -> None:
    cmd = build(RunSpec(model="m"), info("0.13.0", ["profiler", "torch_profiler_dir"]), tmp_path)
    cfg = json.loads(flag(cmd.argv, "--profiler-config"))
    assert cfg == {"profiler": "torch", "torch_profiler_dir": str(tmp_path.resolve() / "torch")}
    assert cmd.window_control == "client"


def test_old_vllm_uses_environment(tmp_path: Path) -> None:
    spec = RunSpec(model="m", concurrency=24, steps=32, with_stack=True)
    cmd = build(spec, info("0.12.0", env=OLD_ENV), tmp_path)
    assert "--profiler-config" not in cmd.argv
    assert cmd.env == {"VLLM_TORCH_PROFILER_DIR": str(tmp_path.resolve() / "torch"),
                       "VLLM_TORCH_PROFILER_WITH_STACK": "1", "VLLM_TORCH_PROFILER_DISABLE_ASYNC_LLM": "1",
                       "VLLM_PROFILER_MAX_ITERS": "32"}
    assert cmd.window_control == "max_iterations" and cmd.style == "env"
    assert flag(cmd.argv, "--cudagraph-capture-sizes") == "24"


def test_very_old_vllm_compilation_config_and_client_window(tmp_path: Path) -> None:
    cmd = build(RunSpec(model="m", concurrency=16), info("0.10.1", env=["VLLM_TORCH_PROFILER_DIR"]), tmp_path)
    assert json.loads(flag(cmd.argv, "--compilation-config")) == {"cudagraph_capture_sizes": [16]}
    assert "--cudagraph-capture-sizes" not in cmd.argv
    assert cmd.window_control == "client" and "VLLM_PROFILER_MAX_ITERS" not in cmd.env


def test_user_graph_flags_are_not_overridden(tmp_path: Path) -> None:
    spec = RunSpec(model="m", extra_args=("-cc", '{"cudagraph_mode": "NONE"}'))
    argv = build(spec, info("0.32.0", FIELDS_NEW), tmp_path).argv
    assert "--cudagraph-capture-sizes" not in argv and argv[-2:] == ["-cc", '{"cudagraph_mode": "NONE"}']


def test_dummy_adds_load_format_and_skip_tokenizer(tmp_path: Path) -> None:
    argv = build(RunSpec(model="/cfg", dummy=True), info("0.32.0", FIELDS_NEW), tmp_path).argv
    i = argv.index("--load-format")
    assert argv[i:i + 3] == ["--load-format", "dummy", "--skip-tokenizer-init"]


def test_rocprofv3_wraps_server_and_uses_cuda_kind(tmp_path: Path) -> None:
    spec = RunSpec(model="m", profiler="rocprofv3", rocprof_formats=("csv", "rocpd"), steps=48)
    cmd = build(spec, info("0.32.0", FIELDS_NEW), tmp_path)
    argv = cmd.argv
    sep = argv.index("--")
    head, server = argv[:sep], argv[sep + 1:]
    assert head[0] == "rocprofv3"
    for opt in ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace", "--selected-regions"):
        assert opt in head
    assert flag(head, "-d") == str(tmp_path.resolve() / "rocprofv3")
    assert head[head.index("-f") + 1:] == ["csv", "rocpd"]
    assert server[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert json.loads(flag(server, "--profiler-config")) == {"profiler": "cuda", "max_iterations": 48}
    assert cmd.env == {"COPYPROF_ROCTX_HOOK": "1", "PYTHONPATH": "/hook"} and cmd.vllm_profiler == "cuda"


def test_nsys_wraps_server_with_capture_range(tmp_path: Path) -> None:
    cmd = build(RunSpec(model="m", profiler="nsys"), info("0.32.0", FIELDS_NEW), tmp_path)
    sep = cmd.argv.index("--")
    head = cmd.argv[:sep]
    assert head[:2] == ["nsys", "profile"]
    assert "--capture-range=cudaProfilerApi" in head and "--cuda-graph-trace=node" in head
    assert flag(head, "-o") == str(tmp_path.resolve() / "nsys" / "profile")
    assert json.loads(flag(cmd.argv, "--profiler-config"))["profiler"] == "cuda"
    assert "COPYPROF_ROCTX_HOOK" not in cmd.env


def test_old_vllm_cuda_profiler_env(tmp_path: Path) -> None:
    cmd = build(RunSpec(model="m", profiler="nsys"), info("0.11.0", env=OLD_ENV), tmp_path)
    assert cmd.env["VLLM_TORCH_CUDA_PROFILE"] == "1" and "VLLM_TORCH_PROFILER_DIR" not in cmd.env
    with pytest.raises(CopyprofError, match="no CUDA-profiler hook"):
        build(RunSpec(model="m", profiler="nsys"), info("0.6.0", env=["VLLM_TORCH_PROFILER_DIR"]), tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": 0}, "--concurrency must be >= 1"),
    ({"suffix_len": 0}, "--suffix-len"),
    ({"profiler": "perf"}, "unknown profiler"),
    ({"steps": 64, "decode_tokens": 10}, "cannot cover"),
])
def test_spec_validation(kwargs, message) -> None:
    with pytest.raises(CopyprofError, match=re.escape(message)):
        RunSpec(model="m", **kwargs).validate()


def test_default_tokens_outlast_a_slow_window_start_within_the_models_positions() -> None:
    # 2*steps + 4096 per request: 1048 ran out before a 12-step window on a loaded CPU backend
    # (~115 tokens/s per stream, the profiler's start taking seconds). Never past the model's
    # positions, where the config says them: vLLM refuses a --max-model-len above them.
    spec = RunSpec(model="m", prefix_len=64, suffix_len=16, steps=12)
    assert spec.max_tokens == 24 + 4096 and spec.max_model_len == 64 + 16 + 24 + 4096 + 16
    tiny = RunSpec(model="m", prefix_len=64, suffix_len=16, steps=12, model_max_positions=2048)
    assert tiny.max_tokens == 2048 - 64 - 16 - 16 and tiny.max_model_len == 2048
    # A prompt that leaves no room for the window: the cap is not applied, vLLM says why it refuses.
    assert RunSpec(model="m", prefix_len=2040, suffix_len=16, steps=12, model_max_positions=2048).max_tokens == 24 + 4096
    assert RunSpec(model="m", steps=12, decode_tokens=40, model_max_positions=2048).max_tokens == 40


def test_argv_is_a_list_of_strings(tmp_path: Path) -> None:
    for prof in ("torch", "rocprofv3", "nsys"):
        cmd = build(RunSpec(model="a model; rm -rf /", profiler=prof), info("0.32.0", FIELDS_NEW), tmp_path)
        assert all(isinstance(a, str) for a in cmd.argv)
        assert "a model; rm -rf /" in cmd.argv  # passed as one argument, never interpreted


def test_engine_replica_dispatches_to_run_replica(monkeypatch, tmp_path: Path) -> None:
    from click.testing import CliRunner

    import copyprof.capture.replica as replica
    from copyprof.cli.main import cli

    seen: dict = {}

    def fake_run_replica(layout, **kwargs):
        seen.update(kwargs, layout=layout)
        return [tmp_path / "a", tmp_path / "b"]

    monkeypatch.setattr(replica, "run_replica", fake_run_replica)
    res = CliRunner().invoke(cli, ["run", "--engine", "replica", "--model", "kimi-k3", "--tp", "8", "--concurrency",
                                   "24", "--device", "cpu", "--arm", "both", "--eager", "--steps", "7",
                                   "--timing-blocks", "0", "--out", str(tmp_path), "--label", "rep"])
    assert res.exit_code == 0, res.output
    assert seen["layout"] == "kimi-k3" and seen["tp"] == 8 and seen["concurrency"] == 24
    assert seen["device"] == "cpu" and seen["arms"] == ("baseline", "candidate") and seen["graph"] is False
    assert seen["steps"] == 7 and seen["timing_blocks"] == 0 and seen["out"] == str(tmp_path)
    assert seen["label"] == "rep"
    assert res.stdout.strip().splitlines() == [str(tmp_path / "a"), str(tmp_path / "b")]


# ---------------------------------------------------------------- no GPU, no vLLM, no --tp
def test_cpu_backend_gets_a_kv_fraction_that_fits_what_is_free(tmp_path: Path, monkeypatch) -> None:
    """vLLM's CPU backend reserves --gpu-memory-utilization (default 0.9) of *host* memory and
    refuses to boot when less is free; copyprof passes a fraction sized from MemAvailable."""
    from copyprof.capture.vllm import command as vllm_command

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:    6000000 kB\n")
    assert vllm_command.cpu_kv_fraction(str(meminfo)) == pytest.approx(0.7 * 0.25)
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   24000000 kB\n")
    assert vllm_command.cpu_kv_fraction(str(meminfo)) == vllm_command.CPU_KV_FRACTION_MAX
    assert vllm_command.cpu_kv_fraction(str(tmp_path / "absent")) == 0.25
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu = info("0.32.0", FIELDS_NEW)  # no GPU, torch built for neither CUDA nor HIP
    cmd = build(RunSpec(model="m", tp=1), cpu, tmp_path)
    assert 0.05 <= float(flag(cmd.argv, "--gpu-memory-utilization")) <= 0.5
    assert any("CPU backend" in n for n in cmd.notes)
    # the user's own choice wins, and a GPU run is left alone
    mine = build(RunSpec(model="m", tp=1, extra_args=("--gpu-memory-utilization=0.1",)), cpu, tmp_path)
    assert [a for a in mine.argv if a.startswith("--gpu-memory-utilization")] == ["--gpu-memory-utilization=0.1"]
    gpu = VllmInfo(python="/p", vllm_importable=True, vllm_version="0.32.0", profiler_config_fields=FIELDS_NEW,
                   torch_cuda="13.0", gpus=[{"name": "NVIDIA H200", "arch": "sm_90"}])
    assert "--gpu-memory-utilization" not in build(RunSpec(model="m", tp=1), gpu, tmp_path).argv


def test_version_notes_say_which_vllm_still_has_kimis_copies() -> None:
    from copyprof.capture.vllm.command import version_notes

    assert "#50592" in version_notes(info("0.32.0"), "kimi-k3")[0] and "<= 0.30.0" in version_notes(
        info("0.32.0"), "kimi_k3")[0]
    assert "predates PR #50592" in version_notes(info("0.30.0"), "kimi_linear")[0]
    assert version_notes(info("0.32.0"), "qwen3_next") == []  # #50592 is about Kimi's layers only
    assert version_notes(info("dev"), "kimi-k3") == []  # an unreadable version is not guessed


def test_tp_defaults_to_the_models_serving_tp() -> None:
    from copyprof.models.presets import PRESETS, default_tp

    assert default_tp("kimi-k3")[0] == 8 and default_tp("qwen3-next-80b-a3b")[0] == 4
    assert default_tp("./tiny-llama")[0] == 1 and default_tp("org/some-model")[0] == 1
    assert all(default_tp(name)[1] for name in PRESETS)  # every preset says why


def test_run_without_vllm_leaves_no_run_directory(tmp_path: Path) -> None:
    """The probe runs before the run directory is made: this interpreter has no vLLM, so the run
    fails in one line and --out stays empty (and --tp, not given, defaults to 1 with a note)."""
    import sys

    from tests.conftest import REPO, run_cli

    out = tmp_path / "out"
    out.mkdir()
    proc = run_cli("run", "--model", str(REPO / "tests" / "vllm_cpu" / "tiny-llama"), "--python", sys.executable,
                   "--out", str(out), "--dummy")
    assert proc.returncode != 0 and "vLLM is not importable" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and "note: --tp 1" in proc.stderr
    assert list(out.iterdir()) == []
