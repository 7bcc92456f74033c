"""Workload pieces: token-ID prompts, request bodies, SSE token counting, model resolution, A/B order,
trace completeness, the roctx hook, and the no-shell rule."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from copyprof.capture.vllm.client import _chunk_tokens, build_prompts, completion_body
from copyprof.capture.vllm.plan import Arm, resolve_model, schedule
from copyprof.capture.vllm.probe import kernel_env
from copyprof.capture.vllm.traces import gzip_complete, rank_traces, wait_complete
from copyprof.errors import CopyprofError

REPO = Path(__file__).resolve().parents[2]


def test_prompts_share_prefix_and_have_distinct_suffixes() -> None:
    prefix, suffixes = build_prompts(100, 10, 17, vocab_size=32000, seed=3)
    assert len(prefix) == 100 and len(suffixes) == 17 and all(len(s) == 10 for s in suffixes)
    assert len({s[0] for s in suffixes}) == 17  # diverge at the first suffix token
    assert all(1000 <= t < 31000 for t in prefix + sum(suffixes, []))
    assert build_prompts(100, 10, 17, 32000, seed=3) == (prefix, suffixes)  # deterministic
    assert build_prompts(100, 10, 17, 32000, seed=4)[0] != prefix


def test_prompts_small_vocab_and_too_small() -> None:
    prefix, suffixes = build_prompts(5, 2, 3, vocab_size=100)
    assert all(0 <= t < 100 for t in prefix + sum(suffixes, []))
    with pytest.raises(CopyprofError, match="too small"):
        build_prompts(5, 2, 300, vocab_size=100)


def test_completion_body_forces_fixed_length_decode() -> None:
    body = completion_body([1, 2, 3], 40)
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == body["min_tokens"] == 40
    assert body["ignore_eos"] is True and body["return_token_ids"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert "stream_options" not in completion_body([1], 2, stream=False)


@pytest.mark.parametrize("chunk, seen, expected", [
    ({"choices": [{"token_ids": [4, 5]}], "usage": {"completion_tokens": 7}}, 5, (2, 7)),
    ({"choices": [{"text": ""}], "usage": {"completion_tokens": 9}}, 7, (2, 9)),
    ({"choices": [{"text": "x"}]}, 3, (1, 4)),
    ({"choices": [], "usage": {"completion_tokens": 9}}, 9, (0, 9)),
])
def test_chunk_token_counting(chunk, seen, expected) -> None:
    assert _chunk_tokens(chunk, seen) == expected


def test_resolve_model_preset_directory_and_id(tmp_path: Path) -> None:
    k3 = resolve_model("kimi-k3")
    assert k3.arg == "moonshotai/Kimi-K3" and k3.kind == "preset" and k3.summary["kda_layers"] == 69
    tiny = resolve_model(str(REPO / "tests" / "vllm_cpu" / "tiny-llama"))
    assert tiny.kind == "directory" and tiny.vocab_size == 32000 and tiny.summary["num_hidden_layers"] == 2
    assert tiny.max_positions == 65536 and k3.max_positions is None  # a preset carries no config positions
    assert resolve_model("org/some-model").kind == "id"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CopyprofError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(CopyprofError, match="not a file"):
        resolve_model(str(tmp_path / "f.txt"))


def test_schedule_orders() -> None:
    a, b = Arm("a", "/pa"), Arm("b", "/pb")
    labels = lambda plan: "".join(x.label for x, _ in plan)  # noqa: E731
    assert labels(schedule([a], 3, False)) == "aaa"
    assert labels(schedule([a, b], 2, False)) == "aabb"
    assert labels(schedule([a, b], 4, True)) == "abbaabba"
    # three arms (a baseline and two candidates): every round runs each arm once, reversed on odd
    # rounds, so each candidate's mean position equals the baseline's over two rounds
    c = Arm("c", "/pc")
    assert labels(schedule([a, b, c], 3, True)) == "abccbaabc"
    assert labels(schedule([a, b, c], 2, False)) == "aabbcc"
    with pytest.raises(CopyprofError, match="second arm"):
        schedule([a], 2, True)
    with pytest.raises(CopyprofError, match="repeat"):
        schedule([a, b], 0, True)


def test_kernel_env_keeps_only_kernel_relevant_variables() -> None:
    env = {"VLLM_ROCM_USE_AITER": "1", "HIP_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "HOME": "/root",
           "PATH": "/bin"}
    assert kernel_env(env) == {"HIP_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "VLLM_ROCM_USE_AITER": "1"}


def test_gzip_completeness(tmp_path: Path) -> None:
    whole = tmp_path / "a.pt.trace.json.gz"
    with gzip.open(whole, "wt") as fh:
        json.dump({"traceEvents": [{"name": "x" * 1000}] * 200}, fh)
    data = whole.read_bytes()
    cut = tmp_path / "b.pt.trace.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    assert gzip_complete(whole) and not gzip_complete(cut)
    assert [p.name for p in rank_traces([whole, tmp_path / "h_1.async_llm.1.pt.trace.json.gz"])] == [whole.name]


def test_wait_complete_times_out_on_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "rank0.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b"{}")[:-4])
    with pytest.raises(CopyprofError, match="timed out after 1 s waiting for traces"):
        wait_complete(tmp_path, lambda files: True, "traces", timeout_s=1.0, stable_s=0.1)
    path.write_bytes(gzip.compress(b"{}"))
    assert wait_complete(tmp_path, lambda files: True, "traces", timeout_s=5.0, stable_s=0.1) == [path]


def test_roctx_hook_wraps_torch_cuda_profiler(tmp_path: Path) -> None:
    """The hook patches a module named torch.cuda.profiler when it is imported (fake torch here)."""
    pkg = tmp_path / "torch" / "cuda"
    pkg.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "profiler.py").write_text("calls = []\ndef start(): calls.append('start')\ndef stop(): calls.append('stop')\n")
    hook = REPO / "copyprof" / "capture" / "vllm" / "rocprof_hook"
    code = ("import torch.cuda.profiler as p\n"
            "try:\n    p.start()\nexcept OSError as e:\n    print('NOLIB', e)\n"
            "print(p.calls, p.start.__module__)\n")
    env = {"PYTHONPATH": f"{hook}:{tmp_path}", "COPYPROF_ROCTX_HOOK": "1", "COPYPROF_ROCTX_LIB": "/nonexistent.so",
           "ROCM_PATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "wrapped torch.cuda.profiler.start/stop" in proc.stderr
    # the original start ran, then the missing roctx library was reported, not hidden
    assert "NOLIB no rocprofiler-sdk roctx library found" in proc.stdout and "['start']" in proc.stdout
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**env, "COPYPROF_ROCTX_HOOK": "0"})
    assert "wrapped" not in off.stderr and "['start'] torch.cuda.profiler" in off.stdout


def test_no_shell_true_anywhere_in_copyprof() -> None:
    pattern = re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|subprocess\.getoutput|subprocess\.getstatusoutput")
    offenders = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "copyprof").rglob("*.py"))
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert offenders == []
