"""mypy over the package, started in the background when the suite starts.

Why in the background: the type check is one process of ~20-25 s of CPU. Run as a test it held
an xdist worker that long, at the end or the start of the run; started beside the workers, it
uses the CPU the capture tests leave idle while they wait on copyprof's timeouts against fake
servers (~2 min of a worker's time in all). ``tests/test_types.py`` then only waits for its
answer. A run that does not ask for that test (a path or -k/-m that leaves it out) starts
nothing, and a run without the background process (the test run alone, say) runs mypy in the
test.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(REPO / "pyproject.toml")]
OUT_ENV = "COPYPROF_TYPE_CHECK_OUT"
TEST_FILE = REPO / "tests" / "test_types.py"
# The wrapper writes mypy's output, then its exit code under a temporary name renamed into place,
# so a reader that sees ``rc`` sees all of it.
_WRAPPER = ("import pathlib, subprocess, sys; d = pathlib.Path(sys.argv[1]); "
            "p = subprocess.run(sys.argv[2:], capture_output=True, text=True); "
            "(d / 'output').write_text(p.stdout + p.stderr); (d / 'rc.tmp').write_text(str(p.returncode)); "
            "(d / 'rc.tmp').rename(d / 'rc')")
_started: subprocess.Popen[bytes] | None = None


def _asked_for(config: pytest.Config) -> bool:
    """Whether this run collects the type check: the default test paths, or a path that holds it, and no filter."""
    if config.option.keyword or config.option.markexpr:
        return False
    paths = [Path(a.split("::")[0]).resolve() for a in config.args]
    return not config.args or any(p == TEST_FILE or p in TEST_FILE.parents for p in paths)


def start_in_background(config: pytest.Config) -> None:
    """Start mypy once per run, in the process that starts the others (xdist's controller)."""
    global _started
    if hasattr(config, "workerinput") or OUT_ENV in os.environ or not _asked_for(config):
        return
    if importlib.util.find_spec("mypy") is None:
        return  # the test says so (importorskip)
    out = tempfile.mkdtemp(prefix="copyprof-type-check-")
    _started = subprocess.Popen([sys.executable, "-c", _WRAPPER, out, *COMMAND], cwd=REPO, start_new_session=True)
    os.environ[OUT_ENV] = out


def stop() -> None:
    """At the end of the run: a type check still running (its test deselected or failed early) is stopped."""
    global _started
    if _started is not None:
        if _started.poll() is None:  # the wrapper leads its own group, mypy with it
            os.killpg(_started.pid, signal.SIGKILL)
        _started.wait()
        _started = None
        shutil.rmtree(os.environ.pop(OUT_ENV), ignore_errors=True)


def result(timeout_s: float = 600.0) -> tuple[int, str]:
    """mypy's exit code and output: the background run's, waited for, or a run made here."""
    out = os.environ.get(OUT_ENV)
    if out is None:
        proc = subprocess.run(COMMAND, capture_output=True, text=True, cwd=REPO, timeout=timeout_s)
        return proc.returncode, proc.stdout + proc.stderr
    rc, deadline = Path(out) / "rc", time.monotonic() + timeout_s
    while not rc.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the background type check ({out}) did not finish in {timeout_s:.0f} s")
        time.sleep(0.2)
    return int(rc.read_text()), (Path(out) / "output").read_text()
