"""Shared fixtures: where the public sample traces live, and a CLI runner."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "sample_traces"


def pytest_configure(config: pytest.Config) -> None:
    """Caches written by the tests (and the CLI processes they start) go to a scratch folder,
    never to the user's ~/.cache/copyprof; a test that needs its own sets the variable itself."""
    if "COPYPROF_CACHE_DIR" not in os.environ:
        config._copyprof_cache = tempfile.mkdtemp(prefix="copyprof-test-cache-")  # type: ignore[attr-defined]
        os.environ["COPYPROF_CACHE_DIR"] = config._copyprof_cache  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    scratch = getattr(config, "_copyprof_cache", None)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
        os.environ.pop("COPYPROF_CACHE_DIR", None)


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"shared sample traces not found at {SAMPLES}")
    return SAMPLES


def run_cli(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m copyprof ARGS` in a fresh process, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "copyprof", *args], capture_output=True, text=True, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"copyprof {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def cli_json(*args: str) -> dict:
    return json.loads(run_cli(*args, "--format", "json", check=True).stdout)
