"""Analysis commands run numpy's OpenBLAS with one thread; `run` leaves vLLM's environment alone.

Why: numpy's bundled OpenBLAS starts a thread per further core when numpy is imported, and each
spins for tens of milliseconds looking for work (perf on the 2-core VM: ~50 ms of CPU in
``blas_thread_server`` during a 1 GB report's read, which needs both cores). copyprof does no
linear algebra worth threads, so the commands that only read and analyse ask for one thread
(unless the user chose a number). ``run`` must not: its environment is what the vLLM it starts
inherits, and that process's CPU work is what gets profiled.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import click
import pytest

from copyprof.cli.main import COMMANDS, STARTS_PROGRAMS, CommandList
from tests.conftest import REPO

_THREADS_AT_EXIT = """
    import atexit, os, runpy, sys
    atexit.register(lambda: sys.stderr.write("\\nthreads: %d\\n" % len(os.listdir("/proc/self/task"))))
    sys.argv = ["copyprof", *{argv!r}]
    runpy.run_module("copyprof", run_name="__main__")
"""


@pytest.fixture
def no_blas_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in STARTS_PROGRAMS])
def test_analysis_commands_ask_for_one_blas_thread(command: str, no_blas_setting: None) -> None:
    CommandList().get_command(click.Context(click.Command("x")), command)
    assert os.environ.get("OPENBLAS_NUM_THREADS") == "1"


def test_run_leaves_the_environment_vllm_inherits(no_blas_setting: None) -> None:
    CommandList().get_command(click.Context(click.Command("x")), "run")
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_a_users_own_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    CommandList().get_command(click.Context(click.Command("x")), "report")
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through Linux's /proc")
def test_a_report_process_has_no_blas_threads() -> None:
    """A whole JSON report without the cache, in a fresh interpreter, ends with one thread: no
    OpenBLAS server threads (on a 1-core machine there would be none anyway), no other thread."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    run = REPO / "traces" / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"
    argv = ["report", str(run), "--model", "kimi-k3", "--no-cache", "--format", "json"]
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_THREADS_AT_EXIT.format(argv=argv))],
                          capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "threads: 1", proc.stderr[-2000:]
