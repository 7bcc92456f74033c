"""`copyprof run` lifecycle against a fake vLLM server: success, boot crash, timeout, Ctrl-C, A/B order.

The fake (tests/capture/test_run_fake_server.py) is a real child process speaking HTTP on loopback, so
these tests exercise copyprof's process-group handling, probe, client and run.json updates for
real; only vLLM itself is replaced.
"""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.capture.on_disk import read_run_json
from tests.capture.capture_fault_fake import own_traceback
from tests.capture.test_run_fake_server import write_fake_vllm

REPO = Path(__file__).resolve().parents[2]


def _env(fake_root: Path, mode: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(fake_root), str(REPO)])
    env["FAKE_VLLM_MODE"] = mode
    env["CI"] = "1"  # plain progress lines, no rich live display
    return env


def _run(tmp_path: Path, mode: str, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    fake = write_fake_vllm(tmp_path / "fake")
    cmd = [sys.executable, "-m", "copyprof", "run", "--model", "fake/model", "--tp", "1", "--concurrency", "3",
           "--prefix-len", "32", "--suffix-len", "8", "--steps", "5", "--decode-tokens", "10000",
           "--out", str(tmp_path / "out"), "--boot-timeout", "20", "--timeout", "30", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(fake, mode), cwd=REPO, timeout=timeout)


def _only_run_dir(tmp_path: Path) -> Path:
    dirs = sorted((tmp_path / "out").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_complete_run_records_everything(tmp_path: Path) -> None:
    proc = _run(tmp_path, "ok", "--label", "fake")
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    data = read_run_json(run_dir)
    assert data["status"] == "complete"
    assert data["vllm"]["version"] == "0.32.0" and data["server"]["profiler_style"] == "profiler-config"
    assert data["server"]["window_control"] == "max_iterations"
    assert data["window"]["cohort_intact_through_window"] is True
    assert "server.log" in data["files"] and "client_metrics.json" in data["files"]
    assert len(data["rank_traces"]) == 1 and data["rank_traces"][0] in data["files"]
    with gzip.open(run_dir / data["rank_traces"][0], "rt") as fh:
        names = [e["name"] for e in json.load(fh)["traceEvents"]]
    assert names and set(names) == {"execute_context_0(0)_generation_3(3)"}
    metrics = json.loads((run_dir / "client_metrics.json").read_text())
    assert metrics["requests"] == 3
    for r in metrics["per_request"]:
        assert r["ttft_ms"] > 0 and r["output_tokens"] >= 5 + 1 and len(r["itl_ms"]) == len(r["tokens_per_chunk"]) - 1
    argv = data["server"]["argv"]
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and "--enable-prefix-caching" in argv
    assert data["server_stop"] in ("SIGINT", "SIGTERM", "SIGKILL")
    assert "run" in data["command"]


def test_server_crash_during_boot_fails_with_log_tail(tmp_path: Path) -> None:
    proc = _run(tmp_path, "crash")
    assert proc.returncode == 3
    assert "exited with code 3 during boot" in proc.stderr
    assert "boot line 39" in proc.stderr and "boot line 9" not in proc.stderr.replace("boot line 39", "")
    # The server's traceback is quoted, indented, as evidence; copyprof itself printed none.
    assert "\n    Traceback (most recent call last):\n" in proc.stderr and not own_traceback(proc.stderr)
    data = read_run_json(_only_run_dir(tmp_path))
    assert data["status"].startswith("failed: vLLM server exited with code 3 during boot")
    assert len(data["error_log_tail"]) == 30 and data["error_log_tail"][-1] == "ValueError: fake root cause"
    assert data["files"] == ["server.log"]


def test_boot_timeout_names_what_it_waited_for(tmp_path: Path) -> None:
    proc = _run(tmp_path, "hang", "--boot-timeout", "3")
    assert proc.returncode == 3, proc.stderr
    assert "timed out after 3 s waiting for the vLLM server to answer GET /health" in proc.stderr
    data = read_run_json(_only_run_dir(tmp_path))
    assert data["status"].startswith("failed: timed out after 3 s")
    assert data["server_stop"] == "SIGINT"  # the fake dies on SIGINT: the whole group was signalled


def test_ctrl_c_stops_server_and_records_status(tmp_path: Path) -> None:
    fake = write_fake_vllm(tmp_path / "fake")
    cmd = [sys.executable, "-m", "copyprof", "run", "--model", "m", "--tp", "1", "--concurrency", "2",
           "--out", str(tmp_path / "out"), "--boot-timeout", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(fake, "hang"), cwd=REPO)
    deadline = time.monotonic() + 60
    run_dir = None
    while time.monotonic() < deadline:  # wait until the server is up (its pid is in run.json)
        dirs = list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else []
        if dirs and (dirs[0] / "server.log").exists() and "fake vllm starting" in (dirs[0] / "server.log").read_text():
            run_dir = dirs[0]
            break
        time.sleep(0.2)
    assert run_dir is not None, proc.stderr.read() if proc.poll() is not None else "server never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = read_run_json(run_dir)
    assert data["status"] == "failed: interrupted (Ctrl-C); server stopped, files kept"
    argv = data["server"]["argv"]
    port = argv[argv.index("--port") + 1]
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [ln for ln in out.splitlines() if "api_server" in ln and f"--port {port}" in ln]


def test_server_stops_at_sigint_when_copyprof_ignores_sigint(tmp_path: Path) -> None:
    # Started by nohup or as a script's background job, copyprof inherits SIGINT ignored, and an
    # ignored signal survives exec: unless copyprof's spawn resets it, the server ignores the
    # graceful SIGINT and is only stopped by SIGTERM a grace period (60 s) later.
    fake = write_fake_vllm(tmp_path / "fake")
    ignoring = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "os.execv(sys.executable, [sys.executable, '-m', 'copyprof', *sys.argv[1:]])")
    cmd = [sys.executable, "-c", ignoring, "run", "--model", "fake/model", "--tp", "1", "--concurrency", "2",
           "--prefix-len", "32", "--suffix-len", "8", "--steps", "3", "--decode-tokens", "10000",
           "--out", str(tmp_path / "out"), "--boot-timeout", "20", "--timeout", "30"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(fake, "ok"), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert read_run_json(_only_run_dir(tmp_path))["server_stop"] == "SIGINT"


def test_ab_interleave_runs_abba_with_two_pythons(tmp_path: Path) -> None:
    proc = _run(tmp_path, "ok", "--python", sys.executable, "--python-b", sys.executable, "--label", "A",
                "--label-b", "B", "--repeat", "2", "--interleave", "--steps", "3", timeout=300)
    assert proc.returncode == 0, proc.stderr
    dirs = [Path(p) for p in proc.stdout.strip().splitlines()]
    runs = [read_run_json(d) for d in dirs]
    assert [r["label"] for r in runs] == ["A", "B", "B", "A"]
    assert len({r["ab"]["group"] for r in runs}) == 1 and [r["ab"]["position"] for r in runs] == [0, 1, 2, 3]
    assert all(r["status"] == "complete" for r in runs) and len(set(dirs)) == 4


def test_interleave_without_second_arm_is_a_one_line_error(tmp_path: Path) -> None:
    proc = _run(tmp_path, "ok", "--interleave")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--python-b" in proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["--python", "/nonexistent/python"], "not an executable Python interpreter"),
    (["--steps", "0"], "--steps must be >= 1"),
    # 5 steps need 5 + 4 tokens of slack after the first token and one more: 7 cannot be enough.
    (["--decode-tokens", "7"], "--decode-tokens 7 cannot cover a 5-step window (at least 11"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _run(tmp_path, "ok", *args)
    assert proc.returncode in (2, 3) and message in proc.stderr and "Traceback" not in proc.stderr


def test_requests_too_short_for_the_window_fail_fast(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = _run(tmp_path, "short", "--timeout", "150")
    assert proc.returncode == 3 and "raise --decode-tokens" in proc.stderr, proc.stderr
    # Not the 150 s --timeout: the finished stream is noticed at once (a loaded CI host once took
    # 28 s for the whole run, so the bound is far from both).
    assert time.monotonic() - t0 < 75
    data = read_run_json(_only_run_dir(tmp_path))
    assert data["status"].startswith("failed: request ") and "client_metrics.json" in data["files"]
